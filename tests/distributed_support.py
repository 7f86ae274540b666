"""Multi-process runs for the distributed tests: launch N ranks on loopback, bounded in time.

``run(scenario, world)`` starts ``python distributed_support.py SCENARIO RANK WORLD PORT OUT`` once
per rank; each rank joins a process group on 127.0.0.1 and runs ``SCENARIOS[scenario]``, which
returns a dict saved to ``OUT/rank<R>.pt`` (``torch.save``). The parent kills every rank at the
deadline, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


class RankFailed(AssertionError):
    """A rank exited non-zero or ran past the deadline; carries every rank's output."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(scenario: str, world: int = 2, timeout: float = 120.0, env: dict[str, str] | None = None,
        expect_rc: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """Run ``scenario`` on ``world`` ranks; return each rank's result dict (rank order).

    ``expect_rc`` maps a rank to its expected exit code (default 0 for all).
    """
    port = free_port()
    expect_rc = expect_rc or {}
    with tempfile.TemporaryDirectory() as out:
        full_env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "OMP_NUM_THREADS": "1", **(env or {})}
        procs = [subprocess.Popen([sys.executable, __file__, scenario, str(r), str(world), out],
                                  env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for r in range(world)]
        deadline = time.monotonic() + timeout
        logs: list[str] = []
        timed_out = False
        for p in procs:
            try:
                logs.append(p.communicate(timeout=max(0.1, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                timed_out = True
                for q in procs:
                    q.kill()
                logs.append(p.communicate()[0])
        report = "\n".join(f"--- rank {r} (rc {p.returncode}) ---\n{log[-4000:]}"
                           for r, (p, log) in enumerate(zip(procs, logs)))
        if timed_out:
            raise RankFailed(f"{scenario}: ranks ran past {timeout}s\n{report}")
        for r, p in enumerate(procs):
            if p.returncode != expect_rc.get(r, 0):
                raise RankFailed(f"{scenario}: rank {r} exited {p.returncode}\n{report}")
        return [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False)
                if os.path.exists(os.path.join(out, f"rank{r}.pt")) else {} for r in range(world)]


SCENARIOS: dict[str, Callable[[int, int], dict[str, Any]]] = {}


def scenario(fn: Callable[[int, int], dict[str, Any]]) -> Callable[[int, int], dict[str, Any]]:
    SCENARIOS[fn.__name__] = fn
    return fn


def init(rank: int, world: int, backend: str | None = "gloo", seconds: float = 60.0,
         device_id: torch.device | None = None) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend, rank=rank, world_size=world, init_method="env://",
                            timeout=timedelta(seconds=seconds), device_id=device_id)


def main() -> None:
    name, rank, world, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    import torch_layouts  # noqa: F401
    import distributed_scenarios  # noqa: F401  (fills distributed_support.SCENARIOS)
    import distributed_support

    result = distributed_support.SCENARIOS[name](rank, world)
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
