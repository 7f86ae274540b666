"""Instructions per call of small device ops and the demo's training steps against the same
calls on CPU tensors, counted by valgrind's callgrind: deterministic where timings of
microsecond calls on a shared VM swing by a third between runs. Needs ``valgrind`` (not
installed by ``make setup``); each count runs one child process under callgrind.

    python benchmarks/instructions.py [--calls N] [CASE ...]

Only the timed loop is counted: the child calls it through a ctypes function pointer and
callgrind collects inside ``ffi_call`` alone (imports, set-up and warm-up are left out). The
ratio (device / CPU) is of instructions, not time: it measures the runtime's per-call work
(dispatch, the replay's key and views, PyTorch's boxing), which dominates small calls.

``--cache`` also simulates this machine's first-level caches (32 KiB 8-way instruction, 48 KiB
12-way data, 64-byte lines) and counts their misses per call: a call's code does not stay in the
instruction cache between calls (the Python and PyTorch code between them evicts it), so those
misses grow with the code a call runs, which its instruction count alone does not show
(``RESULTS.md``, thirtieth session).
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


# callgrind's cache simulation as this machine's first-level caches (size, ways, line bytes).
CACHES = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=49152,12,64"]


def collected(output: str) -> dict[str, int]:
    """The events in callgrind's summary ("==123== Events : Ir ...", "==123== Collected : 4567 ...").

    >>> collected("==7== Events    : Ir I1mr\\n==7== Collected : 1234567 89\\n")
    {'Ir': 1234567, 'I1mr': 89}
    """
    events = re.search(r"Events\s*:\s*([\w ]+)", output)
    counts = re.search(r"Collected\s*:\s*([\d ]+)", output)
    if events is None or counts is None:
        raise RuntimeError(f"no callgrind summary in the child's output:\n{output[-2000:]}")
    return dict(zip(events.group(1).split(), (int(c) for c in counts.group(1).split())))


def count(case: str, device: str, calls: int, cache: bool = False) -> dict[str, float]:
    """Events per call of ``case`` on ``device`` (a child process under callgrind): instructions
    (``Ir``), and with ``cache`` the first-level misses (``I1mr``; ``D1mr`` + ``D1mw`` as ``D1m``)."""
    command = ["valgrind", "--tool=callgrind", *(CACHES if cache else []), "--collect-atstart=no",
               "--toggle-collect=ffi_call*", "--callgrind-out-file=/dev/null", sys.executable,
               str(Path(__file__).resolve()), "--child", case, device, str(calls)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} on {device}: the child exited with {done.returncode}:\n{done.stderr[-2000:]}")
    events = collected(done.stderr)
    if cache:
        events["D1m"] = events.pop("D1mr") + events.pop("D1mw")
    return {name: value / calls for name, value in events.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help=f"cases to count (default all): {', '.join(CASES)}")
    parser.add_argument("--calls", type=int, help="calls per count (default: the case's own)")
    parser.add_argument("--cache", action="store_true", help="also count first-level cache misses (I1, D1)")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "DEVICE", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        torch.set_num_threads(1)  # one thread: no worker threads' instructions in the count
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; the cases are {', '.join(CASES)}")
    events = {"Ir": "instructions", "I1mr": "I1 misses", "D1m": "D1 misses"} if args.cache else {"Ir": "instructions"}
    head = " | ".join(f"spyre ({name}) | CPU ({name}) | spyre / CPU" for name in events.values())
    print(f"| call | {head} |\n|---|" + "---|---|---|" * len(events))
    for case in args.cases or CASES:
        calls = args.calls or CASES[case][1]
        ours, cpu = count(case, "spyre", calls, args.cache), count(case, "cpu", calls, args.cache)
        cells = " | ".join(f"{ours[e]:,.0f} | {cpu[e]:,.0f} | {ours[e] / max(cpu[e], 1e-9):.2f}" for e in events)
        print(f"| {case} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
