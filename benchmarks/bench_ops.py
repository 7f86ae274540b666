"""Device kernels against the same ops on CPU tensors, as time ratios (device / CPU).

Target for every op (issue 18): <= 1.05. Elementwise (``add``, in place and into a preallocated
``out=``; ``copy_`` into part of a buffer), matmul (2048x2048 float32, and a transformer's linear
layer with its bias), reductions (``sum`` over rows and over the stick dim), ``softmax`` and
``layer_norm`` (forward, and with their backward), ``cross_entropy`` with its backward over 1000
classes (in padded sticks); and some of them at the training step's shapes (1-2 MiB), where a
call's fixed cost counts, with a broadcast bias add, ``sum`` and ``amax`` over
the stick dim, a bias gradient's column sum, a row gather (``index_select``), a dtype conversion
and a comparison (results of other stick lengths). Profiling 10 forward passes of a small model
on the device, with Kineto (CPU + PrivateUse1 activities) and with the legacy profiler
(``use_device="spyre"``), against the same passes unprofiled: <= 2. Run alone with
``python benchmarks/bench_ops.py [--threads N]`` (2 by default).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
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

GOAL = 1.05


def _with_backward(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """``fn``'s forward and backward (``x`` requires grad, ``g`` is the output's gradient)."""
    def run(x: torch.Tensor, g: torch.Tensor) -> None:
        fn(x).backward(g)
    return run


def _layer_norm(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[-1:])


@functools.cache
def _rows(device: str) -> torch.Tensor:
    """64 row indices (repeats possible), on ``device``: an embedding-like gather."""
    return torch.randint(0, 1024, (64,), generator=torch.Generator().manual_seed(0)).to(device)


@functools.cache
def _labels(device: str, classes: int) -> torch.Tensor:
    """1024 class labels on ``device``: a classifier's targets."""
    return torch.randint(0, classes, (1024,), generator=torch.Generator().manual_seed(0)).to(device)


def _cross_entropy_with_backward(x: torch.Tensor) -> None:
    """A classifier's loss over ``x``'s classes, and its backward (``x`` requires grad)."""
    torch.nn.functional.cross_entropy(x, _labels(x.device.type, x.shape[1])).backward()


CASES = (
    # name, shapes, dtype, op, repetitions, target ratio (None: reported only), whether op takes
    # a preallocated ``out`` (then neither side allocates, nor page-faults on the CPU side)
    ("add", ((4096, 4096), (4096, 4096)), torch.float16, lambda a, b: a + b, 15, GOAL, False),
    ("add, out= preallocated", ((4096, 4096), (4096, 4096)), torch.float16,
     lambda a, b, out: torch.add(a, b, out=out), 15, GOAL, True),
    ("add_ (in place)", ((4096, 4096), (4096, 4096)), torch.float16, lambda a, b: a.add_(b, alpha=1e-3), 15, GOAL,
     False),
    ("matmul", ((2048, 2048), (2048, 2048)), torch.float32, lambda a, b: a @ b, 5, GOAL, False),
    ("linear with bias (weight.t() restickified)", ((1024, 256), (1024, 256), (1024,)), torch.float32,
     torch.nn.functional.linear, 15, GOAL, False),
    ("copy_ into a view, x[1].copy_(y)", ((4, 256, 1024), (256, 1024)), torch.float32,
     lambda a, b: a[1].copy_(b), 15, GOAL, False),
    ("sum(dim=0)", ((4096, 4096),), torch.float16, lambda a: a.sum(dim=0), 15, GOAL, False),
    ("sum(dim=1), the stick dim", ((4096, 4096),), torch.float16, lambda a: a.sum(dim=1), 15, GOAL, False),
    ("softmax(dim=-1)", ((32, 128, 128),), torch.float32, lambda a: torch.softmax(a, -1), 15, GOAL, False),
    ("layer_norm", ((1024, 1024),), torch.float32, _layer_norm, 15, GOAL, False),
    ("softmax forward+backward", ((32, 128, 128), (32, 128, 128)), torch.float32,
     _with_backward(lambda a: torch.softmax(a, -1)), 15, GOAL, False),
    ("layer_norm forward+backward", ((1024, 1024), (1024, 1024)), torch.float32, _with_backward(_layer_norm), 15,
     GOAL, False),
    ("cross_entropy forward+backward over 1000 classes", ((1024, 1000),), torch.float32,
     _cross_entropy_with_backward, 15, GOAL, False),
    # The training step's shapes (benchmarks/bench_models.py): 1-2 MiB operands, where a call's
    # fixed cost (dispatch, planning, allocation) weighs as much as its kernel.
    ("add (step size)", ((1024, 256), (1024, 256)), torch.float32, lambda a, b: a + b, 30, GOAL, False),
    ("mul by a number (step size)", ((1024, 256),), torch.float32, lambda a: a * 0.5, 30, GOAL, False),
    ("sum(dim=0) (step size)", ((1024, 256),), torch.float32, lambda a: a.sum(dim=0), 30, GOAL, False),
    ("clone (step size)", ((8, 128, 1024),), torch.float32, lambda a: a.clone(), 30, GOAL, False),
    ("mm (step size)", ((1024, 256), (256, 256)), torch.float32, lambda a, b: a @ b, 15, GOAL, False),
    ("softmax forward+backward (step size)", ((8, 4, 128, 128), (8, 4, 128, 128)), torch.float32,
     _with_backward(lambda a: torch.softmax(a, -1)), 30, GOAL, False),
    ("layer_norm forward+backward (step size)", ((8, 128, 256), (8, 128, 256)), torch.float32,
     _with_backward(_layer_norm), 30, GOAL, False),
    ("add a bias, broadcast over batch and tokens (step size)", ((8, 128, 256), (256,)), torch.float32,
     lambda a, b: a + b, 30, GOAL, False),
    ("sum(dim=-1), the stick dim (step size)", ((1024, 256),), torch.float32, lambda a: a.sum(dim=-1), 30, GOAL,
     False),
    ("sum over batch and tokens, a bias gradient (step size)", ((8, 128, 256),), torch.float32,
     lambda a: a.sum(dim=(0, 1)), 30, GOAL, False),
    ("index_select of 64 rows (step size)", ((1024, 256),), torch.float32,
     lambda a: a.index_select(0, _rows(a.device.type)), 30, GOAL, False),
    ("amax(dim=-1), the stick dim (step size)", ((1024, 256),), torch.float32, lambda a: a.amax(dim=-1), 30,
     GOAL, False),
    ("float32 -> float16 conversion (step size)", ((1024, 256),), torch.float32, lambda a: a.half(), 30, GOAL,
     False),
    ("comparison a > b, bool result (step size)", ((1024, 256), (1024, 256)), torch.float32, lambda a, b: a > b,
     30, GOAL, False),
)


def run() -> list[Figure]:
    """One figure per op: the op on spyre tensors against the same op on CPU tensors."""
    torch.manual_seed(0)
    figures = []
    for name, shapes, dtype, op, repetitions, target, preallocated in CASES:
        host = [torch.randn(shape, dtype=dtype) for shape in shapes]
        device = [t.to("spyre") for t in host]
        if "backward" in name:
            host[0].requires_grad_()
            device[0] = device[0].requires_grad_()
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
    """Profiled forward passes of a small model on spyre against the same passes unprofiled (goal
    2), and, beside them without a goal, the same on CPU tensors: what PyTorch's profilers cost
    where no device is involved (a pass of this model takes ~20 us, starting and stopping a
    profiler several hundred)."""
    figures = []
    for device in ("spyre", "cpu"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
        x = torch.randn(4, 16).to(device)

        def passes(model: torch.nn.Module = model, x: torch.Tensor = x) -> None:
            for _ in range(10):
                model(x)

        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "spyre":
            activities.append(torch.profiler.ProfilerActivity.PrivateUse1)

        def kineto(passes: Callable[[], None] = passes, activities: list = activities) -> None:
            with torch.profiler.profile(activities=activities):
                passes()

        def legacy(passes: Callable[[], None] = passes, device: str = device) -> None:
            with torch.autograd.profiler.profile(use_device=device if device != "cpu" else None):
                passes()

        where, target = ("", 2.0) if device == "spyre" else (" on CPU tensors", None)
        figures += [compare(f"profiled 10 forward passes{where} ({name}) / unprofiled", target, fn, passes,
                            "same passes unprofiled", 15) for name, fn in (("kineto", kineto), ("legacy", legacy))]
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    torch.set_num_threads(parser.parse_args().threads)
    print(json.dumps([f.as_dict() for f in run()], indent=2))
