"""``out=`` overloads of the device kernels: the result lands in the user's tensor (its own
layout kept, resized by ATen's rules when it must be), values equal the CPU op's, padding
holds the pad value, and none of it runs through the CPU fallback."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import pytest
import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout

from ops_support import matches_cpu

F16, F32 = torch.float16, torch.float32

# name, op (inputs..., out=), input shapes, input dtype, result shape
CASES: list[tuple[str, Callable[..., torch.Tensor], list[tuple[int, ...]], torch.dtype, tuple[int, ...]]] = [
    ("add", lambda a, b, out: torch.add(a, b, alpha=2, out=out), [(40, 70), (40, 70)], F16, (40, 70)),
    ("add scalar", lambda a, out: torch.add(a, 3, out=out), [(40, 70)], F32, (40, 70)),
    ("sub broadcast", lambda a, b, out: torch.sub(a, b, out=out), [(3, 40, 70), (70,)], F32, (3, 40, 70)),
    ("mul", lambda a, b, out: torch.mul(a, b, out=out), [(40, 70), (40, 70)], F16, (40, 70)),
    ("div", lambda a, b, out: torch.div(a, b, rounding_mode="floor", out=out), [(40, 70), (40, 70)], F32,
     (40, 70)),
    ("exp", lambda a, out: torch.exp(a, out=out), [(40, 70)], F16, (40, 70)),
    ("sigmoid", lambda a, out: torch.sigmoid(a, out=out), [(5, 130)], F32, (5, 130)),
    ("clamp", lambda a, out: torch.clamp(a, -0.5, 0.5, out=out), [(40, 70)], F16, (40, 70)),
    ("maximum", lambda a, b, out: torch.maximum(a, b, out=out), [(40, 70), (40, 70)], F32, (40, 70)),
    ("pow", lambda a, out: torch.pow(a, 2, out=out), [(40, 70)], F32, (40, 70)),
    ("where", lambda a, b, out: torch.where(a > 0, a, b, out=out), [(40, 70), (40, 70)], F32, (40, 70)),
    ("sum dim", lambda a, out: torch.sum(a, dim=1, out=out), [(40, 70)], F32, (40,)),
    ("sum all", lambda a, out: torch.sum(a, dim=(0, 1), out=out), [(40, 70)], F32, ()),
    ("mean", lambda a, out: torch.mean(a, dim=0, keepdim=True, out=out), [(40, 70)], F32, (1, 70)),
    ("amax", lambda a, out: torch.amax(a, dim=-1, out=out), [(6, 40, 70)], F16, (6, 40)),
    ("mm", lambda a, b, out: torch.mm(a, b, out=out), [(40, 70), (70, 30)], F32, (40, 30)),
    ("bmm", lambda a, b, out: torch.bmm(a, b, out=out), [(3, 40, 70), (3, 70, 30)], F32, (3, 40, 30)),
    ("addmm", lambda c, a, b, out: torch.addmm(c, a, b, out=out), [(30,), (40, 70), (70, 30)], F32, (40, 30)),
    ("softmax", lambda a, out: torch.softmax(a, -1, out=out), [(40, 70)], F32, (40, 70)),
    ("log_softmax", lambda a, out: torch.log_softmax(a, -1, out=out), [(40, 70)], F32, (40, 70)),
]
IDS = [case[0] for case in CASES]


def _inputs(shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(shape, dtype=dtype) for shape in shapes]


def _expected(op: Callable[..., torch.Tensor], host: list[torch.Tensor], shape: tuple[int, ...],
              dtype: torch.dtype) -> torch.Tensor:
    """The CPU op into an out of ``dtype``; where CPU insists on the inputs' dtype (clamp, mm,
    softmax), its result cast to ``dtype``, which is what the device writes."""
    try:
        return op(*host, out=torch.empty(shape, dtype=dtype))
    except RuntimeError:
        return op(*host, out=torch.empty(shape, dtype=host[-1].dtype)).to(dtype)


close = functools.partial(matches_cpu, f16=(2e-2, 2e-2), other=(1e-4, 1e-4))


@pytest.mark.parametrize("name,op,shapes,dtype,shape", CASES, ids=IDS)
@pytest.mark.parametrize("out_kind", ["default layout", "other dim_order", "empty", "wider dtype"])
def test_out_matches_cpu_without_fallback(name, op, shapes, dtype, shape, out_kind) -> None:
    host = _inputs(shapes, dtype)
    device = [t.to("spyre") for t in host]
    out_dtype = F32 if out_kind == "wider dtype" else dtype
    if out_kind == "empty":
        out = torch.empty(0, dtype=dtype, device="spyre")
    elif out_kind == "other dim_order" and len(shape) >= 2:
        order = [len(shape) - 1] + list(range(len(shape) - 1))
        layout = SpyreTensorLayout(shape, dtype, order)
        out = torch.empty(shape, dtype=dtype, device="spyre", device_layout=layout)
    else:
        out = torch.empty(shape, dtype=out_dtype, device="spyre")
    layout_before = out.device_tensor_layout() if out.numel() else None
    torch_layouts.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a correctly shaped or empty out is never warned about
        returned = op(*device, out=out)
    assert returned is out
    assert torch_layouts.stats()["fallbacks"] == {}
    assert out.shape == shape and out.dtype == out_dtype and out.device.type == "spyre"
    if layout_before is not None:
        assert out.device_tensor_layout() == layout_before  # the user's layout is kept
    close(out, _expected(op, host, shape, out_dtype))


@pytest.mark.parametrize("name,op,shapes,dtype,shape", CASES[:4] + CASES[11:13], ids=IDS[:4] + IDS[11:13])
def test_wrongly_shaped_out_is_resized_with_atens_warning(name, op, shapes, dtype, shape) -> None:
    host = _inputs(shapes, dtype)
    out = torch.empty(7, dtype=dtype, device="spyre")
    with pytest.warns(UserWarning, match=r"An output with one or more elements was resized since it had shape \[7\]"):
        op(*(t.to("spyre") for t in host), out=out)
    assert out.shape == shape
    close(out, _expected(op, host, shape, dtype))


def test_out_aliasing_an_input_computes_in_place() -> None:
    a, b = _inputs([(40, 70), (40, 70)], F16)
    da, db = a.to("spyre"), b.to("spyre")
    torch.mul(da, db, out=da)
    assert torch.equal(da.cpu(), a * b)
    torch.add(db, da, out=da)
    assert torch.equal(da.cpu(), b + a * b)


@pytest.mark.parametrize("out,error,message", [
    (lambda: torch.empty(40, 70, dtype=torch.int32, device="spyre"), RuntimeError,
     "result type Half can't be cast to the desired output type Int"),
    (lambda: torch.empty(40, 70, dtype=F16), RuntimeError,
     "Expected out tensor to have device spyre:0, but got cpu instead"),
], ids=["narrowing dtype", "cpu out"])
def test_bad_out_is_rejected_and_left_alone(out, error, message) -> None:
    a, b = (t.to("spyre") for t in _inputs([(40, 70), (40, 70)], F16))
    target = out()
    before = target.cpu().clone() if target.device.type == "spyre" else target.clone()
    with pytest.raises(error, match=message):
        torch.add(a, b, out=target)
    after = target.cpu() if target.device.type == "spyre" else target
    assert torch.equal(after.view(torch.uint8), before.view(torch.uint8))
