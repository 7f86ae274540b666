"""Timing helpers: every figure is a ratio to a baseline timed in the same process.

Target and baseline run interleaved (target, baseline, target, ...) so that drift in
machine load hits both alike; we report the ratio of minima and the ratio of medians.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


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


def compare(name: str, target: float | None, fn: Callable[[], object], baseline: Callable[[], object],
            baseline_name: str, repeat: int = 15, warmup: int = 2, note: str = "") -> Figure:
    """Time ``fn`` against ``baseline`` interleaved; return their ratio as a Figure."""
    for _ in range(warmup):
        fn()
        baseline()
    ours, theirs = [], []
    for _ in range(repeat):
        for run, out in ((fn, ours), (baseline, theirs)):
            gc.collect()
            start = time.perf_counter()
            run()
            out.append(time.perf_counter() - start)
    return Figure(name, target, min(ours) / min(theirs), statistics.median(ours) / statistics.median(theirs),
                  min(ours) * 1e3, min(theirs) * 1e3, baseline_name, note)


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
