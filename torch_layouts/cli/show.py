"""``show``: a layout as text — its notation, dims, padding, DMA program and a map of device memory.

The memory map follows CuTe's ``print_layout``: a grid whose rows are the device
positions of all device dims but the last and whose columns are the last device
dim; each cell holds the row-major host index stored there, or ``pad``.
"""

from __future__ import annotations

import argparse
import math

from ..core import family as families
from ..core.layout import DeviceLayout, contiguous_strides
from ..dma import dma_program
from .specs import UsageError, check_output, layout_from_args, write_error

PAD = "pad"
ELIDED = "..."


def summary(layout: DeviceLayout) -> str:
    """Notation, host tensor, device_size/stride_map, padded size and storage efficiency."""
    host = layout.host_size
    real = math.prod(host)
    device = layout.device_numel
    rows = [
        ("layout", layout.describe()),
        ("class", type(layout).__name__),
        ("host", f"size {list(host)}, stride {list(layout.host_stride)}, {_dtype(layout)}, {real} elements "
                 f"({real * layout.element_size} bytes)"),
        ("device_size", str(list(layout.device_size))),
        ("stride_map", str(list(layout.stride_map))),
        ("padded size", f"{device} elements ({layout.nbytes} bytes), {device - real} of them padding "
                        f"(pad value {layout.pad_value!r})"),
        ("efficiency", f"{_percent(real, device)} ({real} real / {device} device elements)"),
        *family_facts(layout),
    ]
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def family_facts(layout: DeviceLayout) -> list[tuple[str, str]]:
    """What the layout's family says about it in its own vocabulary (its ``Family.facts``)."""
    family = families.of(layout)
    return [] if family is None else family.facts(layout)


def program_text(layout: DeviceLayout, direction: str = "h2d", max_lines: int = 0) -> str:
    """The DMA program as loop code; ``max_lines > 0`` keeps that many lines and says what was cut."""
    lines = str(dma_program(layout, direction=direction)).splitlines()
    if 0 < max_lines < len(lines):
        cut = len(lines) - max_lines
        lines = lines[:max_lines] + [f"# ... {cut} more line(s): `python -m torch_layouts dma` prints all"]
    return "\n".join(lines)


def memory_map(layout: DeviceLayout, max_rows: int = 32, max_cols: int = 16) -> str:
    """The device memory as a grid of host indices (``pad`` for padding).

    Beyond ``max_rows``/``max_cols`` (0 = no limit) the grid keeps its first and last
    rows/columns (three quarters head, one quarter tail) and marks the gap with ``...``.
    """
    cols = layout.device_size[-1]
    lead = layout.device_size[:-1]
    rows = math.prod(lead)
    row_ids, col_ids = _kept(rows, max_rows), _kept(cols, max_cols)
    held = _host_indices(layout, [r * cols + c for r in row_ids if r is not None for c in col_ids if c is not None])
    cells = [[ELIDED] * len(col_ids) if r is None else
             [ELIDED if c is None else PAD if held[r * cols + c] < 0 else str(held[r * cols + c]) for c in col_ids]
             for r in row_ids]
    labels = [ELIDED if r is None else _coords(r, lead) for r in row_ids]
    header = [ELIDED if c is None else str(c) for c in col_ids]
    width = max(len(c) for c in [PAD, *header, *(c for row in cells for c in row)])
    label_width = max(len(label) for label in ["row", *labels])

    def line(label: str, values: list[str]) -> str:
        return f"{label:>{label_width}}  " + " ".join(f"{v:>{width}}" for v in values)

    out = [f"device memory map: {rows} row(s) = device dims {list(lead)}, {cols} column(s) = device dim "
           f"{len(lead)}; each cell is the row-major host index held there, or {PAD}{_example(layout.host_size)}",
           line("row", header)]
    out += [line(label, row) for label, row in zip(labels, cells)]
    elided = [f"{n - sum(i is not None for i in ids)} of {n} {what}"
              for what, n, ids in (("rows", rows, row_ids), ("columns", cols, col_ids)) if None in ids]
    if elided:
        out.append(f"not shown ({ELIDED}): {' and '.join(elided)}; --rows 0 --cols 0 print everything")
    return "\n".join(out)


def _host_indices(layout: DeviceLayout, offsets: list[int]) -> dict[int, int]:
    """Row-major host index (-1 for padding) at each device offset; point queries when only a
    few of a large layout's positions are shown."""
    if 4 * len(offsets) >= layout.device_numel:
        host_map = layout.host_map().tolist()
        return {offset: host_map[offset] for offset in offsets}
    strides = contiguous_strides(layout.host_size)
    out = {}
    for offset in offsets:
        index = layout.host_index(offset)
        out[offset] = -1 if index is None else sum(i * s for i, s in zip(index, strides))
    return out


def _kept(n: int, limit: int) -> list[int | None]:
    """Indices shown out of ``n``: all, or a head and a tail around a ``None`` gap marker."""
    if limit <= 0 or n <= limit:
        return list(range(n))
    tail = max(1, limit // 4)
    return [*range(limit - tail), None, *range(n - tail, n)]


def show_text(layout: DeviceLayout, max_rows: int = 32, max_cols: int = 16, dma_lines: int = 40) -> str:
    """Everything ``show`` prints."""
    return "\n\n".join([
        summary(layout),
        "DMA program (host -> device):\n" + program_text(layout, "h2d", dma_lines),
        memory_map(layout, max_rows, max_cols),
    ])


def _coords(row: int, lead: tuple[int, ...]) -> str:
    coords = []
    for extent in reversed(lead):
        row, c = divmod(row, extent)
        coords.append(c)
    return "[" + ",".join(map(str, reversed(coords))) + "]"


def _example(host_size: tuple[int, ...]) -> str:
    """How a row-major host index reads, with the last element as the example."""
    last = math.prod(host_size) - 1
    if last < 1 or len(host_size) < 2:
        return ""
    index, rest = [], last
    for extent in reversed(host_size):
        rest, i = divmod(rest, extent)
        index.append(i)
    return f" (host size {list(host_size)}: {last} = {tuple(reversed(index))})"


def _dtype(layout: DeviceLayout) -> str:
    return str(layout.dtype).removeprefix("torch.")


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def run(args: argparse.Namespace) -> int:
    """The ``show`` subcommand: pictures first, so a bad output path fails before any output."""
    pictures = [(path, fmt) for path, fmt in ((args.png, "png"), (args.svg, "svg")) if path]
    for path, _ in pictures:
        check_output(path)
    layout = layout_from_args(args)
    text = show_text(layout, args.rows, args.cols, args.dma_lines)
    if pictures:
        from .. import viz  # matplotlib loads only when a picture is asked for

        for path, fmt in pictures:
            try:
                viz.draw(layout, path, fmt=fmt)
            except OSError as err:
                raise write_error(path, err) from None
            except ValueError as err:  # too large to draw
                raise UsageError(str(err)) from None
    print(text)
    for path, _ in pictures:
        print(f"\nwrote {path}")
    return 0
