"""all_reduce bandwidth on spyre tensors against the same all_reduce on CPU tensors (2 processes).

    python benchmarks/bench_distributed.py [--repeat N] [--world 2] [--markdown PATH]

Starts ``--world`` processes on 127.0.0.1 in one gloo group. For each size, rank 0 times
``dist.all_reduce`` on a spyre tensor and on a CPU tensor of the same shape, interleaved
(spyre, CPU, spyre, ...), each call after a barrier. Bandwidth is the algorithm bandwidth
(tensor bytes / time), as nccl-tests report it; the ratio is spyre time / CPU time. A spyre
all_reduce moves the real elements out through the device's DMA program, reduces them with
gloo on the host, and copies the result back in place, so the ratio is that staging's cost.
Workers get OMP_NUM_THREADS=1 unless it is set (torchrun's default for several processes).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

# (rows, cols, dtype name): 4 KiB .. 64 MiB; the float16 1000x1000 case pads each row on the device
SIZES = [(32, 32, "float32"), (256, 256, "float32"), (1024, 1024, "float32"),
         (2048, 2048, "float32"), (4096, 4096, "float32"), (1000, 1000, "float16")]


def worker(rank: int, world: int, repeat: int, out: str | None) -> None:
    import torch
    import torch.distributed as dist

    import torch_layouts  # noqa: F401

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    rows_out = []
    for rows, cols, dtype_name in SIZES:
        dtype = getattr(torch, dtype_name)
        host = torch.ones(rows, cols, dtype=dtype)
        device = host.to("spyre")
        times: dict[str, list[float]] = {"spyre": [], "cpu": []}
        for i in range(repeat + 2):  # 2 warm-up pairs
            for name, x in (("spyre", device), ("cpu", host)):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(x)
                if i >= 2:
                    times[name].append(time.perf_counter() - start)
        nbytes = host.numel() * host.element_size()
        ours, base = min(times["spyre"]), min(times["cpu"])
        med_ratio = statistics.median(times["spyre"]) / statistics.median(times["cpu"])
        rows_out.append(f"| {rows}x{cols} {dtype_name} | {nbytes / 2**20:.3f} | {nbytes / ours / 1e9:.3f} | "
                        f"{nbytes / base / 1e9:.3f} | {ours * 1e3:.3f} | {base * 1e3:.3f} | "
                        f"{ours / base:.2f} | {med_ratio:.2f} |")
    if rank == 0:
        text = "\n".join([
            f"{world} processes, gloo over 127.0.0.1, best of {repeat} (median ratio also shown)", "",
            "| tensor | MiB | spyre GB/s | CPU GB/s | spyre ms | CPU ms | time ratio min | time ratio median |",
            "|---|---|---|---|---|---|---|---|", *rows_out])
        print(text)
        if out:
            Path(out).write_text(text + "\n")
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per size and device (default 10)")
    parser.add_argument("--world", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # set for the spawned workers
    args = parser.parse_args()
    if args.rank is not None:
        worker(args.rank, args.world, args.repeat, args.markdown)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # one intra-op thread per process unless set, as torchrun does for several processes per host
    env = {"OMP_NUM_THREADS": "1", **os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    argv = [sys.executable, __file__, "--repeat", str(args.repeat), "--world", str(args.world)]
    if args.markdown:
        argv += ["--markdown", args.markdown]
    procs = [subprocess.Popen(argv + ["--rank", str(r)], env=env) for r in range(args.world)]
    try:
        codes = [p.wait(timeout=600) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        print("bench_distributed: ranks ran past 600 s", file=sys.stderr)
        return 1
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main())
