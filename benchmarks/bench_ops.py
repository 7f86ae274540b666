"""Device kernels against the same ops on CPU tensors, as time ratios (device / CPU).

Targets: ``add`` (4096x4096 float16) <= 1.2, ``matmul`` (2048x2048 float32) <= 1.3;
``add`` into preallocated ``out=`` tensors and ``sum`` are reported only. Profiling 10 forward
passes of a small model on the device, with Kineto (CPU + PrivateUse1 activities) and with the
legacy profiler (``use_device="spyre"``), against the same passes unprofiled: <= 2.
Run alone with ``python benchmarks/bench_ops.py``.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository and this folder importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_layouts  # noqa: E402,F401  (registers the spyre device and its kernels)

try:
    from .common import Figure, compare
except ImportError:  # run as a script
    from common import Figure, compare  # noqa: E402

CASES = (
    # name, shapes, dtype, op, repetitions, target ratio (None: reported only), whether op takes
    # a preallocated ``out`` (then neither side allocates, nor page-faults on the CPU side)
    ("add", ((4096, 4096), (4096, 4096)), torch.float16, lambda a, b: a + b, 15, 1.2, False),
    ("add, out= preallocated", ((4096, 4096), (4096, 4096)), torch.float16,
     lambda a, b, out: torch.add(a, b, out=out), 15, None, True),
    ("matmul", ((2048, 2048), (2048, 2048)), torch.float32, lambda a, b: a @ b, 5, 1.3, False),
    ("sum(dim=1)", ((4096, 4096),), torch.float16, lambda a: a.sum(dim=1), 15, None, False),
)


def run() -> list[Figure]:
    """One figure per op: the op on spyre tensors against the same op on CPU tensors."""
    torch.manual_seed(0)
    figures = []
    for name, shapes, dtype, op, repetitions, target, preallocated in CASES:
        host = [torch.randn(shape, dtype=dtype) for shape in shapes]
        device = [t.to("spyre") for t in host]
        op_host = op
        if preallocated:
            op_host = functools.partial(op, out=torch.empty_like(host[0]))
            op = functools.partial(op, out=torch.empty_like(device[0]))
        shape = "x".join(map(str, shapes[0]))
        figures.append(compare(f"device {name} {shape} {str(dtype).removeprefix('torch.')} / CPU", target,
                               lambda op=op, device=device: op(*device), lambda op=op_host, host=host: op(*host),
                               "same op on CPU", repetitions))
    return figures + profiler_overhead()


def profiler_overhead() -> list[Figure]:
    """Profiled forward passes of a small model on spyre against the same passes unprofiled."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("spyre")
    x = torch.randn(4, 16).to("spyre")

    def passes() -> None:
        for _ in range(10):
            model(x)

    def kineto() -> None:
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]
        with torch.profiler.profile(activities=activities):
            passes()

    def legacy() -> None:
        with torch.autograd.profiler.profile(use_device="spyre"):
            passes()

    return [compare(f"profiled 10 forward passes ({name}) / unprofiled", 2.0, fn, passes, "same passes unprofiled", 15)
            for name, fn in (("kineto", kineto), ("legacy", legacy))]


if __name__ == "__main__":
    print(json.dumps([f.as_dict() for f in run()], indent=2))
