"""Hand-computed restickify plans of small graphs, and compiled results equal to eager/CPU.

S = 64 float16 elements: an (S, S) buffer is 8192 padded bytes, so one restickify of
it costs 16384 (read the source, write the destination).
"""

from __future__ import annotations

import pytest
import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout

S = 64
ONE = 2 * S * S * 2  # one restickify of an (S, S) float16 buffer


def _t(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.float16)


def diamond(x, w):
    d = x.t()
    return (d.relu() + d.exp()) @ w


def fan_out(x, y):
    t = y.t()
    return x + t, x * t


def chained(a, b, c):
    return (a @ b) @ c


def transposed_add(x, y):
    return x + y.t()


def two_matmuls(x, w1, w2):
    return x @ w1, x.t() @ w2


CASES = [  # (fn, number of inputs, expected cost, expected restickifies)
    (chained, 3, 0, 0),
    (transposed_add, 2, ONE, 1),
    (diamond, 2, ONE, 1),
    (fan_out, 2, ONE, 1),
    (two_matmuls, 3, ONE, 1),
]


@pytest.mark.parametrize("fn, n, cost, count", CASES, ids=[c[0].__name__ for c in CASES])
def test_hand_computed_optimum(fn, n: int, cost: int, count: int) -> None:
    host = [_t(i, S, S) for i in range(n)]
    r = torch_layouts.explain_compile(fn, *[h.to("spyre") for h in host])
    assert r.optimal and r.lower_bound_bytes == r.cost_bytes
    assert r.cost_bytes == cost
    assert len(r.restickifies) == count
    assert sum(m.nbytes for m in r.restickifies) == cost
    pairs = [(m.buffer, m.target) for m in r.restickifies]
    assert len(pairs) == len(set(pairs))


def test_buffer_with_two_consumers_is_restickified_once() -> None:
    x, y = _t(0, S, S).to("spyre"), _t(1, S, S).to("spyre")
    r = torch_layouts.explain_compile(fan_out, x, y)
    (move,) = r.restickifies
    assert len(move.consumers) == 2  # both the add and the mul read the one copy


@pytest.mark.parametrize("fn, n, cost, count", CASES, ids=[c[0].__name__ for c in CASES])
def test_compiled_equals_eager_and_cpu(fn, n: int, cost: int, count: int) -> None:
    host = [_t(i, S, S) for i in range(n)]
    dev = [h.to("spyre") for h in host]
    compiled = torch.compile(fn, backend="spyre")
    compiled(*dev)
    torch_layouts.reset_stats()
    got = compiled(*dev)
    assert torch_layouts.stats()["restickify_count"] == count  # the plan's, and no kernel adds any
    eager = fn(*dev)
    cpu = fn(*[h.float() for h in host])
    got, eager, cpu = [(v,) if isinstance(v, torch.Tensor) else v for v in (got, eager, cpu)]
    for g, e, c in zip(got, eager, cpu):
        torch.testing.assert_close(g.cpu(), e.cpu(), rtol=0, atol=0)
        torch.testing.assert_close(g.cpu().float(), c, rtol=2e-2, atol=2e-1)


def test_input_layout_is_respected() -> None:
    # y stored sticked on dim 0: y.t() is sticked on its last dim, the add needs nothing.
    x = _t(0, S, S).to("spyre")
    y = _t(1, S, S).to("spyre", device_layout=SpyreTensorLayout((S, S), torch.float16, [1, 0]))
    r = torch_layouts.explain_compile(transposed_add, x, y)
    assert r.cost_bytes == 0 and r.restickifies == []
    assert r.layouts["arg1_1"] == y.device_tensor_layout()


def test_weight_relaid_every_call_is_flagged() -> None:
    lin = torch.nn.Linear(S, S, dtype=torch.float16).to("spyre")
    r = torch_layouts.explain_compile(lin, _t(0, 8, S).to("spyre"))
    forward = [m for m in r.restickifies if not m.buffer.startswith("backward.")]
    assert [(m.buffer, m.every_call) for m in forward] == [("t", True)]  # linear's weight.t() sticked on k
    assert not any(m.every_call for m in r.restickifies if m not in forward)
    assert "a weight: relaid on every call" in str(r)


def test_other_family_input_is_kept_and_converted_only_where_needed() -> None:
    from torch_layouts import htp

    x = torch.randn(1, 4, 8, 64)
    a, b = x.to("spyre", device_layout=htp.R4CroutonLayout), x.to("spyre")
    kept = torch_layouts.explain_compile(lambda p: p.clone().relu(), a)
    assert kept.cost_bytes == 0 and kept.layouts["relu"] == a.device_tensor_layout()
    r = torch_layouts.explain_compile(lambda p, q: p + q, a, b)
    (move,) = r.restickifies
    assert (move.buffer, move.source, move.consumers) == ("arg0_1", a.device_tensor_layout(), ("add",))
    assert move.nbytes == a.device_tensor_layout().nbytes + move.target.nbytes
    out = torch.compile(lambda p, q: p + q, backend="spyre")(a, b)
    assert torch.equal(out.cpu(), x + x)
    relu = torch.compile(lambda p: p.clone().relu(), backend="spyre")(a)
    assert torch.equal(relu.cpu(), x.relu()) and relu.device_tensor_layout() == a.device_tensor_layout()


def test_transformer_graph_over_200_nodes_is_planned_exactly_and_fast() -> None:
    from torch_layouts.compile.models import transformer

    torch.manual_seed(0)
    model = transformer(4).to(torch.float16).to("spyre")
    with torch.no_grad():
        r = torch_layouts.explain_compile(model, torch.randn(2, 16, 64, dtype=torch.float16).to("spyre"))
    (plan,) = r.plans
    assert len(plan.plan.states) >= 200
    assert plan.plan.optimal and plan.plan.exact_nodes == len(plan.plan.states)
    assert plan.seconds < 2
