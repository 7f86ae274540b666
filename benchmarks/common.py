"""Timing helpers: every figure is a ratio to a baseline timed in the same process.

Target and baselines run interleaved (target, baseline, target, ...) so that drift in
machine load hits them alike; we report the ratio of minima and the ratio of medians.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

GOALS = {"runs": 1.15, "transposes": 1.3}  # ours / memcpy, by how the layout moves bytes
PEER_GOAL = 1.0  # ours / the same repack written as PyTorch strided view copies
WARM_BYTES = 256 << 20  # copies below this are timed warm (``compare_copy``); larger ones leave no cache
WARM_RUNS = 3  # untimed runs before a warm timing: this VM's L3 keeps a 32 MiB copy's buffers after 2-3


@dataclass
class Figure:
    name: str
    target: float | None  # the ratio to stay at or below (None: reported only)
    ratio_min: float
    ratio_median: float
    target_ms: float  # min time of the measured operation
    baseline_ms: float  # min time of the baseline
    baseline: str
    note: str = ""

    @property
    def met(self) -> bool:
        return self.target is None or self.ratio_min <= self.target

    def as_dict(self) -> dict:
        return {**asdict(self), "met": self.met}


@dataclass
class CopyFigure:
    """One copy against memcpy of the same bytes and against its PyTorch peer (ratios of best times)."""

    name: str
    direction: str  # H2D, D2H or D2D
    kind: str  # "runs" (goal GOALS["runs"]) or "transposes"
    threads: int
    mib: float  # host bytes moved, in MiB
    ours_ms: float
    memcpy_ms: float
    peer_ms: float
    vs_memcpy: float
    vs_memcpy_median: float
    vs_peer: float
    vs_peer_median: float
    note: str = ""

    @property
    def memcpy_goal(self) -> float:
        return GOALS[self.kind]

    @property
    def peer_goal(self) -> float:
        return PEER_GOAL

    @property
    def met(self) -> bool:
        return self.vs_memcpy <= self.memcpy_goal and self.vs_peer <= self.peer_goal

    def as_dict(self) -> dict:
        return {**asdict(self), "memcpy_goal": self.memcpy_goal, "peer_goal": self.peer_goal, "met": self.met}


def interleaved(fns: Sequence[Callable[[], object]], repeat: int, warmup: int = 2,
                warm: bool = False) -> list[list[float]]:
    """Seconds per run of each of ``fns``, run round-robin ``repeat`` times after ``warmup`` rounds.

    Each run starts after ``gc.collect()``; the objects alive before the first run are frozen
    meanwhile (``gc.freeze``), so those collections cost microseconds, not a full heap walk.
    With ``warm``, ``WARM_RUNS`` untimed runs of the same function come right before each timed
    one, so every function finds its own buffers where a loop of it would leave them, whatever the
    others touched in between.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    gc.collect()
    gc.freeze()
    try:
        for _ in range(repeat):
            for fn, out in zip(fns, times):
                gc.collect()
                for _ in range(WARM_RUNS if warm else 0):
                    fn()
                start = time.perf_counter()
                fn()
                out.append(time.perf_counter() - start)
    finally:
        gc.unfreeze()
    return times


def compare(name: str, target: float | None, fn: Callable[[], object], baseline: Callable[[], object],
            baseline_name: str, repeat: int = 15, warmup: int = 2, note: str = "") -> Figure:
    """Time ``fn`` against ``baseline`` interleaved; return their ratio as a Figure."""
    ours, theirs = interleaved((fn, baseline), repeat, warmup)
    return Figure(name, target, min(ours) / min(theirs), statistics.median(ours) / statistics.median(theirs),
                  min(ours) * 1e3, min(theirs) * 1e3, baseline_name, note)


def compare_copy(name: str, direction: str, kind: str, threads: int, nbytes: int, ours: Callable[[], object],
                 memcpy: Callable[[], object], peer: Callable[[], object], repeat: int = 15, warmup: int = 2,
                 note: str = "") -> CopyFigure:
    """Time a copy of ``nbytes`` host bytes against memcpy of those bytes and its PyTorch peer, interleaved.

    Below ``WARM_BYTES`` each timed copy follows ``WARM_RUNS`` untimed ones of its own
    (``interleaved``'s ``warm``), so each is timed as a loop of it runs: timed after the others, a
    copy found its buffers evicted by them, or in cache where two of them shared buffers (1 MiB
    row-major -> oneDNN nchw D2D, a plain memcpy: 1.37-1.48x memcpy cold in that order, 0.95-1.06
    warm; at 32 MiB one warm run left memcpy 1.5x slower than in a loop, three as fast).
    """
    if kind not in GOALS:
        raise ValueError(f"kind must be one of {sorted(GOALS)}, got {kind!r}")
    times = interleaved((ours, memcpy, peer), repeat, warmup, warm=nbytes < WARM_BYTES)
    best = [min(t) for t in times]
    median = [statistics.median(t) for t in times]
    return CopyFigure(name, direction, kind, threads, nbytes / 2**20, best[0] * 1e3, best[1] * 1e3, best[2] * 1e3,
                      best[0] / best[1], median[0] / median[1], best[0] / best[2], median[0] / median[2], note)


def copy_table(figures: Sequence[CopyFigure]) -> str:
    """A markdown table: one row per copy figure, ratios of best times."""
    lines = ["| figure | threads | MiB | ours ms | ours/memcpy | goal | ours/peer | goal | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for f in figures:
        lines.append(f"| {f.name} | {f.threads} | {f.mib:.3g} | {f.ours_ms:.3f} | {f.vs_memcpy:.3f} | "
                     f"<= {f.memcpy_goal:g} | {f.vs_peer:.3f} | <= {f.peer_goal:g} | {'yes' if f.met else 'NO'} |")
    return "\n".join(lines)


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of a fast function (best of 5 batches)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def compare_latency(name: str, target: float, fn: Callable[[], object], baseline: Callable[[], object],
                    baseline_name: str, calls: int = 2000) -> Figure:
    """Per-call latency of a small operation against a baseline, best of interleaved batches."""
    fn(), baseline()
    ours = min(per_call(fn, calls) for _ in range(3))
    theirs = min(per_call(baseline, calls) for _ in range(3))
    return Figure(name, target, ours / theirs, ours / theirs, ours * 1e3, theirs * 1e3, baseline_name,
                  f"{ours * 1e6:.1f} us vs {theirs * 1e6:.1f} us per call")
