"""Real and padding regions of one host-dim group, as boxes of digit ranges.

A group is the set of device dims ("digits") that step along one host dim. Digit
``i`` (finest first) contributes ``c_i * steps[i]`` to the host coordinate. A
position is real iff every partial sum ``P_i = sum_{k<=i} c_k * steps[k]`` is below
the next coarser step, and the whole sum is below ``bound`` (the host size)
(docs/design.md section 4). The real and padding positions are each a disjoint union
of boxes; a box holds one ``(start, count)`` range per digit.
"""

from __future__ import annotations

from collections.abc import Sequence

Box = tuple[tuple[int, int], ...]


def split_group(steps: Sequence[int], sizes: Sequence[int], bound: int) -> tuple[list[Box], list[Box]]:
    """Split the digit space of a group into (real boxes, padding boxes)."""
    return _split(tuple(steps), tuple(sizes), len(steps), bound)


def _split(steps: tuple[int, ...], sizes: tuple[int, ...], n: int, limit: int) -> tuple[list[Box], list[Box]]:
    """Boxes over digits ``[0, n)`` whose partial sum ``P_{n-1}`` is below ``limit``."""
    if n == 0:
        return ([()], []) if limit > 0 else ([], [()])
    step, size = steps[n - 1], sizes[n - 1]
    full_lower: Box = tuple((0, sizes[k]) for k in range(n - 1))
    whole, rest = divmod(max(limit, 0), step)
    real: list[Box] = []
    pad: list[Box] = []
    count = min(whole, size)
    if count > 0:  # this digit below `whole`: the finer digits only obey their own bounds
        lower_real, lower_pad = _split(steps, sizes, n - 1, step)
        real += [b + ((0, count),) for b in lower_real]
        pad += [b + ((0, count),) for b in lower_pad]
    if whole < size:
        if rest > 0:  # this digit at `whole`: the finer digits must stay below `rest`
            lower_real, lower_pad = _split(steps, sizes, n - 1, rest)
            real += [b + ((whole, 1),) for b in lower_real]
            pad += [b + ((whole, 1),) for b in lower_pad]
            if whole + 1 < size:
                pad.append(full_lower + ((whole + 1, size - whole - 1),))
        else:
            pad.append(full_lower + ((whole, size - whole),))
    return real, pad


def box_volume(box: Box) -> int:
    volume = 1
    for _, count in box:
        volume *= count
    return volume
