"""Run every benchmark, print tables of ratios and write benchmarks/results.json.

    python benchmarks/run.py [--full] [--threads 1,2,16] [--repeat N] [--json PATH] [--markdown PATH]

Copies (bench_dma): each host<->device copy and device relayout against memcpy of the same
bytes and against its PyTorch peer (the same DMA nests as strided view copies), timed
interleaved in one process per thread count; goals: ours/memcpy <= 1.15 where the layout keeps
contiguous runs, <= 1.3 where it transposes, ours/peer <= 1.0. The default run covers 2
threads at 1 and 32 MiB plus one 512 MiB case; ``--full`` every size (1, 32, 512 MiB) at 1, 2
and all threads; ``--threads`` picks the thread counts. Other figures are (time of our
operation) / (time of its baseline), both measured in this process, interleaved; `min` is the
ratio of best times, `median` of median times. A figure meets its goal when its ratios of best
times are at or below it. Models (bench_models): a TransformerEncoder training step and the
demo's small models' steps on spyre against the same steps on CPU tensors (goal 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_dma  # noqa: E402
import bench_models  # noqa: E402
import bench_ops  # noqa: E402
from common import copy_table  # noqa: E402


def table(figures: list) -> str:
    lines = ["| figure | target | min | median | ours (ms) | baseline (ms) | baseline | met |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        target = "-" if f.target is None else f"<= {f.target:g}"
        met = "-" if f.target is None else ("yes" if f.met else "NO")
        lines.append(f"| {f.name} | {target} | {f.ratio_min:.3f} | {f.ratio_median:.3f} | "
                     f"{f.target_ms:.3f} | {f.baseline_ms:.3f} | {f.baseline} | {met} |")
    return "\n".join(lines)


def machine() -> str:
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="copies at every size and at 1, 2 and all threads")
    parser.add_argument("--threads", type=bench_dma.ints, help="thread counts of the copies, e.g. 1,2,16")
    parser.add_argument("--repeat", type=int, default=15, help="timed repetitions per figure (default 15)")
    parser.add_argument("--json", default=str(Path(__file__).with_name("results.json")), help="where to write JSON")
    parser.add_argument("--markdown", help="also write the tables (with the machine line) to this file")
    args = parser.parse_args()
    copies = bench_dma.copies(args.repeat, args.full, args.threads)
    figures = bench_dma.run() + bench_ops.run() + bench_models.run()
    met = sum(f.met for f in copies)
    text = (f"Machine: {machine()}\n\nCopies ({met} of {len(copies)} meet both goals):\n\n{copy_table(copies)}"
            f"\n\nOther figures:\n\n{table(figures)}")
    print(text)
    Path(args.json).write_text(json.dumps({"machine": machine(), "copies": [f.as_dict() for f in copies],
                                           "figures": [f.as_dict() for f in figures]}, indent=2))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
