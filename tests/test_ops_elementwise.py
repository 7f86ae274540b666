"""Pointwise device kernels against PyTorch's CPU ops, over Spyre, HTP, TensorRT and MACE
layouts: values bit for bit, the result's layout, and the pad value in every padding
position of the result's device memory."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import SpyreTensorLayout, htp, mace, tensorrt

F16, F32 = torch.float16, torch.float32


# -- helpers ---------------------------------------------------------------------------------

def check(y: torch.Tensor, ref: torch.Tensor, exact: bool = True) -> None:
    """``y`` (spyre) equals the CPU result (bit for bit, or within an ulp or so for
    transcendental functions); its padding holds the pad value."""
    assert y.device.type == "spyre"
    assert y.dtype == ref.dtype and y.shape == ref.shape
    if exact:
        torch.testing.assert_close(y.cpu(), ref, atol=0, rtol=0, equal_nan=True)
    else:
        torch.testing.assert_close(y.cpu(), ref, equal_nan=True)
    assert padding_holds_pad_value(y)


def restickifies() -> int:
    return torch_layouts.stats()["restickify_count"]


# One row per layout: id, host shape, dtype, device_layout (None: the default layout).
LAYOUTS = [
    ("default-f16", (64, 256), F16, None),
    ("padded-stick-f32", (3, 20, 150), F32, None),
    ("dim-order-10-f16", (96, 130), F16, SpyreTensorLayout((96, 130), F16, [1, 0])),
    ("dim-order-102-f32", (3, 40, 70), F32, SpyreTensorLayout((3, 40, 70), F32, [1, 0, 2])),
    ("sparse-f16", (16, 70), F16, SpyreTensorLayout((16, 70), F16, [0, 1, -1])),
    ("pad-value-f32", (9, 40), F32, SpyreTensorLayout((9, 40), F32, pad_value=-3.0)),
    ("htp-crouton-f16", (1, 8, 8, 40), F16, htp.R4CroutonLayout),
    ("tensorrt-kCHW4-f16", (1, 6, 5, 7), F16, tensorrt.TensorFormat.kCHW4),
    ("mace-image-f32", (1, 4, 5, 6), F32, mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
]
LAYOUT_IDS = [row[0] for row in LAYOUTS]


def make(row: tuple, seed: int = 0, positive: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(host tensor, its copy on the device in the row's layout)."""
    _, shape, dtype, spec = row
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    if positive:
        x = x.abs() + 0.5
    y = x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)
    return x, y


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "relu": torch.relu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
    "gelu-tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "sin": torch.sin, "erf": torch.erf,
    "floor": torch.floor, "sign": torch.sign,
}
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal"}


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_unary(row):
    x, y = make(row)
    xp, yp = make(row, positive=True)
    torch_layouts.reset_stats()
    for name, fn in UNARY.items():
        host, device = (xp, yp) if name in POSITIVE else (x, y)
        out = fn(device)
        check(out, fn(host), exact=False)  # vectorised and strided CPU loops may differ by an ulp
        assert out.device_tensor_layout() == y.device_tensor_layout(), name
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {} and stats["restickify_count"] == 0


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "add-alpha": lambda a, b: torch.add(a, b, alpha=-2), "pow": lambda a, b: torch.pow(a.abs() + 0.5, b),
    "maximum": torch.maximum, "minimum": torch.minimum,
    "floor-div": lambda a, b: torch.div(a, b, rounding_mode="floor"),
}
COMPARE = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_binary_same_layout(row):
    (a, da), (b, db) = make(row, 1), make(row, 2)
    torch_layouts.reset_stats()
    for name, fn in BINARY.items():
        out = fn(da, db)
        check(out, fn(a, b), exact=name != "pow")
        assert out.device_tensor_layout() == da.device_tensor_layout(), name
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {} and stats["restickify_count"] == 0
    check(da, a)  # the inputs are untouched
    check(db, b)


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_comparisons_give_bool_in_the_same_dim_order(row):
    (a, da), (b, db) = make(row, 1), make(row, 2)
    b[..., :3] = a[..., :3]  # some equal elements
    db = b.to("spyre", device_layout=da.device_tensor_layout())
    layout = da.device_tensor_layout()
    if getattr(layout, "dim_order", None) is not None:
        expected = SpyreTensorLayout(a.shape, torch.bool, list(layout.dim_order))
    else:
        expected = SpyreTensorLayout(a.shape, torch.bool)
    for name, fn in COMPARE.items():
        out = fn(da, db)
        check(out, fn(a, b))
        assert out.device_tensor_layout() == expected, name


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_scalar_operands(row):
    x, y = make(row, 3)
    s_dev, s_cpu = torch.tensor(1.5, dtype=x.dtype).to("spyre"), torch.tensor(-0.25, dtype=x.dtype)
    cases = [
        (y + 2, x + 2), (2 - y, 2 - x), (y * 0.5, x * 0.5), (y / 3, x / 3), (y * y, x * x),
        (y.clamp(-0.5, 0.5), x.clamp(-0.5, 0.5)), (y.clamp(min=0.1), x.clamp(min=0.1)),
        (y > 0, x > 0), (y * s_dev, x * s_dev.cpu()), (y + s_cpu, x + s_cpu),
    ]
    for out, ref in cases:
        check(out, ref)
    check(y ** 2, x ** 2, exact=False)
    check(torch.pow(2.0, y), torch.pow(2.0, x), exact=False)


# One row per broadcast: id, full shape, other operand's shape, dtype.
BROADCASTS = [
    ("bias", (64, 256), (256,), F16),
    ("bias-padded", (7, 150), (150,), F32),
    ("row", (64, 256), (1, 256), F16),
    ("column", (40, 100), (40, 1), F32),
    ("bias-3d", (2, 30, 70), (70,), F32),
    ("middle", (2, 30, 70), (2, 1, 70), F16),
]


@pytest.mark.parametrize("_, full, other, dtype", BROADCASTS, ids=[b[0] for b in BROADCASTS])
def test_broadcast_sharing_the_stick_needs_no_restickify(_, full, other, dtype):
    a, b = torch.randn(full).to(dtype), torch.randn(other).to(dtype)
    da, db = a.to("spyre"), b.to("spyre")
    torch_layouts.reset_stats()
    for out, ref in ((da + db, a + b), (db * da, b * a), (da - db, a - b)):
        check(out, ref)
        assert out.device_tensor_layout() == da.device_tensor_layout()
    assert restickifies() == 0


def test_both_operands_broadcast():
    a, b = torch.randn(40, 1), torch.randn(1, 70)
    out = a.to("spyre") + b.to("spyre")
    check(out, a + b)
    assert out.device_tensor_layout() == SpyreTensorLayout((40, 70), F32)


def test_broadcast_of_a_sparse_reduction():
    """x - x.amax(-1, keepdim=True): the sparse (one element per stick) column broadcasts in place."""
    x = -torch.rand(20, 100) - 1
    dx = x.to("spyre")
    m = dx.amax(-1, keepdim=True)
    torch_layouts.reset_stats()
    check(dx - m, x - x.amax(-1, keepdim=True))
    assert restickifies() == 0


def test_type_promotion():
    a, b = torch.randn(30, 70).half(), torch.randn(30, 70)
    ints = torch.randint(-5, 5, (30, 70), dtype=torch.int32)
    da, db, di = a.to("spyre"), b.to("spyre"), ints.to("spyre")
    for out, ref in ((da + db, a + b), (db + da, b + a), (di + da, ints + a), (di / 2, ints / 2),
                     (di * 2.5, ints * 2.5), (di > da, ints > a)):
        check(out, ref)
    check(torch.exp(di), torch.exp(ints), exact=False)


def test_where_clamp_and_masked_fill():
    x, y = torch.randn(33, 100), torch.randn(33, 100)
    lo, hi = torch.full((100,), -0.5), torch.full((33, 1), 0.5)
    dx, dy, dlo, dhi = (t.to("spyre") for t in (x, y, lo, hi))
    check(torch.where(dx > dy, dx, dy), torch.where(x > y, x, y))
    check(torch.where(dx > 0, dx, 0.0), torch.where(x > 0, x, 0.0))
    check(torch.clamp(dx, dlo, dhi), torch.clamp(x, lo, hi))
    check(dx.masked_fill(dx < 0, -7.0), x.masked_fill(x < 0, -7.0))
    mask = torch.rand(100) > 0.5
    check(dx.masked_fill(mask.to("spyre"), 1.25), x.masked_fill(mask, 1.25))


# -- type conversion ----------------------------------------------------------------------------
CONVERSIONS = [
    ("default", (40, 100), F16, None, F32),
    ("default-to-int64", (40, 100), F32, None, torch.int64),
    ("dim-order", (40, 100), F16, [1, 0], F32),
    ("dim-order-3d", (3, 40, 70), F32, [1, 0, 2], F16),
    ("sparse", (16, 70), F16, [0, 1, -1], F32),
    ("to-bool", (16, 70), F32, None, torch.bool),
    ("to-bf16", (5, 100, 150), F32, [2, 0, 1], torch.bfloat16),
]


@pytest.mark.parametrize("_, shape, dtype, order, target", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
def test_type_conversion_keeps_the_dim_order(_, shape, dtype, order, target):
    x = (torch.randn(shape) * 4).to(dtype)
    y = x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, order))
    torch_layouts.reset_stats()
    out = y.to(target)
    stats = torch_layouts.stats()
    assert stats["kernel_calls"] == {"aten::_to_copy": 1} and stats["host_bounces"] == 0
    assert stats["h2d_bytes"] == 0 and stats["d2h_bytes"] == 0 and stats["fallbacks"] == {}
    check(out, x.to(target))
    assert out.device_tensor_layout() == SpyreTensorLayout(shape, target, order)


# -- views ---------------------------------------------------------------------------------------
def test_aligned_slices_are_read_in_place():
    a, b = torch.randn(64, 256).half(), torch.randn(64, 256).half()
    da, db = a.to("spyre"), b.to("spyre")
    torch_layouts.reset_stats()
    check(da[:, 64:192] * db[:, 64:192], a[:, 64:192] * b[:, 64:192])
    check(da[10:50] + db[10:50], a[10:50] + b[10:50])
    check(da[3] - db[5], a[3] - b[5])
    assert restickifies() == 0


def test_unaligned_slices_are_restickified():
    a, b = torch.randn(64, 256).half(), torch.randn(64, 256).half()
    da, db = a.to("spyre"), b.to("spyre")
    torch_layouts.reset_stats()
    check(da[3:50, 5:77] * db[3:50, 5:77], a[3:50, 5:77] * b[3:50, 5:77])
    check(da[::2, ::3] + 1, a[::2, ::3] + 1)
    assert restickifies() >= 2
    assert torch_layouts.stats()["fallbacks"] == {}


def test_transposed_tensor_keeps_its_buffer_layout():
    a, b = torch.randn(64, 96), torch.randn(64, 96)
    da, db = a.to("spyre"), b.to("spyre")
    torch_layouts.reset_stats()
    out = da.t() * db.t()
    check(out, a.t() * b.t())
    assert out.stride() == da.t().stride() and out.device_tensor_layout() == da.device_tensor_layout()
    check(da.t() + db.t().contiguous(), a.t() + b.t())  # a contiguous copy keeps the stick
    assert restickifies() == 0
    bt = b.t().contiguous().to("spyre")  # the default layout of (96, 64): sticked on its dim 1
    check(da.t() + bt, a.t() + b.t())
    assert restickifies() == 1


def test_expanded_and_reshaped_views():
    a = torch.randn(2, 30, 64)
    da = a.to("spyre")
    check(da.reshape(60, 64) * 2, a.reshape(60, 64) * 2)
    check(da[:, :1].expand(2, 30, 64) + da, a[:, :1].expand(2, 30, 64) + a)
    check(da.permute(1, 0, 2) - da.permute(1, 0, 2), a.permute(1, 0, 2) - a.permute(1, 0, 2))


# -- in-place ops, fill, clone -----------------------------------------------------------------
@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_in_place_ops_write_the_buffer(row):
    (a, da), (b, db) = make(row, 4), make(row, 5)
    ptr, layout = da.untyped_storage().data_ptr(), da.device_tensor_layout()
    da.add_(db, alpha=2).mul_(0.5).relu_().clamp_(max=0.75)
    a.add_(b, alpha=2).mul_(0.5).relu_().clamp_(max=0.75)
    check(da, a)
    assert da.untyped_storage().data_ptr() == ptr and da.device_tensor_layout() == layout


def test_in_place_ops_on_views_leave_the_rest_alone():
    a, b = torch.randn(20, 100), torch.randn(100)
    da, db = a.to("spyre"), b.to("spyre")
    da[3:9, 10:70].add_(db[10:70])
    da[:, 5].mul_(-1)
    a[3:9, 10:70].add_(b[10:70])
    a[:, 5].mul_(-1)
    check(da, a)


def test_in_place_result_type_is_checked_like_on_cpu():
    ints = torch.ones(4, 8, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints.clone().add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        ints.to("spyre").add_(1.5)


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_fill_and_zero(row):
    x, y = make(row, 6)
    y.fill_(2.5)
    check(y, torch.full_like(x, 2.5))
    y.zero_()
    check(y, torch.zeros_like(x))


def test_fill_of_a_view():
    x = torch.randn(10, 70)
    y = x.to("spyre")
    y[2:5, 3:40].fill_(7)
    y[:, 60:].zero_()
    x[2:5, 3:40].fill_(7)
    x[:, 60:].zero_()
    check(y, x)


@pytest.mark.parametrize("row", LAYOUTS, ids=LAYOUT_IDS)
def test_clone_copies_the_buffer(row):
    x, y = make(row, 7)
    torch_layouts.reset_stats()
    z = y.clone()
    assert torch_layouts.stats()["kernel_calls"] == {"aten::clone": 1}
    check(z, x)
    assert z.device_tensor_layout() == y.device_tensor_layout() and z.stride() == y.stride()
    assert torch.equal(torch_layouts.device_memory(z), torch_layouts.device_memory(y))
    assert z.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()


def test_clone_of_views():
    x = torch.randn(40, 100)
    y = x.to("spyre")
    check(y[5:30, 7:90].clone(), x[5:30, 7:90].clone())
    z = y.t().contiguous()
    check(z, x.t().contiguous())
    assert z.is_contiguous()


# Views of a whole buffer whose contiguous clone has no layout of the same device dims: the
# clone takes the Spyre dim_order that nests its buffer as the source's (one sweep of it).
PERMUTED_VIEWS = [
    # MultiheadAttention's packed projection: (tokens, batch, 3 * E) -> (3, tokens, batch, E)
    ("in-proj", (8, 128, 96), lambda t: t.transpose(1, 0), lambda p: p.unflatten(-1, (3, 32)).unsqueeze(0)
     .transpose(0, -2).squeeze(-2)),
    ("split-last", (16, 128), None, lambda p: p.unflatten(-1, (2, 64)).permute(1, 0, 2)),
    ("batch-first", (4, 6, 64), lambda t: t.transpose(0, 1), lambda p: p.unflatten(-1, (2, 32)).transpose(0, 2)),
]


@pytest.mark.parametrize("_, shape, arrange, view_of", PERMUTED_VIEWS, ids=[v[0] for v in PERMUTED_VIEWS])
def test_contiguous_clone_keeps_the_buffer_order(_, shape, arrange, view_of):
    x = torch.randn(shape)
    w = torch.randn(shape[-1], shape[-1])
    source = torch.nn.functional.linear(arrange(x) if arrange else x, w)  # a product in its own layout
    host = torch.nn.functional.linear(arrange(x.to("spyre")) if arrange else x.to("spyre"), w.to("spyre"))
    v, hv = view_of(host), view_of(source)
    torch_layouts.reset_stats()
    z = v.contiguous()
    assert z.is_contiguous() and torch_layouts.stats()["restickify_count"] == 0
    torch.testing.assert_close(z.cpu(), hv.contiguous(), rtol=1e-5, atol=1e-5)
    assert torch.equal(torch_layouts.device_memory(z), torch_layouts.device_memory(host))  # one sweep
    torch.testing.assert_close((z * 2).cpu(), hv.contiguous() * 2, rtol=1e-5, atol=1e-5)


# Views of part of a buffer whose elements run along a dim other than their last (the base's
# stick dim moved by a transpose): the result keeps the stick on that dim, as the CPU's result
# keeps its input's strides, and nothing is restickified.
TRANSPOSED_PARTS = [
    # attention's k.transpose(-2, -1) of the packed projection (tokens, batch, 3 * E) viewed as heads
    ("packed-k-transposed", (16, 4, 192), lambda t: t[..., 64:128].unflatten(-1, (2, 32)).permute(1, 2, 3, 0)),
    ("slice-transposed", (3, 40, 70), lambda t: t[1].t()),
    ("batch-slice-transposed", (5, 24, 64), lambda t: t[1:4].transpose(1, 2)),
]


@pytest.mark.parametrize("_, shape, view_of", TRANSPOSED_PARTS, ids=[v[0] for v in TRANSPOSED_PARTS])
@pytest.mark.parametrize("op", ["mul-scalar", "neg", "add-self"])
def test_transposed_parts_compute_with_their_stick(_, shape, view_of, op):
    fn = {"mul-scalar": lambda t: t * 0.35, "neg": torch.neg, "add-self": lambda t: t + t}[op]
    x = torch.randn(shape)
    v, hv = view_of(x.to("spyre")), view_of(x)
    inner = hv.stride().index(1)
    assert inner != hv.dim() - 1  # the view's elements run along another dim than its last
    torch_layouts.reset_stats()
    out = fn(v)
    check(out, fn(hv), exact=True)
    assert torch_layouts.stats()["restickify_count"] == 0
    assert out.device_tensor_layout().dim_order[-1] == inner, "the result keeps its input's stick dim"


@st.composite
def transposed_parts(draw: st.DrawFn) -> tuple[tuple[int, ...], torch.dtype, int, list[int]]:
    """A 2-4-dim base shape, a dtype, where dim 0 is sliced (a part of the buffer), and a
    permutation of the slice's dims that moves its last (contiguous) dim elsewhere."""
    rank = draw(st.integers(2, 4))
    shape = tuple(draw(st.sampled_from([3, 5, 8, 17, 32, 40, 64])) for _ in range(rank))
    start = draw(st.integers(0, shape[0] - 1))
    perm = draw(st.permutations(range(rank)))
    assume(perm[-1] != rank - 1)
    return shape, draw(st.sampled_from([F32, F16])), start, list(perm)


@given(case=transposed_parts(), op=st.sampled_from(["mul-scalar", "neg", "add-self"]))
@settings(max_examples=40)
def test_transposed_parts_match_the_cpu_bit_for_bit(case, op):
    """Pointwise ops on any transposed part of a buffer: the CPU's values, bit for bit, and the
    result keeps its input's stick dim where it computes in place."""
    shape, dtype, start, perm = case
    fn = {"mul-scalar": lambda t: t * 0.35, "neg": torch.neg, "add-self": lambda t: t + t}[op]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + start)).to(dtype)
    view = lambda t: t[start:].permute(perm)  # noqa: E731
    out, ref = fn(view(x.to("spyre"))), fn(view(x))
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert torch.equal(out.cpu().view(torch.int16 if dtype == F16 else torch.int32),
                       ref.contiguous().view(torch.int16 if dtype == F16 else torch.int32))
    assert padding_holds_pad_value(out)


def test_empty_and_zero_dim_tensors():
    x = torch.randn(0, 70)
    out = x.to("spyre") + 1
    assert out.shape == (0, 70) and out.device.type == "spyre"
    a, b = torch.tensor(1.5), torch.tensor(-2.0)
    check(a.to("spyre") * b.to("spyre"), a * b)
    check(torch.exp(a.to("spyre")), torch.exp(a), exact=False)


def test_mixed_devices_are_rejected():
    with pytest.raises(RuntimeError, match="same device"):
        torch.randn(3, 4).to("spyre") + torch.randn(3, 4)


# -- properties ------------------------------------------------------------------------------------
@st.composite
def spyre_operands(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 70)) for _ in range(rank))
    order = list(draw(st.permutations(range(rank))))
    if draw(st.booleans()):
        order.append(-1)
    dtype = draw(st.sampled_from([F16, F32]))
    pad = draw(st.sampled_from([0, -3.0]))
    broadcast = draw(st.sampled_from([None] + list(range(rank))))
    return shape, dtype, order, pad, broadcast


@settings(max_examples=15, deadline=None)
@given(spyre_operands(), st.sampled_from(["add", "mul", "div"]), st.integers(0, 2**16))
def test_binary_property(case, op, seed):
    """Any Spyre layout (dim_order, sparse, padded, pad value), any broadcast of one dim."""
    shape, dtype, order, pad, broadcast = case
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(shape, generator=gen).to(dtype)
    other = tuple(1 if d == broadcast else n for d, n in enumerate(shape))
    b = torch.randn(other, generator=gen).to(dtype)
    layout = SpyreTensorLayout(shape, dtype, order, pad_value=pad)
    da, db = a.to("spyre", device_layout=layout), b.to("spyre")
    out = getattr(torch, op)(da, db)
    check(out, getattr(torch, op)(a, b))
    assert out.device_tensor_layout() == layout
    assert math.prod(out.shape) == math.prod(shape)


@st.composite
def views_of_layouts(draw):
    """A random Spyre layout (dim_order, sparse, padded sticks) and a random view of it:
    slices with steps, a permutation, maybe a dim indexed away."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 80)) for _ in range(rank))
    order = list(draw(st.permutations(range(rank))))
    if draw(st.booleans()):
        order.append(-1)
    index = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start + 1, n))
        index.append(slice(start, stop, draw(st.sampled_from([1, 1, 2]))))
    perm = draw(st.permutations(range(rank)))
    squeeze = draw(st.booleans()) and rank > 1
    return shape, draw(st.sampled_from([F16, F32])), order, tuple(index), perm, squeeze


@settings(max_examples=20, deadline=None)
@given(views_of_layouts(), st.integers(0, 2**16))
def test_views_property(case, seed):
    """Whatever view of whatever layout: pointwise results and reductions match the CPU."""
    shape, dtype, order, index, perm, squeeze = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    y = x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, order))

    def view(t):
        t = t[index].permute(*perm)
        return t[0] if squeeze else t

    check(view(y) * 2 + view(y), view(x) * 2 + view(x))
    check(torch.relu(view(y)).clone(), torch.relu(view(x)))
    if view(x).dim():
        torch.testing.assert_close(view(y).amax(-1).cpu(), view(x).amax(-1))


@settings(max_examples=20, deadline=None)
@given(views_of_layouts(), st.floats(-1e4, 1e4, width=16), st.integers(0, 2**16))
@example(((3, 20, 150), F32, [0, 1, 2], (slice(0, 3, 1), slice(2, 19, 2), slice(5, 150, 1)), (2, 0, 1), False),
         2.5, 0)  # a padded stick: two real boxes per tile row
@example(((16, 70), F16, [0, 1, -1], (slice(0, 16, 1), slice(60, 70, 1)), (1, 0), False), -1.0, 1)  # sparse
def test_fill_property(case, value, seed):
    """fill_ and zero_ on a whole tensor of any layout (twice: the second call replays its kept
    plan) and on any view of it write what they write on the CPU, bit for bit, and leave the
    padding and the rest of the buffer alone."""
    shape, dtype, order, index, perm, squeeze = case
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    y = x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, order, pad_value=-3.0))
    for v in (value, -value):
        y.fill_(v)
        x.fill_(v)
        check(y, x)

    def view(t):
        t = t[index].permute(*perm)
        return t[0] if squeeze else t

    x.copy_(torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype))
    y.copy_(x)
    for _ in range(2):
        view(y).fill_(value)
        view(x).fill_(value)
        check(y, x)
        view(y).zero_()
        view(x).zero_()
        check(y, x)


def test_layouts_with_many_real_boxes_are_computed_whole(monkeypatch):
    """Past ``MAX_PIECES`` real boxes kernels write whole buffers and restore the padding."""
    from torch_layouts.ops import operands

    monkeypatch.setattr(operands, "MAX_PIECES", 1)
    operands.real_slices.cache_clear()
    try:
        x = torch.randn(3, 20, 150)  # the padded stick: two boxes
        y = x.to("spyre")
        check(torch.exp(y), torch.exp(x), exact=False)
        check(y.clone().fill_(3), torch.full_like(x, 3))
        check(y.sum(-1), x.sum(-1), exact=False)
        check(y[0] @ y[1].t(), x[0] @ x[1].t(), exact=False)
    finally:
        operands.real_slices.cache_clear()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=2, max_size=4), st.sampled_from([torch.float16, torch.float32]),
       st.data())
def test_contiguous_clone_of_permuted_buffers_property(shape, dtype, data):
    """A whole buffer in any Spyre dim_order, split and permuted as a view: its contiguous copy
    (a kept clone plan the second time) holds the CPU's elements bit for bit, its padding the pad
    value, and the buffer it read is untouched."""
    shape[-1] *= 8  # the last dim splits in two
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), dtype, order)
    perm = data.draw(st.permutations(range(len(shape) + 1)))
    for seed in (0, 1):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
        d = x.to("spyre", device_layout=layout)
        view_of = lambda t: t.unflatten(-1, (2, shape[-1] // 2)).permute(*perm)  # noqa: E731
        z = view_of(d).contiguous()
        want = view_of(x).contiguous()
        assert z.is_contiguous() and z.shape == want.shape
        assert torch.equal(z.cpu().view(torch.int16 if dtype == torch.float16 else torch.int32),
                           want.view(torch.int16 if dtype == torch.float16 else torch.int32))
        assert padding_holds_pad_value(z)
        assert torch.equal(d.cpu(), x)


# Pointwise ops that computed on the CPU fallback before, now device kernels on their CPU out=
# overloads (elementwise.UNARY, BINARY_OUT, PARAMETRIZED and their backward): id, function of
# (a, b, mask) on either device.
FN = torch.nn.functional
NEWLY_ON_DEVICE = [
    ("remainder-number", lambda a, b, m: a % 2),
    ("remainder-tensor", lambda a, b, m: torch.remainder(a, b)),
    ("fmod", lambda a, b, m: a.fmod(b)),
    ("floor_divide", lambda a, b, m: a // 2),
    ("atan2", lambda a, b, m: torch.atan2(a, b)),
    ("hypot", lambda a, b, m: torch.hypot(a, b)),
    ("copysign-number", lambda a, b, m: torch.copysign(a, -1.0)),
    ("logical_and", lambda a, b, m: torch.logical_and(m, b > 0)),
    ("logical_not", lambda a, b, m: m.logical_not()),
    ("bitwise_or-bool", lambda a, b, m: m | (b > 0)),
    ("bitwise_xor-int", lambda a, b, m: (a * 10).int() ^ 5),
    ("round", lambda a, b, m: (a * 10).round()),
    ("nan_to_num", lambda a, b, m: (a / m).nan_to_num(0.5, 9.0, -9.0)),
    ("leaky_relu", lambda a, b, m: FN.leaky_relu(a, 0.2)),
    ("elu-in-place", lambda a, b, m: FN.elu(a.clone(), 0.5, inplace=True)),
    ("softplus", lambda a, b, m: FN.softplus(a, beta=2, threshold=5)),
    ("hardtanh", lambda a, b, m: FN.hardtanh(a, -0.5, 0.5)),
    ("hardswish", lambda a, b, m: FN.hardswish(a)),
    ("log2", lambda a, b, m: a.abs().log2()),
    ("erfinv", lambda a, b, m: (a * 0.1).erfinv()),
    ("remainder_-in-place", lambda a, b, m: a.clone().remainder_(3)),
]


@pytest.mark.parametrize("shape", [(16, 128), (4, 70)], ids=["whole-sticks", "padded"])
@pytest.mark.parametrize("dtype", [F32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("_, fn", NEWLY_ON_DEVICE, ids=[c[0] for c in NEWLY_ON_DEVICE])
def test_pointwise_ops_once_on_the_fallback_run_on_the_device(_, fn, dtype, shape):
    """The CPU's values (bit for bit on whole sticks; the CPU's scalar tail may round a last bit
    of a transcendental differently elsewhere), the pad value in the padding, no CPU fallback."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)
    m = a > 0
    torch_layouts.reset_stats()
    for _ in range(2):
        got = fn(a.to("spyre"), b.to("spyre"), m.to("spyre"))
    expected = fn(a, b, m)
    assert got.dtype == expected.dtype and padding_holds_pad_value(got)
    if shape == (16, 128):
        assert torch.equal(got.cpu(), expected)
    else:
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5 if dtype == F32 else 1e-2, atol=0, equal_nan=True)
    assert torch_layouts.stats()["fallbacks"] == {}


# Their backward: id, the activation.
ACTIVATIONS = [
    ("leaky_relu", lambda x: FN.leaky_relu(x, 0.2)), ("elu", FN.elu), ("selu", FN.selu), ("softplus", FN.softplus),
    ("hardtanh", FN.hardtanh), ("hardswish", FN.hardswish), ("hardsigmoid", FN.hardsigmoid),
    ("logit", lambda x: x.sigmoid().logit(1e-4)),
]


@pytest.mark.parametrize("_, fn", ACTIVATIONS, ids=[c[0] for c in ACTIVATIONS])
def test_activation_backward_runs_on_the_device(_, fn):
    x = torch.randn(4, 70, generator=torch.Generator().manual_seed(1))
    dx, cx = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
    torch_layouts.reset_stats()
    fn(dx).sum().backward()
    fn(cx).sum().backward()
    torch.testing.assert_close(dx.grad.cpu(), cx.grad)
    assert torch_layouts.stats()["fallbacks"] == {}
