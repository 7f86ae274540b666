"""Pointwise ops on padded layouts replayed on whole sticks (``elementwise._keeps_padding``,
``AtenRecipe::whole`` in ``csrc/kernel_front.cpp``): where the op maps the operands' pad values
to the result's with the call's scalars, the runtime's front computes the whole buffers, padding
included; a call with other scalars, or an op that changes the pad value, computes the real
positions box by box. Either way: the CPU's bits at the real positions and the pad value in the
padding, on every call."""

from __future__ import annotations

import pytest
import torch

import torch_layouts
from ops_support import padding_holds_pad_value, stays_on_device
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import elementwise
from torch_layouts.ops.operands import raw

A = torch.ops.aten
# shapes whose default layout pads its sticks (rows of 16 of 32 float32 lanes, 70 of 96, 40 of 64 float16)
SHAPES = [((16, 8, 16, 16), torch.float32), ((5, 70), torch.float32), ((3, 40), torch.float16)]
# id, the op on (a, b, scalar), the scalars of successive calls (a recipe's whole-stick promise
# holds for the first call's; the others take the boxes), whether the CPU's bits are expected
# (ATen's transcendental kernels round differently on strided views and on contiguous runs)
OPS = [
    ("relu", lambda a, b, s: torch.relu(a), [None], True),
    ("mul-scalar", lambda a, b, s: a * s, [0.5, -0.5, 0.5, float("inf")], True),
    ("mul-scalar-first-negative", lambda a, b, s: a * s, [-0.5, 0.5], True),
    ("add-scalar", lambda a, b, s: a + s, [1.0, 0.0, 1.0], True),
    ("add", lambda a, b, s: a + b, [None], True),
    ("threshold-backward", lambda a, b, s: A.threshold_backward(a, b, s), [0.0, 0.5, 0.0], True),
    ("sigmoid", lambda a, b, s: torch.sigmoid(a), [None], False),
    ("exp", lambda a, b, s: torch.exp(a), [None], False),
]


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    bits = {torch.float32: torch.int32, torch.float16: torch.int16}[want.dtype]
    return got.dtype == want.dtype and torch.equal(got.cpu().view(bits), want.view(bits))


@pytest.mark.parametrize("shape, dtype", SHAPES, ids=["16x8x16x16", "5x70", "3x40-f16"])
@pytest.mark.parametrize("name, op, scalars, exact", OPS, ids=[o[0] for o in OPS])
@pytest.mark.parametrize("pad", [0.0, float("-inf")])
def test_padded_results_are_the_cpus_with_their_padding(shape, dtype, name, op, scalars, exact, pad):
    """Each call (the first runs Python, the next are replayed, on whole sticks or box by box):
    the CPU's bits, the padding at the result layout's pad value, no fallback, no host bytes."""
    elementwise.forget_recipes()
    gen = torch.Generator().manual_seed(len(name))
    layout = SpyreTensorLayout(shape, dtype, pad_value=pad)
    for call, scalar in enumerate(scalars * 2):
        a = torch.randn(shape, generator=gen).to(dtype)
        a[a.abs() < 0.2] = -0.0
        b = torch.randn(shape, generator=gen).to(dtype)
        da, db = a.to("spyre", device_layout=layout), b.to("spyre", device_layout=layout)
        stale = torch.empty(shape, dtype=dtype, device="spyre", device_layout=layout)
        raw(stale).fill_(float("nan"))  # freed, its block is the result's: padding a result left unwritten is NaN
        del stale
        torch_layouts.reset_stats()
        got = op(da, db, scalar)
        stays_on_device()
        want = op(a, b, scalar)
        if exact:
            assert _same(got, want), (call, scalar)
        else:
            torch.testing.assert_close(got.cpu(), want, rtol=2e-3 if dtype == torch.float16 else 2e-6, atol=0)
        assert padding_holds_pad_value(got), (call, scalar)


def test_whole_sticks_are_taken_where_the_op_keeps_the_padding(monkeypatch):
    """The promise is made for relu and ``x * 0.5`` over zero padding, and not for ``x + 1``,
    ``x * -0.5`` (which makes -0 of +0) or ``exp``."""
    promised = {}
    original = elementwise._keeps_padding

    def spy(recipe, spec, args, kwargs):
        promised[spec.name] = original(recipe, spec, args, kwargs)
        return promised[spec.name]

    monkeypatch.setattr(elementwise, "_keeps_padding", spy)
    x = torch.randn(16, 8, 16, 16).to("spyre")
    for name, fn in (("relu", torch.relu), ("exp", torch.exp)):
        elementwise.forget_recipes()
        fn(x)
        assert (promised[name] is not None) == (name == "relu"), promised
    for scalar, kept in ((0.5, True), (-0.5, False)):
        elementwise.forget_recipes()
        promised.clear()
        x * scalar
        assert (promised["mul.Tensor"] is not None) == kept, promised
    elementwise.forget_recipes()
    x + 1.0
    assert promised["add.Tensor"] is None
