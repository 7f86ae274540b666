"""torch.compile on spyre: compiled-vs-eager ratios and the layout planner's speed.

    python benchmarks/bench_compile.py [--repeat N]

* compiled / eager time (the default backend, no grad) of an MLP, an attention block
  (float32), and a float16 graph whose plan shares one restickify between two consumers where eager
  restickifies once per op;
* the planner (propagation + optimiser) on a 12-layer transformer's forward graph:
  seconds, node count, how many nodes the exact search covered (the rest bounded), and
  the same graph forced into the bounded search (1 state) with its reported gap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch_layouts  # noqa: E402
from common import Figure, compare  # noqa: E402
from torch_layouts.compile.models import Attention, mlp, transformer  # noqa: E402
from torch_layouts.compile.placement import Mode, PlanNode, Problem, solve  # noqa: E402


def _pair(model: torch.nn.Module, *inputs: torch.Tensor):
    compiled = torch.compile(model)

    def ours() -> None:
        with torch.no_grad():
            compiled(*inputs)

    def eager() -> None:
        with torch.no_grad():
            model(*inputs)

    return ours, eager


def shared(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = y.t()
    return x + t, x * t


class Shared(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return shared(x, y)


def ratios(repeat: int) -> list[Figure]:
    torch.manual_seed(0)
    h = torch.float32  # CPU float16 matmuls have no BLAS: float32 keeps the figures short and stable
    cases = [
        ("compiled MLP 256x512->2048->512 fp32 / eager", mlp(512, 2048).to("spyre"),
         (torch.randn(256, 512, dtype=h).to("spyre"),)),
        ("compiled attention block 4x128x256 fp32 / eager", Attention(256, 4).to("spyre"),
         (torch.randn(4, 128, 256, dtype=h).to("spyre"),)),
        ("compiled x+y.t(), x*y.t() 1024x1024 fp16 / eager", Shared(),
         (torch.randn(1024, 1024, dtype=torch.float16).to("spyre"),
          torch.randn(1024, 1024, dtype=torch.float16).to("spyre"))),
    ]
    figures = []
    for name, model, inputs in cases:
        ours, eager = _pair(model, *inputs)
        ours()
        torch_layouts.reset_stats()
        ours()
        compiled_moves = torch_layouts.stats()["restickify_count"]
        torch_layouts.reset_stats()
        eager()
        eager_moves = torch_layouts.stats()["restickify_count"]
        figures.append(compare(name, 1.05, ours, eager, "eager on spyre", repeat,
                               note=f"restickifies per call: compiled {compiled_moves}, eager {eager_moves}"))
    return figures


def planner() -> list[str]:
    torch.manual_seed(0)
    model = transformer(12).to(torch.float16).to("spyre")
    x = torch.randn(2, 16, 64, dtype=torch.float16).to("spyre")
    with torch.no_grad():
        report = torch_layouts.explain_compile(model, x)
    (plan,) = report.plans
    nodes = len(plan.plan.states)
    lines = [f"12-layer transformer forward graph: {nodes} ATen nodes, planned in {plan.seconds:.3f} s "
             f"(optimiser {plan.plan.seconds:.3f} s), target < 2 s: {'met' if plan.seconds < 2 else 'NOT MET'}",
             f"  exact search: {plan.plan.exact_nodes} of {nodes} nodes, peak {plan.plan.peak_states} states; "
             f"optimal: {plan.plan.optimal}; cost {plan.plan.cost} bytes in {len(plan.restickifies)} restickifies "
             f"({sum(r.every_call for r in plan.restickifies)} of weights)"]
    wide = wide_problem()
    bounded = solve(wide)
    lines.append(f"synthetic wide graph ({len(wide.nodes)} nodes, 10 live chains of 3-way choices, 3^10 states "
                 f"per cut, beam 128): {bounded.seconds:.3f} s, exact for the first {bounded.exact_nodes} nodes, then "
                 f"bounded: cost {bounded.cost}, proven lower bound {bounded.lower_bound}, gap {bounded.gap} "
                 f"({bounded.gap / max(bounded.cost, 1):.1%}), optimal: {bounded.optimal}")
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(x)
        torch_layouts.reset_stats()
        compiled(x)
    lines.append(f"  restickifies per compiled call: {torch_layouts.stats()['restickify_count']} "
                 f"(planned {len(plan.restickifies)})")
    return lines


def wide_problem(chains: int = 10, length: int = 40) -> Problem:
    """Parallel chains whose nodes pick one of 3 states, joined every 10 steps: every cut
    holds ``chains`` live buffers, more than the exact search keeps (2048 states)."""
    nodes = [PlanNode(f"c{c}_0", (), (Mode(c % 3, ()),)) for c in range(chains)]
    for step in range(1, length):
        for c in range(chains):
            inputs = (f"c{c}_{step - 1}",) + ((f"c{(c + 1) % chains}_{step - 1}",) if step % 10 == 0 else ())
            modes = tuple(Mode(s, tuple(s for _ in inputs)) for s in range(3))
            nodes.append(PlanNode(f"c{c}_{step}", inputs, modes))
    return Problem(nodes, lambda buf, src, dst: 1000 + 10 * int(buf.split("_")[0][1:]) + src + 2 * dst)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="timed repetitions per figure (default 15)")
    args = parser.parse_args()
    print("| figure | target | min | median | ours (ms) | baseline (ms) | met | note |")
    print("|---|---|---|---|---|---|---|---|")
    for f in ratios(args.repeat):
        print(f"| {f.name} | <= {f.target:g} | {f.ratio_min:.3f} | {f.ratio_median:.3f} | {f.target_ms:.3f} | "
              f"{f.baseline_ms:.3f} | {'yes' if f.met else 'NO'} | {f.note} |")
    print()
    print("\n".join(planner()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
