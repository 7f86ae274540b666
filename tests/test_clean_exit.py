"""The process exits cleanly after running backward on the device.

Before the runtime drained its autograd threads at exit, about one exit in six aborted
("terminate called without an active exception"): PyTorch's device thread released the
finished graph task, whose saved state holds a Python object, during finalization.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import torch, torch_layouts
model = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 64), torch.nn.GELU()).to("spyre")
x = torch.randn(8, 64, requires_grad=True)
model(x.to("spyre")).sum().backward()
print("done", float(x.grad.sum()))
"""


def _exits(runs: int) -> list[tuple[int, str]]:
    def once(_: int) -> tuple[int, str]:
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout + proc.stderr

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(once, range(runs)))


@pytest.mark.parametrize("runs", [pytest.param(16), pytest.param(80, marks=pytest.mark.long)])
def test_exit_after_backward_is_clean(runs: int) -> None:
    results = _exits(runs)
    failures = [out for code, out in results if code != 0 or "done" not in out]
    assert not failures, f"{len(failures)} of {runs} exits failed; first output:\n{failures[0][-2000:]}"
