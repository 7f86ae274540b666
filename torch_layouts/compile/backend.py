"""The ``spyre`` compile path: a Dynamo backend over AOT autograd, and its registration.

``torch.compile(fn, backend="spyre")`` and the default backend (Inductor) on graphs
that hold spyre tensors both come here. AOT autograd splits the graph into forward
and backward ATen graphs; each is planned (``lowering.plan_graph``: layout
propagation, optimal restickify placement, strict-mode check), gets its restickify
nodes, and runs as a ``GraphModule`` calling the eager device kernels (ops without
one take the CPU fallback, as in eager).

Inductor has no code generator for tiled layouts, and its per-device extension point
(``register_backend_for_device``) expects one that emits kernels from Inductor's loop
IR. So the routing is done one level up: ``install_inductor`` wraps
``torch._inductor.compile_fx.compile_fx`` (what ``torch.compile``'s default backend
calls) so that a graph with a spyre tensor takes this path; every other graph reaches
Inductor's own function unchanged.

Example::

    >>> f = torch.compile(lambda x, y: (x + y).relu(), backend="spyre")
    >>> f(x_spyre, y_spyre)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from ..core.layout import DeviceLayout
from .lowering import GraphPlan, insert_restickifies, plan_graph
from .propagate import DynamicShapeError, state_of_tensor
from .report import CompileReport, dump, notify

def make_boxed_func(f: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """``f`` taking AOT autograd's boxed argument list."""
    def boxed(args: list[Any]) -> Any:
        return f(*args)

    boxed._boxed_call = True  # type: ignore[attr-defined]
    return boxed


def _on_spyre(v: object) -> bool:
    return isinstance(v, torch.Tensor) and v.device.type == "spyre"


def has_spyre(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> bool:
    """Whether a Dynamo graph touches a spyre tensor (an input or any traced value)."""
    if any(_on_spyre(v) for v in example_inputs):
        return True
    for node in gm.graph.nodes:
        val = node.meta.get("example_value", node.meta.get("val"))
        if _on_spyre(val) or (isinstance(val, (list, tuple)) and any(_on_spyre(v) for v in val)):
            return True
    return False


class GraphCompiler:
    """Compiles the ATen graphs AOT autograd makes of one Dynamo graph."""

    def __init__(self, example_inputs: Sequence[object]) -> None:
        self.example_inputs = list(example_inputs)
        self.plans: list[GraphPlan] = []
        self.report = CompileReport(self.plans)

    def _compile(self, gm: torch.fx.GraphModule, fake_inputs: Sequence[object], kind: str) -> Callable:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        states: dict[str, Any] = {}
        real: dict[str, DeviceLayout] = {}
        weights: set[str] = set()
        if kind != "backward" and len(placeholders) == len(self.example_inputs):
            for node, value in zip(placeholders, self.example_inputs):
                if _on_spyre(value):
                    states[node.name] = state_of_tensor(value)
                    real[node.name] = value.device_tensor_layout()
                    if isinstance(value, torch.nn.Parameter):
                        weights.add(node.name)
        elif kind == "backward" and self.plans:
            forward = self.plans[-1]
            for node in placeholders:
                if node.name in forward.plan.states:
                    states[node.name] = forward.plan.states[node.name]
                    if node.name in forward.layouts:
                        real[node.name] = forward.layouts[node.name]
        try:
            plan = plan_graph(gm, states, kind, real, weights)
        except DynamicShapeError as err:
            warnings.warn(f"{err}; this {kind} graph runs op by op without a layout plan", stacklevel=2)
            return make_boxed_func(gm.forward)
        self.plans.append(plan)
        insert_restickifies(plan)
        dump(self.report, len(self.plans) - 1)
        return make_boxed_func(gm.forward)

    def forward(self, gm: torch.fx.GraphModule, fake_inputs: Sequence[object]) -> Callable:
        return self._compile(gm, fake_inputs, "forward")

    def backward(self, gm: torch.fx.GraphModule, fake_inputs: Sequence[object]) -> Callable:
        return self._compile(gm, fake_inputs, "backward")

    def inference(self, gm: torch.fx.GraphModule, fake_inputs: Sequence[object]) -> Callable:
        return self._compile(gm, fake_inputs, "inference")


def spyre_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object], **_: Any) -> Callable:
    """The Dynamo backend: AOT autograd with the layout planner as forward/backward compiler."""
    from torch._dynamo.backends.common import aot_autograd

    compiler = GraphCompiler(example_inputs)
    notify(compiler.report)
    return aot_autograd(fw_compiler=compiler.forward, bw_compiler=compiler.backward,
                        inference_compiler=compiler.inference)(gm, example_inputs)


def _route(inductor_compile_fx: Callable) -> Callable:
    @functools.wraps(inductor_compile_fx)
    def compile_fx(model_: Any, example_inputs_: Sequence[object], *args: Any, **kwargs: Any) -> Any:
        if isinstance(model_, torch.fx.GraphModule) and has_spyre(model_, example_inputs_):
            return spyre_backend(model_, example_inputs_)
        return inductor_compile_fx(model_, example_inputs_, *args, **kwargs)

    compile_fx.spyre_routed = True  # type: ignore[attr-defined]
    return compile_fx


def install_dynamo() -> None:
    """Register ``backend="spyre"`` with Dynamo (once)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "spyre" not in _COMPILER_FNS:
        register_backend(name="spyre")(spyre_backend)


def install_inductor() -> None:
    """Route the default backend's spyre graphs here (once)."""
    from torch._inductor import compile_fx as inductor

    if not getattr(inductor.compile_fx, "spyre_routed", False):
        inductor.compile_fx = _route(inductor.compile_fx)
