"""Comparisons of float32 device tensors into bool ones: the runtime's front replays them run by
run (``csrc/comparisons.cpp``), where ATen's comparisons into bool go element by element. Every
call, planned or replayed, gives the CPU's result, NaNs, infinities, signed zeros and ties
included, in Spyre's bool layout with its padding the pad value."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ops_support import ISA_SETS, kernels_in, padding_holds_pad_value
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.ops import elementwise

OPS = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.4e38, 0.5]


def special_pair(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two float32 tensors drawing from normal and special values, equal at about a third of the
    positions (ties, NaN against NaN, 0 against -0)."""
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor(SPECIAL, dtype=torch.float32)

    def draw() -> torch.Tensor:
        normal = torch.randn(shape, generator=gen)
        special = pool[torch.randint(0, len(SPECIAL), shape, generator=gen)]
        return torch.where(torch.rand(shape, generator=gen) < 0.4, special, normal)

    a, b = draw(), draw()
    b = torch.where(torch.rand(shape, generator=gen) < 0.3, a, b)
    b = torch.where((a == 0) & (torch.rand(shape, generator=gen) < 0.5), -a, b)
    return a, b


# Operands: id, shape, the device layout's dim order (None: default), the view compared.
GEOMETRIES = [
    ("sticks", (64, 256), None, lambda t: t),  # a bool stick holds four float32 sticks
    ("threads", (256, 256), None, lambda t: t),  # 256 KiB of float32: split over the threads
    ("padded-sticks", (40, 150), None, lambda t: t),
    ("3d", (4, 24, 96), None, lambda t: t),
    ("dim-order", (96, 64), [1, 0], lambda t: t),
    ("column-slice", (48, 256), None, lambda t: t[:, 64:192]),
    ("row-slice", (48, 256), None, lambda t: t[5:40]),
    ("short-runs", (32, 5), None, lambda t: t),  # runs under 8 elements: ATen's comparison
]
# The other operand: id, and how it is made from the CPU tensor b and the device view of b.
OTHERS = [
    ("tensor", lambda b, db: (b, db)),
    ("float", lambda b, db: (0.5, 0.5)),
    ("int", lambda b, db: (-1, -1)),
    ("bool", lambda b, db: (True, True)),
    ("nan", lambda b, db: (math.nan, math.nan)),
    ("cpu-0-dim", lambda b, db: (torch.tensor(0.1, dtype=torch.float64),) * 2),
]


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("other_id, other", OTHERS, ids=[o[0] for o in OTHERS])
@pytest.mark.parametrize("_, shape, order, view", GEOMETRIES, ids=[g[0] for g in GEOMETRIES])
def test_comparisons_give_the_cpus_result_on_every_call(_, shape, order, view, other_id, other, name):
    """The planned call and two replays: the CPU's bools, one layout, padding the pad value."""
    elementwise.forget_recipes()
    op = OPS[name]
    layout = None if order is None else SpyreTensorLayout(shape, torch.float32, order)
    outs = []
    for seed in range(3):
        a, b = special_pair(shape, seed)
        da = a.to("spyre", device_layout=layout)
        db = b.to("spyre", device_layout=layout)
        cpu_other, dev_other = other(view(b), view(db))
        out = op(view(da), dev_other)
        assert out.dtype == torch.bool and torch.equal(out.cpu(), op(view(a), cpu_other))
        assert padding_holds_pad_value(out)
        outs.append(out)
    assert all(o.device_tensor_layout() == outs[0].device_tensor_layout() for o in outs)


def test_replayed_comparisons_stay_out_of_python(monkeypatch):
    """After the first call of a geometry, the front replays it: Python is not entered."""
    elementwise.forget_recipes()
    calls = []
    original = elementwise.signature
    monkeypatch.setattr(elementwise, "signature", lambda *a, **k: calls.append(a) or original(*a, **k))
    a, b = special_pair((64, 256), 0)
    da, db = a.to("spyre"), b.to("spyre")
    for _ in range(3):
        assert torch.equal((da > db).cpu(), a > b)
        assert torch.equal((da <= 0.5).cpu(), a <= 0.5)
    assert len(calls) == 2, "a replayed comparison entered Python"


@pytest.mark.parametrize("isa", ISA_SETS)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=1, max_size=3), st.sampled_from(list(OPS)), st.booleans(), st.data())
def test_comparisons_of_any_layout_give_the_cpus_result(isa, shape, name, number, data):
    """Any Spyre layout, a whole tensor or a slice of it, against a tensor or a number: the first
    call and its replays give the CPU's bools, the result's padding the pad value; with the
    comparison kernels of each instruction set this CPU runs."""
    with kernels_in(_C._set_isa_tables, isa):  # each instruction set's tables
        elementwise.forget_recipes()
        order = list(data.draw(st.permutations(range(len(shape)))))
        layout = SpyreTensorLayout(tuple(shape), torch.float32, order)
        d = data.draw(st.integers(0, len(shape) - 1))
        start = data.draw(st.integers(0, shape[d] - 1))
        index = tuple(slice(start, None) if k == d else slice(None) for k in range(len(shape)))
        value = data.draw(st.sampled_from(SPECIAL))
        op = OPS[name]
        for seed in range(3):
            a, b = special_pair(tuple(shape), seed)
            da = a.to("spyre", device_layout=layout)[index]
            db = b.to("spyre", device_layout=layout)[index]
            out = op(da, value) if number else op(da, db)
            expected = op(a[index], value) if number else op(a[index], b[index])
            assert torch.equal(out.cpu(), expected)
            assert padding_holds_pad_value(out)
