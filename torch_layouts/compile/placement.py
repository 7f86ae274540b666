"""Restickify placement: choose every node's layout so that the bytes moved are minimal.

The problem (``Problem``) is a DAG in topological order. Each node has *modes*: the
state (layout) its buffer gets and the state it needs of each input (``None``: any).
An input whose state does not fit gets a restickify; one restickify per (buffer,
target state) serves all its consumers, and costs ``move_cost(buffer, source, target)``
(bytes moved: the padded source read plus the padded destination written).

``solve`` is a dynamic programme over the topological order whose state is the
assignment of the *live* buffers (defined, with a consumer still to come) plus the
targets each was already restickified to. States that agree on that are merged,
keeping the cheaper, so the result is exact. When a layer would exceed ``max_states``
the search turns bounded: it keeps the ``beam`` cheapest states (an upper bound, a
real plan) and runs a relaxed programme alongside that forgets the oldest live buffers
(their later restickifies cost nothing), which is a proven lower bound.

Example::

    >>> p = Problem([PlanNode("x", (), (Mode("a", ()),)),
    ...              PlanNode("y", ("x",), (Mode("b", ("b",)),))],
    ...             move_cost=lambda buf, src, dst: 10)
    >>> solve(p).cost, solve(p).optimal
    (10, True)
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

State = Hashable
ANY = None


@dataclass(frozen=True)
class Mode:
    """One way to run a node: its buffer's state and the state each input must be in."""

    out: State
    needs: tuple[State | None, ...]


@dataclass(frozen=True)
class PlanNode:
    name: str
    inputs: tuple[str, ...]  # producers, one per entry of each mode's ``needs``
    modes: tuple[Mode, ...]


@dataclass(frozen=True)
class Move:
    """A restickify of ``buffer`` from ``source`` to ``target`` (shared by ``consumers``)."""

    buffer: str
    source: State
    target: State
    nbytes: int
    consumers: tuple[str, ...]


@dataclass
class Plan:
    choice: dict[str, int]  # node -> mode index
    states: dict[str, State]
    moves: list[Move]
    cost: int
    lower_bound: int
    optimal: bool
    exact_nodes: int  # nodes processed before the search turned bounded (all when exact)
    seconds: float = 0.0
    peak_states: int = 0

    @property
    def gap(self) -> int:
        return self.cost - self.lower_bound


@dataclass
class Problem:
    nodes: list[PlanNode]
    move_cost: Callable[[str, State, State], int]
    compatible: Callable[[State, State], bool] = field(default=lambda have, need: have == need)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for node in self.nodes:
            if not node.modes:
                raise ValueError(f"node {node.name!r} has no mode")
            for mode in node.modes:
                if len(mode.needs) != len(node.inputs):
                    raise ValueError(f"node {node.name!r}: a mode needs {len(mode.needs)} inputs, "
                                     f"the node has {len(node.inputs)}")
            for name in node.inputs:
                if name not in seen:
                    raise ValueError(f"node {node.name!r} reads {name!r} before it is defined")
            seen.add(node.name)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        last: dict[str, int] = {}
        for i, node in enumerate(self.nodes):
            for name in node.inputs:
                last[name] = i
        self.last_use = last


def evaluate(problem: Problem, choice: dict[str, int]) -> tuple[int, list[Move]]:
    """Cost and restickifies of a full assignment (one restickify per buffer and target)."""
    states = {n.name: n.modes[choice[n.name]].out for n in problem.nodes}
    moves: dict[tuple[str, State], list[str]] = {}
    for node in problem.nodes:
        mode = node.modes[choice[node.name]]
        for name, need in zip(node.inputs, mode.needs):
            if need is not ANY and not problem.compatible(states[name], need):
                consumers = moves.setdefault((name, need), [])
                if node.name not in consumers:
                    consumers.append(node.name)
    records = [Move(b, states[b], t, problem.move_cost(b, states[b], t), tuple(c)) for (b, t), c in moves.items()]
    return sum(m.nbytes for m in records), records


def brute_force(problem: Problem) -> int:
    """The minimum cost over every assignment (for tests on small problems)."""
    names = [n.name for n in problem.nodes]
    best = None
    for combo in itertools.product(*(range(len(n.modes)) for n in problem.nodes)):
        cost, _ = evaluate(problem, dict(zip(names, combo)))
        best = cost if best is None else min(best, cost)
    return 0 if best is None else best


_FREE = object()  # a forgotten live buffer in the relaxed programme: its restickifies are free


def _step(problem: Problem, node: PlanNode, live: Sequence[str], next_live: Sequence[str],
          layer: dict[tuple, tuple[int, object]], track: bool) -> dict[tuple, tuple[int, object]]:
    """Expand every state of a layer by every mode of ``node``."""
    pos = {name: i for i, name in enumerate(live)}
    keep = [pos.get(name) for name in next_live]
    new_last = next_live and next_live[-1] == node.name
    out: dict[tuple, tuple[int, object]] = {}
    cost_of = problem.move_cost
    compatible = problem.compatible
    for key, (cost, _) in layer.items():
        for m, mode in enumerate(node.modes):
            entries = list(key)
            added = 0
            for name, need in zip(node.inputs, mode.needs):
                if need is ANY:
                    continue
                i = pos[name]
                entry = entries[i]
                if entry is _FREE:
                    continue
                state, paid = entry
                if compatible(state, need) or need in paid:
                    continue
                added += cost_of(name, state, need)
                entries[i] = (state, paid | {need})
            new_key = tuple(entries[i] for i in keep[:-1]) if new_last else tuple(entries[i] for i in keep)
            if new_last:
                new_key += ((mode.out, frozenset()),)
            total = cost + added
            old = out.get(new_key)
            if old is None or total < old[0]:
                out[new_key] = (total, (key, m) if track else None)
    return out


def _forget(layer: dict[tuple, tuple[int, object]], cap: int) -> dict[tuple, tuple[int, object]]:
    """Relax a layer below ``cap`` states by forgetting its oldest live buffers."""
    width = len(next(iter(layer)))
    for drop in range(1, width + 1):
        merged: dict[tuple, tuple[int, object]] = {}
        for key, (cost, _) in layer.items():
            relaxed = (_FREE,) * drop + key[drop:]
            old = merged.get(relaxed)
            if old is None or cost < old[0]:
                merged[relaxed] = (cost, None)
        if len(merged) <= cap:
            return merged
    return merged


def solve(problem: Problem, max_states: int = 2048, beam: int = 128) -> Plan:
    """The minimum-cost plan: exact while every layer fits ``max_states``; after that the
    ``beam`` cheapest states go on (a real plan) beside a relaxed programme of at most
    ``beam`` states (the lower bound)."""
    start = time.perf_counter()
    order = problem.nodes
    lives: list[list[str]] = []
    live: list[str] = []
    for i, node in enumerate(order):
        live = [n for n in live if problem.last_use.get(n, -1) > i]
        if problem.last_use.get(node.name, -1) > i:
            live.append(node.name)
        lives.append(live)
    layer: dict[tuple, tuple[int, object]] = {(): (0, None)}
    relaxed: dict[tuple, tuple[int, object]] | None = None
    history: list[dict[tuple, tuple[int, object]]] = []
    prev_live: list[str] = []
    exact_nodes = len(order)
    peak = 1
    for i, node in enumerate(order):
        layer = _step(problem, node, prev_live, lives[i], layer, True)
        if relaxed is not None:
            relaxed = _step(problem, node, prev_live, lives[i], relaxed, False)
            if len(relaxed) > beam:
                relaxed = _forget(relaxed, beam)
        if len(layer) > (max_states if relaxed is None else beam):
            if relaxed is None:
                exact_nodes = i
                relaxed = _forget(layer, beam)
            layer = dict(heapq.nsmallest(beam, layer.items(), key=lambda kv: kv[1][0]))
        peak = max(peak, len(layer))
        history.append(layer)
        prev_live = lives[i]
    key, (cost, _) = min(layer.items(), key=lambda kv: kv[1][0])
    choice: dict[str, int] = {}
    for i in range(len(order) - 1, -1, -1):
        _, back = history[i][key]
        key, m = back
        choice[order[i].name] = m
    total, moves = evaluate(problem, choice)
    assert total == cost, (total, cost)
    bound = cost if relaxed is None else min(v[0] for v in relaxed.values())
    return Plan(choice, {n.name: n.modes[choice[n.name]].out for n in order}, moves, cost, bound,
                relaxed is None or bound == cost, exact_nodes, time.perf_counter() - start, peak)
