"""The compile report: what the spyre compiler decided, as a log (``str``) and JSON.

``explain_compile(fn, *args)`` compiles ``fn`` for its arguments and returns the
``CompileReport`` of its graphs (forward, and backward when an argument needs grad);
nothing else runs. With ``TORCH_LAYOUTS_COMPILE_DUMP=DIR`` every compiled graph's
``to_json()`` is written to ``DIR`` as it compiles.

Example::

    >>> r = torch_layouts.explain_compile(lambda x, y: x + y.t(), x, y)
    >>> r.cost_bytes, r.optimal, [m.buffer for m in r.restickifies]
    (32768, True, ['t'])
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from . import artifacts
from .propagate import TensorInfo

if TYPE_CHECKING:
    from .lowering import GraphPlan, Restickify

_listeners: list[Callable[[CompileReport], None]] = []
_dump_count = [0]


class CompileReport:
    """The decisions for the graphs of one compiled function (see module doc)."""

    def __init__(self, plans: list[GraphPlan]) -> None:
        self.plans = plans

    @staticmethod
    def _key(plan: GraphPlan, name: str) -> str:
        return f"backward.{name}" if plan.kind == "backward" else name

    @property
    def layouts(self) -> dict[str, Any]:
        """{node: chosen layout} for every tensor-valued node (backward nodes as ``backward.<name>``)."""
        return {self._key(p, n): layout for p in self.plans for n, layout in p.layouts.items()}

    @property
    def restickifies(self) -> list[Restickify]:
        from .lowering import Restickify
        return [Restickify(self._key(p, r.buffer), r.source, r.target, r.nbytes,
                           tuple(self._key(p, c) for c in r.consumers), r.every_call, r.state)
                for p in self.plans for r in p.restickifies]

    @property
    def cost_bytes(self) -> int:
        return sum(p.plan.cost for p in self.plans)

    @property
    def lower_bound_bytes(self) -> int:
        return sum(p.plan.lower_bound for p in self.plans)

    @property
    def optimal(self) -> bool:
        return all(p.plan.optimal for p in self.plans)

    @property
    def dcis(self) -> list[dict[str, Any]]:
        """A DCI per graph input (host to device) and graph output (device to host)."""
        found = []
        for p in self.plans:
            for names, direction in ((p.inputs, "h2d"), (p.outputs, "d2h")):
                for name in names:
                    info = p.propagation.infos.get(name)
                    if isinstance(info, TensorInfo) and name in p.layouts:
                        layout = p.layouts[name]
                        size, stride = info.shape, info.stride
                        if p.propagation.alias_root.get(name, name) != name:
                            size, stride = None, None  # a view: move its base buffer
                        found.append(artifacts.dci(self._key(p, name), layout, size, stride, direction))
        return found

    @property
    def sdscs(self) -> list[dict[str, Any]]:
        """A SuperDSC-like record per kernel: every node with a device kernel or a restickify."""
        found = []
        for p in self.plans:
            prop = p.propagation
            for node in p.graph.graph.nodes:
                if node.op != "call_function":
                    continue
                restickify = node.name.startswith("restickify_")
                family = "restickify" if restickify else prop.family.get(node.name, "fallback")
                if family in ("fallback", "view", "getitem", "input") or node.name not in p.layouts and not restickify:
                    continue
                inputs = [(self._key(p, a.name), p.layouts[a.name], p.plan.states.get(a.name))
                          for a in node.all_input_nodes if a.name in p.layouts]
                if restickify:
                    layout = node.target.layout
                    outputs = [(self._key(p, node.name), layout, "restickified")]
                    op = "restickify"
                else:
                    outputs = [(self._key(p, node.name), p.layouts[node.name], p.plan.states.get(node.name))]
                    op = str(node.target)
                found.append(artifacts.sdsc(len(found), self._key(p, node.name), op, inputs, outputs))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "graphs": [{"kind": p.kind, "nodes": len(p.plan.states), "exact_nodes": p.plan.exact_nodes,
                        "optimal": p.plan.optimal, "cost_bytes": p.plan.cost, "lower_bound_bytes": p.plan.lower_bound,
                        "optimise_seconds": round(p.plan.seconds, 6), "plan_seconds": round(p.seconds, 6)}
                       for p in self.plans],
            "layouts": {k: repr(v) for k, v in self.layouts.items()},
            "restickifies": [{"buffer": r.buffer, "source": repr(r.source), "target": repr(r.target),
                              "nbytes": r.nbytes, "consumers": list(r.consumers), "every_call": r.every_call}
                             for r in self.restickifies],
            "cost_bytes": self.cost_bytes,
            "optimal": self.optimal,
            "lower_bound_bytes": self.lower_bound_bytes,
            "dcis": self.dcis,
            "sdscs": self.sdscs,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = []
        for p in self.plans:
            plan = p.plan
            status = "optimal" if plan.optimal else f"bounded, gap {plan.gap} bytes to lower bound {plan.lower_bound}"
            lines.append(f"[spyre compile] {p.kind} graph: {len(plan.states)} nodes, "
                         f"planned in {p.seconds * 1000:.1f} ms (optimiser {plan.seconds * 1000:.1f} ms, "
                         f"{plan.exact_nodes} nodes exact, peak {plan.peak_states} states)")
            for node in p.graph.graph.nodes:
                if node.name in p.layouts and not node.name.startswith("restickify_"):
                    target = "input" if node.op == "placeholder" else str(node.target)
                    lines.append(f"  {self._key(p, node.name):<24} {target:<32} {p.layouts[node.name]}")
            for r in p.restickifies:
                every = "  (a weight: relaid on every call; store it in the target layout)" if r.every_call else ""
                lines.append(f"  restickify {self._key(p, r.buffer)} for {', '.join(r.consumers)}: {r.nbytes} bytes"
                             f"\n    from {r.source}\n    to   {r.target}{every}")
            lines.append(f"  cost {plan.cost} bytes moved by {len(p.restickifies)} restickify(s): {status}")
        lines.append(f"[spyre compile] total {self.cost_bytes} bytes, "
                     + ("optimal" if self.optimal else f"lower bound {self.lower_bound_bytes}")
                     + f"; {len(self.dcis)} DCI(s), {len(self.sdscs)} SuperDSC(s)")
        return "\n".join(lines)


@contextlib.contextmanager
def collect() -> Iterator[list[CompileReport]]:
    """Inside the block, every compilation's report is appended to the yielded list."""
    found: list[CompileReport] = []
    _listeners.append(found.append)
    try:
        yield found
    finally:
        _listeners.remove(found.append)


def notify(report: CompileReport) -> None:
    """Tell the listeners (``explain_compile``) about a new compilation."""
    for listener in list(_listeners):
        listener(report)


def dump(report: CompileReport, index: int) -> None:
    """Write graph ``index`` of ``report`` to ``$TORCH_LAYOUTS_COMPILE_DUMP`` (if set)."""
    directory = os.environ.get("TORCH_LAYOUTS_COMPILE_DUMP")
    if not directory:
        return
    os.makedirs(directory, exist_ok=True)
    _dump_count[0] += 1
    plan = report.plans[index]
    path = os.path.join(directory, f"graph_{_dump_count[0]:04d}_{plan.kind}.json")
    with open(path, "w", encoding="utf-8") as out:
        out.write(CompileReport([plan]).to_json() + "\n")


def explain_compile(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CompileReport:
    """Compile ``fn`` for ``args`` on the spyre path and return the report (runs nothing else).

    The forward graph (or the inference graph when nothing needs grad) and the backward
    graph are captured by ``torch._dynamo.export``, so a graph break is an error here.

    Example::

        >>> r = torch_layouts.explain_compile(model, x)
        >>> print(r); r.to_json()
    """
    from torch._dynamo.backends.common import aot_autograd

    from .backend import GraphCompiler

    import torch._dynamo

    compilers: list[GraphCompiler] = []

    def capture(gm: torch.fx.GraphModule, user: list[Any], lifted: list[Any]) -> Callable:
        compiler = GraphCompiler([*lifted, *user])  # AOT autograd lifts parameters and buffers first
        compilers.append(compiler)
        return aot_autograd(fw_compiler=compiler.forward, bw_compiler=compiler.backward,
                            inference_compiler=compiler.inference)(gm, user)

    exported = torch._dynamo.export(fn, aten_graph=False)(*args, **kwargs)
    gm = _plain(exported.graph_module)
    user = [a for a in torch.utils._pytree.tree_leaves((args, kwargs))]
    lifted = [t for _, t in gm.named_parameters(remove_duplicate=False)]
    lifted += [t for _, t in gm.named_buffers(remove_duplicate=False)]
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        capture(gm, user, lifted)  # the backward graph too, now rather than at the first backward
    return CompileReport([p for c in compilers for p in c.plans])


def _plain(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """An exported graph with flat inputs and a tuple output (what AOT autograd takes)."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    output = next(n for n in gm.graph.nodes if n.op == "output")
    if not isinstance(output.args[0], (tuple, list)):
        output.args = ((output.args[0],),)
    else:
        output.args = (tuple(output.args[0]),)
    gm.recompile()
    return gm
