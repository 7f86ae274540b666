"""The restickify placement optimiser against brute force, exact and bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_layouts.compile.placement import Mode, PlanNode, Problem, brute_force, evaluate, solve


@st.composite
def problems(draw: st.DrawFn, max_nodes: int = 7) -> Problem:
    """Random DAGs: up to 3 modes a node, states 0..2, needs a state or any (None)."""
    n = draw(st.integers(1, max_nodes))
    nodes = []
    for i in range(n):
        inputs = tuple(draw(st.lists(st.sampled_from([f"n{j}" for j in range(i)]), max_size=2, unique=True))) \
            if i else ()
        modes = tuple(Mode(draw(st.integers(0, 2)),
                           tuple(draw(st.sampled_from([None, 0, 1, 2])) for _ in inputs))
                      for _ in range(draw(st.integers(1, 3))))
        nodes.append(PlanNode(f"n{i}", inputs, modes))
    weights = {f"n{i}": draw(st.integers(1, 9)) for i in range(n)}
    return Problem(nodes, lambda buf, src, dst: weights[buf] * (3 + src) + weights[buf] * (1 + 2 * dst))


@settings(max_examples=150)
@given(problems())
def test_exact_optimum_equals_brute_force(p: Problem) -> None:
    plan = solve(p)
    assert plan.optimal and plan.lower_bound == plan.cost
    assert plan.cost == brute_force(p)
    assert evaluate(p, plan.choice)[0] == plan.cost
    targets = [(m.buffer, m.target) for m in plan.moves]
    assert len(targets) == len(set(targets)), "one restickify per (buffer, target)"


@settings(max_examples=150)
@given(problems(), st.integers(1, 3))
def test_bounded_search_brackets_the_optimum(p: Problem, cap: int) -> None:
    best = brute_force(p)
    plan = solve(p, max_states=cap, beam=cap)
    assert plan.lower_bound <= best <= plan.cost
    assert evaluate(p, plan.choice)[0] == plan.cost
    if plan.optimal:
        assert plan.cost == best


def test_shared_restickify_is_paid_once() -> None:
    # x (state 0) feeds two consumers that both need state 1: one move, not two.
    p = Problem([PlanNode("x", (), (Mode(0, ()),)),
                 PlanNode("a", ("x",), (Mode(1, (1,)),)),
                 PlanNode("b", ("x",), (Mode(1, (1,)),))], lambda buf, src, dst: 100)
    plan = solve(p)
    assert plan.cost == 100
    assert [(m.buffer, m.target, m.consumers) for m in plan.moves] == [("x", 1, ("a", "b"))]


def test_choice_avoids_a_move() -> None:
    # y can follow x (state 0) or be 1; its consumer accepts anything: no move.
    p = Problem([PlanNode("x", (), (Mode(0, ()),)),
                 PlanNode("y", ("x",), (Mode(1, (1,)), Mode(0, (0,)))),
                 PlanNode("z", ("y",), (Mode(2, (None,)),))], lambda buf, src, dst: 5)
    assert solve(p).cost == 0 and solve(p).states["y"] == 0


@pytest.mark.parametrize("bad, message", [
    ([PlanNode("x", ("y",), (Mode(0, (0,)),))], "before it is defined"),
    ([PlanNode("x", (), ())], "has no mode"),
    ([PlanNode("x", (), (Mode(0, (1,)),))], "needs 1 inputs"),
])
def test_bad_problems_are_rejected(bad: list[PlanNode], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Problem(bad, lambda *a: 0)
