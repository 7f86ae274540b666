"""Matmul on device memory (mm, bmm, addmm, matmul, linear) against the CPU, with the
Spyre's documented rule: A sticked on k, B and C sticked on n, B's k padded to whole sticks of zeros."""

from __future__ import annotations

import functools

import pytest
import torch

import torch_layouts
from ops_support import matches_cpu, padding_holds_pad_value
from torch_layouts import DataFormats, LayoutError, SpyreTensorLayout
from torch_layouts.ops import matmul
from torch_layouts.ops.matmul import rhs_layout

F16, F32 = torch.float16, torch.float32
close = functools.partial(matches_cpu, f16=(2e-2, 1e-2), other=(1e-4, 1e-4))


GEMM_PATHS = ["tile-gemm", "blas-on-tiles", "blas-packed"] if matmul.TILE_GEMM else ["blas-on-tiles", "blas-packed"]


@pytest.fixture(autouse=True, params=GEMM_PATHS)
def gemm_path(request, monkeypatch):
    """Every test runs on every GEMM path: the C++ tile GEMM (float32, AVX2 hosts) and, for
    BLAS, B and C read in place as tiles or packed."""
    if request.param != "tile-gemm":
        monkeypatch.setattr(matmul, "TILE_GEMM", False)
    if request.param == "blas-packed":
        monkeypatch.setattr(matmul, "TILE_GEMM_BYTES", 0)
    elif request.param == "blas-on-tiles":
        monkeypatch.setattr(matmul, "TILE_GEMM_TILES", 1 << 20)


def restickifies() -> int:
    return torch_layouts.stats()["restickify_count"]


# One row per case: id, A shape, B shape, dtype, restickifies expected with default layouts.
MM = [
    ("issue", (512, 256), (256, 100), F16, 0),
    ("k-whole-sticks", (64, 128), (128, 96), F32, 0),
    ("k-padded", (30, 100), (100, 70), F32, 1),
    ("small-odd", (7, 65), (65, 3), F16, 1),
    ("vector-like", (1, 64), (64, 1), F32, 0),
]


@pytest.mark.parametrize("_, ashape, bshape, dtype, expected", MM, ids=[m[0] for m in MM])
def test_mm(_, ashape, bshape, dtype, expected):
    a, b = torch.randn(ashape).to(dtype), torch.randn(bshape).to(dtype)
    da, db = a.to("spyre"), b.to("spyre")
    torch_layouts.reset_stats()
    out = da @ db
    assert restickifies() == expected and torch_layouts.stats()["fallbacks"] == {}
    close(out, a @ b)
    assert out.device_tensor_layout() == SpyreTensorLayout(out.shape, dtype)  # sticked on n


def test_rhs_layout_pads_k_with_zeros():
    b = torch.randn(100, 70)
    layout = rhs_layout((100, 70), F32)
    assert list(layout.device_size) == [3, 128, 32] and list(layout.stride_map) == [32, 70, 1]
    assert rhs_layout((128, 70), F32) == SpyreTensorLayout((128, 70), F32)
    db = torch_layouts.restickify(b.to("spyre"), layout)
    memory = torch_layouts.device_memory(db).view(3, 128, 32)
    assert bool((memory[:, 100:, :] == 0).all())
    a = torch.randn(30, 100)
    torch_layouts.reset_stats()
    close(a.to("spyre") @ db, a @ b)
    assert restickifies() == 0


BMM = [
    ("k-padded", (4, 30, 100), (4, 100, 70), F32),
    ("f16", (2, 64, 64), (2, 64, 32), F16),
]


@pytest.mark.parametrize("_, ashape, bshape, dtype", BMM, ids=[m[0] for m in BMM])
def test_bmm(_, ashape, bshape, dtype):
    a, b = torch.randn(ashape).to(dtype), torch.randn(bshape).to(dtype)
    out = torch.bmm(a.to("spyre"), b.to("spyre"))
    close(out, torch.bmm(a, b))
    assert out.device_tensor_layout() == SpyreTensorLayout(out.shape, dtype)


def test_matmul_broadcasts_and_vectors():
    a, b, v = torch.randn(2, 3, 30, 40), torch.randn(40, 20), torch.randn(40)
    da, db, dv = a.to("spyre"), b.to("spyre"), v.to("spyre")
    torch_layouts.reset_stats()
    close(da @ db, a @ b)
    close(da @ dv, a @ v)
    close(torch.matmul(dv, db), v @ b)
    assert torch_layouts.stats()["fallbacks"] == {}


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (0, 1)])
@pytest.mark.parametrize("bias_shape", [(70,), (30, 70), (30, 1)])
def test_addmm(beta, alpha, bias_shape):
    bias, a, b = torch.randn(bias_shape), torch.randn(30, 100), torch.randn(100, 70)
    if beta == 0:
        bias = torch.full(bias_shape, float("nan"))  # ignored, as on the CPU
    out = torch.addmm(bias.to("spyre"), a.to("spyre"), b.to("spyre"), beta=beta, alpha=alpha)
    close(out, torch.addmm(bias, a, b, beta=beta, alpha=alpha))


def test_linear():
    x, w, bias = torch.randn(2, 10, 64), torch.randn(96, 64), torch.randn(96)
    dx, dw, dbias = x.to("spyre"), w.to("spyre"), bias.to("spyre")
    torch_layouts.reset_stats()
    close(torch.nn.functional.linear(dx, dw, dbias), torch.nn.functional.linear(x, w, bias))
    close(torch.nn.functional.linear(dx[0], dw), torch.nn.functional.linear(x[0], w))
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {}
    assert stats["restickify_count"] == 2  # weight.t() is sticked on k: restickified per call


def test_weight_sticked_on_n_needs_no_restickify():
    """A weight kept in dim_order [1, 0] makes ``weight.t()`` sticked on n."""
    x, w = torch.randn(2, 10, 64), torch.randn(96, 64)
    dw = w.to("spyre", device_layout=SpyreTensorLayout((96, 64), F32, [1, 0]))
    dx = x.to("spyre")
    torch_layouts.reset_stats()
    with torch_layouts.strict_layouts():
        out = torch.nn.functional.linear(dx, dw)
    close(out, torch.nn.functional.linear(x, w))
    assert restickifies() == 0


def test_flattened_3d_input_is_read_in_place():
    x, w = torch.randn(3, 20, 64), torch.randn(64, 32)
    dx, dw = x.to("spyre"), w.to("spyre")
    torch_layouts.reset_stats()
    close(dx.reshape(60, 64) @ dw, x.reshape(60, 64) @ w)
    assert restickifies() == 0



@pytest.mark.parametrize("heads", [1, 4])
def test_bmm_of_views_whose_batch_dim_is_split(heads):
    """Attention's bmm: q and k.t() are (batch * heads, ...) views of (batch, heads, ...) buffers,
    so the views' batch dims are two buffer dims (a, b: 2 x heads; the product: 2 * heads)."""
    q, k = torch.randn(2, heads, 24, 32), torch.randn(2, 24, heads, 32)
    dq, dk = q.to("spyre"), k.to("spyre").transpose(1, 2)
    a, b = dq.reshape(2 * heads, 24, 32), dk.reshape(2 * heads, 24, 32).transpose(1, 2)
    ha, hb = q.reshape(2 * heads, 24, 32), k.transpose(1, 2).reshape(2 * heads, 24, 32).transpose(1, 2)
    out = torch.bmm(a, b)
    assert out.shape == (2 * heads, 24, 24)
    close(out, torch.bmm(ha, hb))
    close(torch.bmm(out, a), torch.bmm(torch.bmm(ha, hb), ha))

# Operands the rule restickifies and no plan reads in the GEMM's coordinates: attention's heads of
# a packed projection (a stick holds two heads), k padded to whole sticks. id, the packed
# projection's shape, q's and k's views of it. The GEMM packs them where they lie (each counted as
# the restickify it is) and gives the bits it gives on their copies, call after call.
PACKED_IN_PLACE = [
    ("attention-scores", (2, 6, 48), lambda p: p.transpose(0, 1)[..., :16].reshape(6, 4, 8).transpose(0, 1),
     lambda p: p.transpose(0, 1)[..., 16:32].reshape(6, 4, 8).transpose(0, 1).transpose(1, 2)),
    ("attention-values", (2, 6, 48), lambda p: torch.softmax(p[..., :6].reshape(4, 3, 6), -1),
     lambda p: p.transpose(0, 1)[..., 32:].reshape(6, 4, 8).transpose(0, 1)),
]


@pytest.mark.parametrize("_, shape, make_a, make_b", PACKED_IN_PLACE, ids=[c[0] for c in PACKED_IN_PLACE])
def test_restickified_operands_are_packed_where_they_lie(_, shape, make_a, make_b):
    restickified = []
    for seed in range(3):
        p = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        dp = p.to("spyre")
        a, b = make_a(dp), make_b(dp)
        copies = torch.bmm(a.contiguous(), b.contiguous()).cpu()
        torch_layouts.reset_stats()
        out = torch.bmm(a, b)
        restickified.append(restickifies())
        assert torch.equal(out.cpu(), copies)
        close(out, torch.bmm(make_a(p), make_b(p)))
    assert restickified[0] >= 1 and restickified == [restickified[0]] * 3


def test_operands_sticked_on_the_wrong_dim_are_restickified():
    a, b = torch.randn(40, 64), torch.randn(64, 96)
    a_on_m = a.to("spyre", device_layout=SpyreTensorLayout((40, 64), F32, [1, 0]))
    b_on_k = b.to("spyre", device_layout=SpyreTensorLayout((64, 96), F32, [1, 0]))
    torch_layouts.reset_stats()
    close(a_on_m @ b.to("spyre"), a @ b)
    close(a.to("spyre") @ b_on_k, a @ b)
    close(a_on_m.t().t() @ b_on_k.t().contiguous().t(), a @ b)  # views and contiguous copies keep the stick
    assert restickifies() == 4
    torch_layouts.reset_stats()
    close(b_on_k.t() @ a_on_m.t(), b.t() @ a.t())  # transposed, both are sticked right
    assert restickifies() == 0


# One row per case: id, A's shape, B's shape, which operands are transposed views (sticked on their rows).
TRANSPOSED = [
    ("weight-t", (64, 96), (128, 96), (False, True)),
    ("grad-t", (96, 64), (96, 128), (True, False)),
    ("both", (96, 64), (128, 96), (True, True)),
    ("batched", (4, 64, 32), (4, 64, 96), (True, False)),
    ("padded", (40, 70), (96, 70), (False, True)),
    ("batched b-t, ragged panel, k across sticks", (3, 37, 40), (3, 45, 40), (False, True)),
    ("attention q @ k.t()", (8, 128, 64), (8, 128, 64), (False, True)),
]


@pytest.mark.parametrize("_, ashape, bshape, flip", TRANSPOSED, ids=[t[0] for t in TRANSPOSED])
def test_operands_sticked_on_their_rows_are_restickified_once(_, ashape, bshape, flip):
    """``x @ w.t()`` and ``g.t() @ x``: one restickify per transposed operand (the packing copy)."""
    a, b = torch.randn(ashape), torch.randn(bshape)
    da, db = a.to("spyre"), b.to("spyre")
    if flip[0]:
        a, da = a.transpose(-2, -1), da.transpose(-2, -1)
    if flip[1]:
        b, db = b.transpose(-2, -1), db.transpose(-2, -1)
    torch_layouts.reset_stats()
    close(torch.matmul(da, db), torch.matmul(a, b))
    assert restickifies() == sum(flip) and torch_layouts.stats()["fallbacks"] == {}
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError, match="sticked on"):
        torch.matmul(da, db)


def test_strict_mode_names_the_operand_and_the_fix():
    a, w = torch.randn(40, 64), torch.randn(96, 64)
    da, dw = a.to("spyre"), w.to("spyre")
    with torch_layouts.strict_layouts():
        with pytest.raises(LayoutError) as info:
            da @ dw.t()
        message = str(info.value)
        assert message.startswith("mm needs mat2 sticked on n")
        assert "self: SpyreTensorLayout(device_size=[2, 40, 32]" in message
        assert "mat2: SpyreTensorLayout(device_size=[2, 96, 32]" in message and "sticked on dim 0" in message
        assert "torch_layouts.restickify(mat2, SpyreTensorLayout(device_size=[3, 64, 32]" in message
        a_on_m = a.to("spyre", device_layout=SpyreTensorLayout((40, 64), F32, [1, 0]))
        with pytest.raises(LayoutError, match="mm needs mat1 sticked on k"):
            a_on_m @ dw.t().contiguous()
        with pytest.raises(LayoutError, match="addmm needs mat2 sticked on n"):
            torch.nn.functional.linear(da, dw, dw[:, 0].contiguous())


def test_k_padding_needs_b_in_the_padded_layout():
    a, b = torch.randn(30, 100), torch.randn(100, 70)
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError, match="k padded to whole sticks"):
        a.to("spyre") @ b.to("spyre")
    explicit = SpyreTensorLayout([3, 128, 32], [32, 70, 1], DataFormats.IEEE_FP32)
    with torch_layouts.strict_layouts():
        close(a.to("spyre") @ b.to("spyre", device_layout=explicit), a @ b)
    nonzero = SpyreTensorLayout([3, 128, 32], [32, 70, 1], DataFormats.IEEE_FP32, pad_value=5.0)
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError, match="zeros"):
        a.to("spyre") @ b.to("spyre", device_layout=nonzero)
    torch_layouts.reset_stats()
    close(a.to("spyre") @ b.to("spyre", device_layout=nonzero), a @ b)  # restickified into zero padding
    assert restickifies() == 1


def test_empty_operands():
    for ashape, bshape in (((5, 0), (0, 10)), ((0, 4), (4, 3)), ((2, 3, 0), (2, 0, 4))):
        a, b = torch.randn(ashape), torch.randn(bshape)
        out = a.to("spyre") @ b.to("spyre")
        close(out, a @ b)


BIASES = [("row", (96,), 1.0, 1.0), ("row-scaled", (96,), 0.5, 2.0), ("beta-0", (96,), 0.0, 1.5),
          ("matrix", (40, 96), 1.0, 1.0), ("column", (40, 1), 0.5, 1.0)]


@pytest.mark.parametrize("_, shape, beta, alpha", BIASES, ids=[b[0] for b in BIASES])
def test_repeated_addmm_replays_with_fresh_bias(_, shape, beta, alpha):
    """addmm calls of one geometry (the bias added by the GEMM, written first, or added after)
    read each call's own operands and bias."""
    w = torch.randn(64, 96)
    dw = w.to("spyre")
    for step in range(3):
        x, bias = torch.randn(40, 64) + step, torch.randn(shape) - step
        got = torch.addmm(bias.to("spyre"), x.to("spyre"), dw, beta=beta, alpha=alpha)
        close(got, torch.addmm(bias, x, w, beta=beta, alpha=alpha))
        assert padding_holds_pad_value(got)


def test_dtype_mismatch_is_rejected_like_on_cpu():
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.randn(4, 64).to("spyre") @ torch.randn(64, 8).half().to("spyre")


def test_repeated_calls_replay_their_plan_with_fresh_data_and_counts():
    """A second call of one geometry (a kept plan on the tile GEMM) reads the operands' current
    data and counts the rule's restickify again; strict mode still raises on it."""
    w = torch.randn(96, 64)
    dw = w.to("spyre")
    for step in range(3):
        x = torch.randn(40, 64) + step
        torch_layouts.reset_stats()
        close(torch.nn.functional.linear(x.to("spyre"), dw), torch.nn.functional.linear(x, w))
        assert restickifies() == 1  # weight.t() is sticked on k
        dw.mul_(2)
        w = w * 2
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError, match="sticked on"):
        torch.nn.functional.linear(x.to("spyre"), dw)
