"""Instructions per call of small device ops and the demo's training steps against the same
calls on CPU tensors, counted by valgrind's callgrind: deterministic where timings of
microsecond calls on a shared VM swing by a third between runs. Needs ``valgrind`` (not
installed by ``make setup``); each count runs one child process under callgrind.

    python benchmarks/instructions.py [--calls N] [CASE ...]

Only the timed loop is counted: the child calls it through a ctypes function pointer and
callgrind collects inside ``ffi_call`` alone (imports, set-up and warm-up are left out). The
ratio (device / CPU) is of instructions, not time: it measures the runtime's per-call work
(dispatch, the replay's key and views, PyTorch's boxing), which dominates small calls.
"""

from __future__ import annotations

import argparse
import ctypes
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: this repository's torch_layouts (torch's autoload imports it)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import torch_layouts  # noqa: E402,F401  (registers the spyre device and its kernels)

try:
    from .bench_models import demo_steps
except ImportError:  # run as a script
    from bench_models import demo_steps  # noqa: E402


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], object]) -> Callable[[str], Callable[[], object]]:
    def make(device: str) -> Callable[[], object]:
        a, b = torch.randn(16, 16).to(device), torch.randn(16, 16).to(device)
        return lambda: fn(a, b)
    return make


def _step(index: int) -> Callable[[str], Callable[[], object]]:
    def make(device: str) -> Callable[[], object]:
        _, on_device, on_cpu = demo_steps()[index]
        return on_device if device == "spyre" else on_cpu
    return make


# name -> (function of the device giving the call to count, calls per count by default)
CASES: dict[str, tuple[Callable[[str], Callable[[], object]], int]] = {
    "add_ 16x16": (_binary(lambda a, b: a.add_(b, alpha=1e-9)), 2000),
    "a + b 16x16": (_binary(lambda a, b: a + b), 2000),
    "a * 0.5 16x16": (_binary(lambda a, b: a * 0.5), 2000),
    "a.sum(0) 16x16": (_binary(lambda a, b: a.sum(0)), 2000),
    "softmax 16x16": (_binary(lambda a, b: torch.softmax(a, -1)), 2000),
    "demo MLP step": (_step(0), 30),
    "demo attention step": (_step(1), 30),
}


def child(case: str, device: str, calls: int) -> None:
    """Set up ``case`` on ``device``, warm it up, then make ``calls`` calls inside one ctypes call."""
    make, _ = CASES[case]
    call = make(device)
    for _ in range(20):
        call()

    def loop() -> None:
        for _ in range(calls):
            call()

    ctypes.CFUNCTYPE(None)(loop)()


def collected(output: str) -> int:
    """The instruction count in callgrind's summary ("==123== Collected : 4567").

    >>> collected("==7== Events    : Ir\\n==7== Collected : 1234567\\n")
    1234567
    """
    match = re.search(r"Collected\s*:\s*(\d+)", output)
    if match is None:
        raise RuntimeError(f"no callgrind summary in the child's output:\n{output[-2000:]}")
    return int(match.group(1))


def count(case: str, device: str, calls: int) -> float:
    """Instructions per call of ``case`` on ``device`` (a child process under callgrind)."""
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=ffi_call*",
               "--callgrind-out-file=/dev/null", sys.executable, str(Path(__file__).resolve()), "--child", case,
               device, str(calls)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} on {device}: the child exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return collected(done.stderr) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help=f"cases to count (default all): {', '.join(CASES)}")
    parser.add_argument("--calls", type=int, help="calls per count (default: the case's own)")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "DEVICE", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        torch.set_num_threads(1)  # one thread: no worker threads' instructions in the count
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; the cases are {', '.join(CASES)}")
    print("| call | spyre (instructions) | CPU (instructions) | spyre / CPU |\n|---|---|---|---|")
    for case in args.cases or CASES:
        calls = args.calls or CASES[case][1]
        ours, cpu = count(case, "spyre", calls), count(case, "cpu", calls)
        print(f"| {case} | {ours:,.0f} | {cpu:,.0f} | {ours / cpu:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
