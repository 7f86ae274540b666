"""Device kernels against the same ops on CPU tensors, as time ratios (device / CPU).

``run()`` times each op on spyre tensors and on CPU tensors in the same run, several
repetitions each, and reports the min and median of both and their ratios. Targets:
``add`` (4096x4096 float16) <= 1.2, ``matmul`` (2048x2048 float32) <= 1.3.
Run: ``python -m benchmarks.bench_ops`` (or ``python benchmarks/bench_ops.py``).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch_layouts  # noqa: E402,F401  (registers the spyre device and its kernels)

CASES = (
    # name, shapes, dtype, op, repetitions, target ratio (None: reported only)
    ("add", ((4096, 4096), (4096, 4096)), torch.float16, lambda a, b: a + b, 15, 1.2),
    ("matmul", ((2048, 2048), (2048, 2048)), torch.float32, lambda a, b: a @ b, 5, 1.3),
    ("sum", ((4096, 4096),), torch.float16, lambda a: a.sum(dim=1), 15, None),
)


def _times(fn: Callable[[], object], repetitions: int) -> list[float]:
    fn()  # warm up (caches, first allocation)
    out = []
    for _ in range(repetitions):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def run() -> list[dict]:
    """One row per op: device and CPU min/median seconds and the device/CPU ratios."""
    torch.manual_seed(0)
    rows = []
    for name, shapes, dtype, op, repetitions, target in CASES:
        host = [torch.randn(shape, dtype=dtype) for shape in shapes]
        device = [t.to("spyre") for t in host]
        cpu_times, dev_times = [], []
        for _ in range(3):  # interleave, so load changes hit both sides alike
            cpu_times += _times(lambda: op(*host), max(1, repetitions // 3))
            dev_times += _times(lambda: op(*device), max(1, repetitions // 3))
        row = {
            "op": name,
            "shape": "x".join(map(str, shapes[0])),
            "dtype": str(dtype).removeprefix("torch."),
            "cpu_min_s": min(cpu_times),
            "cpu_median_s": statistics.median(cpu_times),
            "device_min_s": min(dev_times),
            "device_median_s": statistics.median(dev_times),
            "target": target,
        }
        row["ratio_min"] = row["device_min_s"] / row["cpu_min_s"]
        row["ratio_median"] = row["device_median_s"] / row["cpu_median_s"]
        rows.append(row)
    return rows


def main() -> None:
    print(f"{'op':8} {'shape':>10} {'dtype':8} {'cpu min':>9} {'dev min':>9} {'ratio min':>9} {'ratio med':>9} target")
    for r in run():
        target = "-" if r["target"] is None else f"<= {r['target']}"
        print(f"{r['op']:8} {r['shape']:>10} {r['dtype']:8} {r['cpu_min_s'] * 1e3:8.2f}ms "
              f"{r['device_min_s'] * 1e3:8.2f}ms {r['ratio_min']:9.2f} {r['ratio_median']:9.2f} {target}")


if __name__ == "__main__":
    main()
