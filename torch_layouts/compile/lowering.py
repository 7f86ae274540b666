"""From an ATen graph to a runnable plan: propagate, optimise, check strict mode, insert
the restickify nodes, and record what was decided (``GraphPlan``).

The graph keeps running the eager device kernels: each inserted node copies a value
into its target layout device to device, with the strided copy the eager kernels use
for their own restickifies (counted in ``stats()``), placed right after the buffer it
converts and shared by every consumer that needs that layout.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
import torch
import torch.fx

from ..core.layout import BoundLayout, DeviceLayout, binding_key
from ..ops import rules
from ..ops.elementwise import materialize
from ..ops.operands import rowmajor
from ..ops.stats import count_restickify
from .placement import Plan, solve
from .propagate import Fixed, Propagation, State, TensorInfo, layout_of_state

MAX_STATES = 2048


@dataclass(frozen=True)
class Restickify:
    """One restickify of the plan: ``buffer`` from ``source`` to ``target`` (layouts)."""

    buffer: str
    source: DeviceLayout
    target: DeviceLayout
    nbytes: int
    consumers: tuple[str, ...]
    every_call: bool  # the buffer is (a view of) a parameter: a weight relaid on every call
    state: State = None  # the target as a propagation state


@dataclass
class GraphPlan:
    """What the compiler decided for one ATen graph (forward, backward or inference)."""

    kind: str
    graph: torch.fx.GraphModule
    propagation: Propagation
    plan: Plan
    layouts: dict[str, DeviceLayout]
    restickifies: list[Restickify]
    inputs: list[str]
    outputs: list[str]
    seconds: float  # propagation + optimisation (+ strict check)


_cache: dict[tuple, Plan] = {}
_cache_lock = threading.Lock()
cache_stats = {"hits": 0, "misses": 0}


def cache_key(gm: torch.fx.GraphModule, input_states: dict[str, State]) -> tuple:
    """The plan cache key: the graph's code and every input's layout state."""
    code = hashlib.sha256(gm.code.encode()).hexdigest()
    return code, tuple(sorted((k, _state_key(v)) for k, v in input_states.items()))


def _state_key(state: State) -> object:
    """A state as a key: a Fixed layout by its ``binding_key`` (the plan's states hold that layout)."""
    return ("fixed", binding_key(state.layout)) if isinstance(state, Fixed) else state


def _layout(prop: Propagation, name: str, state: State) -> DeviceLayout | None:
    info = prop.infos[name]
    if not isinstance(info, TensorInfo):
        return None
    return layout_of_state(info.shape, info.dtype, state)


def plan_graph(gm: torch.fx.GraphModule, input_states: dict[str, State], kind: str,
               real_layouts: dict[str, DeviceLayout] | None = None, weights: set[str] = frozenset()) -> GraphPlan:
    """Propagate and optimise ``gm``; raise ``LayoutError`` in strict mode if it needs a restickify.
    ``weights``: the inputs that are parameters (a restickify of one is flagged ``every_call``)."""
    start = time.perf_counter()
    prop = Propagation(gm, input_states)
    key = cache_key(gm, input_states)
    with _cache_lock:
        plan = _cache.get(key)
        cache_stats["hits" if plan is not None else "misses"] += 1
    if plan is None:
        plan = solve(prop.problem, MAX_STATES)
        with _cache_lock:
            _cache[key] = plan
    real_layouts = real_layouts or {}
    layouts: dict[str, DeviceLayout] = {}
    for name, state in plan.states.items():
        root = prop.alias_root.get(name, name)
        if name in real_layouts:
            layouts[name] = real_layouts[name]
        elif root != name and root in layouts:
            layouts[name] = layouts[root]
        else:
            found = _layout(prop, name, state)
            if found is not None:
                layouts[name] = found
    records = []
    for move in plan.moves:
        source = layouts.get(move.buffer) or _layout(prop, move.buffer, move.source)  # a view: its base's
        target = _layout(prop, move.buffer, move.target)
        root = prop.alias_root.get(move.buffer, move.buffer)
        records.append(Restickify(move.buffer, source, target, move.nbytes, move.consumers,
                                  root in weights, move.target))
    if records and rules.is_strict():
        raise _strict_error(gm, records[0], layouts, plan.states)
    inputs = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    outputs = [a.name for a in _output_nodes(gm)]
    return GraphPlan(kind, gm, prop, plan, layouts, records, inputs, outputs, time.perf_counter() - start)


def _output_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    found: list[torch.fx.Node] = []
    torch.fx.map_arg(out.args, lambda n: found.append(n) or n)
    return found


def _describe(state: State) -> str:
    return f"sticked on dim {state}" if isinstance(state, int) else str(state)


def _strict_error(gm: torch.fx.GraphModule, move: Restickify, layouts: dict[str, DeviceLayout],
                  states: dict[str, State]) -> rules.LayoutError:
    from torch._dynamo.exc import ShortenTraceback

    class CompileLayoutError(rules.LayoutError, ShortenTraceback):
        """A ``LayoutError`` Dynamo passes to the caller as it is (not as a backend failure)."""

        def __init__(self, message: str) -> None:
            ShortenTraceback.__init__(self, message, first_useful_frame=None)

    consumer = move.consumers[0]
    node = next(n for n in gm.graph.nodes if n.name == consumer)
    operands = [a for a in node.all_input_nodes if a.name in layouts]
    listed = "; ".join(f"{a.name}: {layouts[a.name]} ({_describe(states.get(a.name))})" for a in operands)
    return CompileLayoutError(
        f"compiled graph node {consumer} ({node.target}) needs {move.buffer} {_describe(move.state)}, "
        f"in {move.target}; operands: "
        f"{listed}. Fix: give {move.buffer} that layout first, e.g. torch_layouts.restickify({move.buffer}, "
        f"{move.target}) (or store the input in it), or compile outside torch_layouts.strict_layouts()")


def _restickify_fn(layout: DeviceLayout, state: State) -> Callable[[torch.Tensor], torch.Tensor]:
    """The inserted node's function: a contiguous copy of ``t`` in ``state`` (device to
    device, the eager kernels' strided copy; counted in ``stats()``)."""
    def spyre_restickify(t: torch.Tensor) -> torch.Tensor:
        size = tuple(t.shape)
        out = materialize(t, BoundLayout(layout_of_state(size, t.dtype, state), size, rowmajor(size)))
        count_restickify(t.numel() * t.element_size())
        return out

    spyre_restickify.layout = layout  # type: ignore[attr-defined]
    return spyre_restickify


def insert_restickifies(plan: GraphPlan) -> torch.fx.GraphModule:
    """Insert one restickify node per (buffer, target) after the buffer; rewire its consumers."""
    gm = plan.graph
    nodes = {n.name: n for n in gm.graph.nodes}
    for record in plan.restickifies:
        source = nodes[record.buffer]
        anchor = source
        while anchor.next.op == "placeholder":
            anchor = anchor.next
        with gm.graph.inserting_after(anchor):
            new = gm.graph.call_function(_restickify_fn(record.target, record.state), (source,))
        new.name = f"restickify_{record.buffer}"
        new.meta = dict(source.meta)
        for consumer in record.consumers:
            nodes[consumer].replace_input_with(source, new)
    gm.graph.lint()
    gm.recompile()
    return gm
