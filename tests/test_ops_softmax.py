"""Softmax, log-softmax and layer norm on device memory against the CPU: values, the
input's layout kept, padding that never leaks in (all-negative rows, padded sticks) and
the pad value in the result's padding."""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

import torch_layouts
from ops_support import matches_cpu
from torch_layouts import SpyreTensorLayout, _C, htp
from torch_layouts.ops.reductions import placement, readable, write_placed, write_result
from torch_layouts.ops.rows import PLANS, rows

F16, F32 = torch.float16, torch.float32
close = functools.partial(matches_cpu, f16=(2e-3, 2e-3), other=(1e-5, 1e-5))


# One row per case: id, shape, dtype, device layout (None: default), dim.
CASES = [
    ("stick", (8, 256), F16, None, -1),
    ("padded-stick", (3, 20, 150), F32, None, -1),
    ("rows", (3, 20, 150), F32, None, 1),
    ("dim-order", (40, 70), F16, SpyreTensorLayout((40, 70), F16, [1, 0]), -1),
    ("sparse", (16, 70), F32, SpyreTensorLayout((16, 70), F32, [0, 1, -1]), -1),
    ("pad-value", (6, 40), F32, SpyreTensorLayout((6, 40), F32, pad_value=7.0), -1),
    ("htp", (1, 4, 8, 40), F16, htp.R4CroutonLayout, -1),
    ("short-stick", (4, 6, 6), F32, None, -1),
    ("short-stick-pad-value", (6, 10), F32, SpyreTensorLayout((6, 10), F32, pad_value=7.0), -1),
    ("short-stick-rows", (6, 20), F16, None, 0),
    ("short-stick-dim-order", (32, 10), F32, SpyreTensorLayout((32, 10), F32, [1, 0]), -1),
    ("one-element-rows", (3, 1), F32, None, -1),  # padded, the reduced dim has no device dim
    ("1000-classes", (4, 1000), F32, None, -1),  # rows ending within their last stick
    ("1000-classes-f16", (2, 3, 1000), F16, None, -1),
    ("1000-classes-pad-value", (3, 1000), F32, SpyreTensorLayout((3, 1000), F32, pad_value=7.0), -1),
]


@pytest.mark.parametrize("_, shape, dtype, spec, dim", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax(fn, _, shape, dtype, spec, dim):
    x = (-torch.rand(shape) * 8 - 4).to(dtype)  # all negative: zero padding must not join the max
    y = x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)
    torch_layouts.reset_stats()
    out = fn(y, dim)
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {} and stats["restickify_count"] == 0
    close(out, fn(x, dim))
    assert out.device_tensor_layout() == y.device_tensor_layout()


# Buffers whose real positions are one box read as rows (the padding sliced away), and so do
# those whose rows' real elements come first in each row of one box of rows (a padded stick: the
# kernels stop within the last run); the others do not. id, shape, dtype, device layout (None:
# default), reduced dims, how they read as rows ("box", "tail" or None).
ROW_BOXES = [
    ("whole-sticks", (3, 24, 64), F32, None, (2,), "box"),
    ("short-stick", (4, 6, 6), F32, None, (2,), "box"),
    ("short-stick-other-dim", (6, 20), F16, None, (0,), "box"),
    ("short-batch-in-stick", (32, 10), F32, SpyreTensorLayout((32, 10), F32, [1, 0]), (1,), "box"),
    ("partial-last-stick", (6, 40), F32, None, (1,), "tail"),
    ("1000-classes", (5, 1000), F32, None, (1,), "tail"),
    ("1000-classes-f16", (3, 2, 1000), F16, None, (2,), "tail"),
    ("two-dims-padded-first", (2, 50, 64), F32, SpyreTensorLayout((2, 50, 64), F32, [0, 2, 1]), (1, 2), "tail"),
    ("padded-stick-reduced-across", (8, 1000), F32, None, (0,), None),
    ("padded-stick-inside-row", (3, 4, 40), F32, None, (1, 2), None),
    ("two-partial-dims", (3, 40, 70), F32, SpyreTensorLayout((3, 40, 70), F32, [0, 2, 1]), (2,), None),
    ("reduced-dim-of-size-1", (1, 1), F32, None, (1,), None),
]


@pytest.mark.parametrize("_, shape, dtype, spec, dims, expected", ROW_BOXES, ids=[c[0] for c in ROW_BOXES])
def test_rows_read_real_positions_only(_, shape, dtype, spec, dims, expected):
    """A padded buffer reads as rows exactly when its real positions are one box, or one box of
    rows whose real elements come first; its rows' real elements are then the tensor's rows along
    ``dims`` (in host order within a row), and what follows them in a row is padding."""
    x = torch.randn(shape).to(dtype)
    y = x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)
    _, coords, v, _, _ = readable(y, dims)
    shape_rows = rows(coords, dims, padded=True)
    got_kind = None if shape_rows is None else "tail" if shape_rows.tail is not None else "box"
    assert got_kind == expected
    assert rows(coords, dims) is None or shape_rows.box is None  # padding only when asked for
    if shape_rows is not None:
        others = [d for d in range(len(shape)) if d not in dims]
        length = shape_rows.length(coords)
        full = math.prod(shape_rows.shape(coords)[len(shape_rows.order) - shape_rows.width:])
        assert shape_rows.real == (-1 if expected == "box" else length) and (length < full) == (expected == "tail")
        row_view = shape_rows.view(v).reshape(-1, full)
        got = row_view[:, :length].float().tolist()
        want = x.permute(*others, *dims).reshape(-1, length).float().tolist()
        assert sorted(got) == sorted(want)
        assert (row_view[:, length:] == 0).all()  # the default pad value: padding, not data


def test_softmax_of_views_and_half_to_float():
    x = torch.randn(4, 30, 100)
    y = x.to("spyre")
    close(torch.softmax(y[:, 3:20, 5:90], -1), torch.softmax(x[:, 3:20, 5:90], -1))
    close(torch.softmax(y.transpose(1, 2), -1), torch.softmax(x.transpose(1, 2), -1))
    h = x.half()
    out = torch.softmax(h.to("spyre"), -1, dtype=F32)
    close(out, torch.softmax(h.float(), -1))


LAYER_NORM = [
    ("f32", (2, 10, 96), F32, (96,), True),
    ("f16", (4, 64), F16, (64,), True),
    ("padded", (3, 150), F32, (150,), False),
    ("padded-affine", (4, 100), F32, (100,), True),
    ("padded-f16", (3, 1000), F16, (1000,), True),
    ("two-dims", (2, 6, 40), F32, (6, 40), True),
]


@pytest.mark.parametrize("_, shape, dtype, normalized, affine", LAYER_NORM, ids=[c[0] for c in LAYER_NORM])
def test_layer_norm(_, shape, dtype, normalized, affine):
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    ln = torch.nn.LayerNorm(normalized, elementwise_affine=affine, dtype=dtype)
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
    ref, mean, rstd = torch.ops.aten.native_layer_norm(x, list(normalized), ln.weight, ln.bias, 1e-5)
    dev = ln.to("spyre")
    torch_layouts.reset_stats()
    out, dmean, drstd = torch.ops.aten.native_layer_norm(x.to("spyre"), list(normalized), dev.weight, dev.bias, 1e-5)
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {} and stats["restickify_count"] == 0
    close(out, ref)
    close(dmean, mean)
    close(drstd, rstd)
    assert out.device_tensor_layout() == SpyreTensorLayout(shape, dtype)
    order = list(range(len(shape))) + [-1]  # the stick dim is normalised: sparse statistics
    assert dmean.device_tensor_layout() == SpyreTensorLayout(mean.shape, dtype, order)
    close(dev(x.to("spyre")), ln.cpu()(x))


# Geometries that share a shape but not their reads: each must get its own replayed plan.
REPLAYS = [
    ("default", lambda x: x.to("spyre")),
    ("dim-order", lambda x: x.to("spyre", device_layout=SpyreTensorLayout(tuple(x.shape), x.dtype, [0, 2, 1]))),
    ("slice", lambda x: torch.cat([torch.zeros(3, 5, x.shape[-1]), x], 1).to("spyre")[:, 5:]),
    ("transpose", lambda x: x.transpose(1, 2).contiguous().to("spyre").transpose(1, 2)),
]


@pytest.mark.parametrize("width", [64, 100], ids=["whole-sticks", "padded-stick"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_replayed_plans_match_the_cpu(log, width):
    """The second call of a geometry replays the first one's plan: the same values as the
    CPU (forward and backward), the input's layout, no restickify, whatever geometry ran before."""
    fn = torch.log_softmax if log else torch.softmax
    PLANS.clear()
    sizes = []
    for _ in range(2):
        for name, make in REPLAYS:
            x = torch.randn(3, 24, width)  # whole sticks, or rows ending within their last stick
            y = make(x).requires_grad_()
            g = torch.randn(3, 24, width)
            torch_layouts.reset_stats()
            out = fn(y, -1)
            assert torch_layouts.stats()["restickify_count"] == 0, name
            close(out, fn(x, -1))
            assert out.device_tensor_layout() == y.device_tensor_layout() or name in ("slice", "transpose"), name
            out.backward(g.to("spyre"))
            ref = x.clone().requires_grad_()
            fn(ref, -1).backward(g)
            close(y.grad, ref.grad)
        sizes.append(len(PLANS))
    assert sizes[0] > 0 and sizes[1] == sizes[0]  # every geometry planned once, then replayed


@pytest.mark.parametrize("width", [64, 100], ids=["whole-sticks", "padded-stick"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_replayed_layer_norm_plans_match_the_cpu(affine, width):
    """Layer norm forward and backward replay their plans too: the same values, statistics and
    gradients (input, weight, bias) as the CPU on the second pass over the geometries."""
    PLANS.clear()
    sizes, restickifies = [], {}
    for _ in range(2):
        for name, make in REPLAYS:
            x = torch.randn(3, 24, width) * 2 + 1
            ln = torch.nn.LayerNorm(width, elementwise_affine=affine)
            if affine:
                with torch.no_grad():
                    ln.weight.normal_()
                    ln.bias.normal_()
            dev = copy.deepcopy(ln).to("spyre")
            y = make(x).requires_grad_()
            g = torch.randn(3, 24, width)
            torch_layouts.reset_stats()
            out = dev(y)
            # the weight and bias of an input sticked on dim 1 restickify (the rules ask it); a replay changes nothing
            assert restickifies.setdefault(name, torch_layouts.stats()["restickify_count"]) == \
                torch_layouts.stats()["restickify_count"] == (2 if affine and name in ("dim-order", "transpose") else 0), name
            ref_x = x.clone().requires_grad_()
            ref = ln(ref_x)
            close(out, ref)
            out.backward(g.to("spyre"))
            ref.backward(g)
            close(y.grad, ref_x.grad)
            if affine:
                close(dev.weight.grad, ln.weight.grad)
                close(dev.bias.grad, ln.bias.grad)
        sizes.append(len(PLANS))
    assert sizes[0] > 0 and sizes[1] == sizes[0]


# Row-kernel geometries whose statistics (per row) and parameter gradients (per column) are
# written by ``reductions.placement``: id, shape, dtype, device layout (None: default), row dims.
PLACEMENTS = [
    ("stick", (3, 24, 64), F32, None, (2,)),
    ("stick-f16", (5, 128), F16, None, (1,)),
    ("stick-bf16", (2, 3, 64), torch.bfloat16, None, (2,)),
    ("two-dims", (2, 6, 64), F32, None, (1, 2)),
    ("dim-order", (3, 24, 64), F16, SpyreTensorLayout((3, 24, 64), F16, [1, 0, 2]), (2,)),
    ("pad-value", (4, 64), F32, SpyreTensorLayout((4, 64), F32, pad_value=7.0), (1,)),
    ("padded-stick", (4, 100), F32, None, (1,)),
    ("1000-classes-f16", (3, 1000), F16, None, (1,)),
    ("padded-stick-pad-value", (4, 40), F32, SpyreTensorLayout((4, 40), F32, pad_value=7.0), (1,)),
]


@pytest.mark.parametrize("_, shape, dtype, spec, dims", PLACEMENTS, ids=[c[0] for c in PLACEMENTS])
@pytest.mark.parametrize("per_row", [True, False], ids=["rows", "columns"])
def test_placed_results_are_write_results_bits(_, shape, dtype, spec, dims, per_row):
    """A row kernel's float32 results written by their kept placement hold the bits, padding and
    layout that ``write_result`` gives the same values (rounded to the result's dtype)."""
    x = torch.empty(shape, dtype=dtype, device="spyre", device_layout=spec)
    _, coords, _, _, _ = readable(x, dims)
    shape_rows = rows(coords, dims, padded=True)
    assert shape_rows is not None and shape_rows.box is None
    others = tuple(d for d in range(len(shape)) if d not in dims)
    reduced, keepdim = (dims, True) if per_row else (others, False)
    place = placement(coords, reduced, keepdim, dtype, shape_rows, per_row)
    assert place is not None
    flat = torch.randn(shape_rows.count(coords) if per_row else shape_rows.length(coords)) * 100
    like = shape_rows.rows_like if per_row else shape_rows.columns_like
    want = write_result(coords, reduced, keepdim, like(flat.to(dtype), coords), x.device)
    got = write_placed(place, flat, x.device)
    assert got.shape == want.shape and got.device_tensor_layout() == want.device_tensor_layout()
    bits = {2: torch.int16, 4: torch.int32}[got.element_size()]
    assert torch.equal(_C._raw_buffer(got).view(bits), _C._raw_buffer(want).view(bits))
