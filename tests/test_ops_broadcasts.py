"""Broadcast operands of pointwise ops read densified (``ops/broadcasts.py``): which views are,
that the values read are the view's, and that device ops with such operands give the CPU's bits
on every call, planned, replayed in Python or by the runtime's front."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts.ops import elementwise
from torch_layouts.ops.broadcasts import MAX_BLOCK_FRACTION, dense_from, densified

# shape, strides, the first dim of the block read densified (-1: none).
DENSE_FROM = [
    ((128, 8, 8, 32), (0, 32, 0, 1), 1),        # a bias of the last host dim in Spyre's default 3-D layout
    ((128, 8, 8, 32), (256, 32, 0, 1), -1),     # a (tokens, features) operand: its block is the whole view
    ((128, 8, 8, 32), (0, 0, 32, 1), -1),       # stride 0 only outside the dims it varies along
    ((128, 8, 8, 32), (0, 0, 0, 0), -1),        # a scalar
    ((64, 16, 4, 32), (0, 1, 0, 0), 1),         # varying along one middle dim only
    ((64, 16, 4, 32), (0, 0, 32, 0), 2),
    ((64, 1, 4, 32), (0, 5, 0, 1), -1),         # size-1 dims do not count: nothing lies between
    ((2, 8, 8, 32), (0, 32, 0, 1), -1),         # a block of half the view: too large
    ((16, 2, 2, 32), (0, 32, 0, 1), 1),         # a block of an eighth: densified
    ((8, 32), (32, 1), -1),                     # a whole operand
]


@pytest.mark.parametrize("shape, strides, expected", DENSE_FROM, ids=[f"{s}-{t}" for s, t, _ in DENSE_FROM])
def test_dense_from(shape, strides, expected):
    assert dense_from(shape, strides) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_densified_reads_the_views_values(shape, data):
    """Any view with stride-0 dims: the densified view holds the same values; where a block is
    copied, its dims after the block's first are contiguous and those before it stride 0."""
    keep = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    base = torch.randn([n if k else 1 for n, k in zip(shape, keep)])
    v = base.expand(shape)
    d = densified(v)
    assert torch.equal(d, v)
    k = dense_from(tuple(v.shape), tuple(v.stride()))
    if k < 0:
        assert d is v
    else:
        assert all(s == 0 for s in d.stride()[:k]) and d[(0,) * k].is_contiguous()
        assert d[(0,) * k].numel() <= MAX_BLOCK_FRACTION * v.numel()


# id, operand shapes, the op on either device (all but the first operand broadcast into the first's shape).
OPS = [
    ("add-bias", [(8, 128, 256), (256,)], lambda x, w: x + w),
    ("mul-bias-half", [(8, 64, 128), (128,)], lambda x, w: x * w),
    ("sub-row-and-column", [(16, 40, 96), (40, 1)], lambda x, w: x - w),
    ("positional", [(8, 128, 256), (128, 256)], lambda x, p: x + p),  # its block is the whole view: as it is
    ("addcmul-bias", [(8, 64, 64), (64,), (8, 64, 64)], lambda x, w, y: torch.addcmul(x, w, y, value=0.5)),
    ("lerp-weight", [(8, 64, 64), (8, 64, 64), (64,)], lambda x, y, w: torch.lerp(x, y, w)),
    ("where-mask", [(8, 64, 64), (64,), (8, 64, 64)], lambda x, m, y: torch.where(m > 0, x, y)),
    ("padded-bias", [(8, 40, 70), (70,)], lambda x, w: x * w),
    ("4d-bias", [(4, 8, 16, 64), (64,)], lambda x, w: x + w),
    # float32 add, sub, mul and div replay run by run (csrc/arithmetic_runs.cpp), the bias on either side
    ("div-bias", [(8, 128, 256), (256,)], lambda x, w: x / w),
    ("bias-minus-x", [(8, 128, 256), (256,)], lambda x, w: w - x),
    ("bias-times-x", [(8, 64, 128), (128,)], lambda x, w: w * x),
    ("add-alpha", [(8, 128, 256), (256,)], lambda x, w: torch.add(x, w, alpha=0.5)),  # not 1: ATen's loop
    ("sub-alpha-1", [(8, 128, 256), (256,)], lambda x, w: torch.sub(x, w, alpha=1)),
    ("add-out", [(8, 128, 256), (256,)], lambda x, w: torch.add(x, w, out=torch.empty_like(x))),
]


@pytest.mark.parametrize("_, shapes, fn", OPS, ids=[c[0] for c in OPS])
def test_broadcast_ops_give_the_cpus_bits_every_call(_, shapes, fn):
    """Three calls of fresh data (the first plans, the others replay): the CPU's result bit for bit,
    the padding the pad value; strict mode (planned every time) gives the same bits."""
    elementwise.forget_recipes()
    dtype = torch.float16 if "half" in _ else torch.float32
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        host = [torch.randn(s, generator=gen).to(dtype) for s in shapes]
        out = fn(*[h.to("spyre") for h in host])
        expected = fn(*host)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), expected)
        assert padding_holds_pad_value(out)
    with torch_layouts.strict_layouts():
        assert torch.equal(fn(*[h.to("spyre") for h in host]).cpu(), expected)


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_", "div_"])
def test_in_place_ops_read_the_broadcast_operand_densified_and_write_the_target(op):
    """An in-place op whose other operand is broadcast: the target gets the CPU's bits, call after
    call (the target itself is never read from a copy)."""
    elementwise.forget_recipes()
    x, w = torch.randn(8, 64, 128), torch.randn(128)
    dx, dw = x.to("spyre"), w.to("spyre")
    for _ in range(3):
        getattr(dx, op)(dw)
        getattr(x, op)(w)
        assert torch.equal(dx.cpu(), x)


BROADCAST_OPS = {"add": torch.add, "mul": torch.mul, "sub": torch.sub, "div": torch.div, "maximum": torch.maximum,
                 "where": lambda x, w: torch.where(w > 0, x, w), "rsub": lambda x, w: w - x}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 24), min_size=2, max_size=4), st.sampled_from(sorted(BROADCAST_OPS)),
       st.sampled_from([torch.float32, torch.float16]), st.data())
def test_broadcast_ops_of_any_shape_and_layout_give_the_cpus_bits(shape, name, dtype, data):
    """Any shape, a first operand in any Spyre layout and a second broadcast along its first dim and
    any others but the last (densified or not): the first call and the replays give the CPU's bits."""
    elementwise.forget_recipes()
    shape[0] *= 8  # a leading batch dim that makes small blocks: a bias over the rest densifies
    if data.draw(st.booleans()):  # whole sticks in the default layout: no padding, replayed by the front
        shape[-1] = 64 * data.draw(st.integers(1, 3))
    keep = [False] + data.draw(st.lists(st.booleans(), min_size=len(shape) - 2, max_size=len(shape) - 2)) + [True]
    small = [n if k else 1 for n, k in zip(shape, keep)]
    order = data.draw(st.one_of(st.none(), st.permutations(range(len(shape)))))  # None: the default layout
    layout = torch_layouts.SpyreTensorLayout(tuple(shape), dtype, None if order is None else list(order))
    fn = BROADCAST_OPS[name]
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        x, w = torch.randn(shape, generator=gen).to(dtype), torch.randn(small, generator=gen).to(dtype)
        out = fn(x.to("spyre", device_layout=layout), w.to("spyre"))
        assert torch.equal(out.cpu(), fn(x, w)) and padding_holds_pad_value(out)
