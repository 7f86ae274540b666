"""Run every benchmark, print a table of ratios and write benchmarks/results.json.

    python benchmarks/run.py [--repeat N] [--json PATH] [--markdown PATH]

Each figure is (time of our operation) / (time of its baseline), both measured in this
process, interleaved; `min` is the ratio of best times, `median` of median times. A
figure meets its target when the min ratio is at or below it.
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
import bench_ops  # noqa: E402


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
    parser.add_argument("--repeat", type=int, default=15, help="timed repetitions per figure (default 15)")
    parser.add_argument("--json", default=str(Path(__file__).with_name("results.json")), help="where to write JSON")
    parser.add_argument("--markdown", help="also write the table (with the machine line) to this file")
    args = parser.parse_args()
    figures = bench_dma.run(args.repeat) + bench_ops.run()
    text = f"Machine: {machine()}\n\n{table(figures)}"
    print(text)
    Path(args.json).write_text(json.dumps({"machine": machine(), "figures": [f.as_dict() for f in figures]},
                                          indent=2))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
