"""``Tensor.to`` as the runtime's C method (csrc/layout_moves.cpp): a host tensor moved to spyre,
into a kept layout record or the default layout, without Python, giving the same tensor bit for
bit as the paths it stands in for; every other call goes to PyTorch's method or to Python's
path, as before; the kept records stay bounded."""

from __future__ import annotations

import functools
import math
import os
import sys
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import torch_layouts
from conftest import as_bits, random_bits
from torch_layouts import SpyreTensorLayout, _C, tensorrt

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.int64, torch.bool)
PROPERTY = settings(max_examples=60, deadline=None)


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same device, layout, strides, device bytes (padding included) and elements, bit for bit."""
    return (a.device == b.device and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
            and a.device_tensor_layout() == b.device_tensor_layout()
            and torch.equal(as_bits(torch_layouts.device_memory(a)), as_bits(torch_layouts.device_memory(b)))
            and torch.equal(as_bits(a.cpu()), as_bits(b.cpu())))


def package_calls(fn) -> list[str]:
    """The Python functions of this package that ``fn()`` runs (the C method's moves run none)."""
    calls: list[str] = []
    package = os.path.dirname(torch_layouts.__file__)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            calls.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@st.composite
def host_tensors(draw) -> torch.Tensor:
    """A host tensor of any dtype and 1-3 dims: contiguous, permuted or a slice."""
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(1, 70), min_size=1, max_size=3))
    numel = math.prod(shape)
    x = random_bits(numel, dtype, draw(st.integers(0, 2**16))).view(shape)
    form = draw(st.sampled_from(["contiguous", "permuted", "sliced"]))
    if form == "permuted" and x.dim() > 1:
        x = x.transpose(0, -1).contiguous().transpose(0, -1)
    elif form == "sliced" and shape[-1] > 1:
        x = random_bits(numel * 2, dtype, 1).view(*shape[:-1], 2 * shape[-1])[..., ::2]
    return x


@PROPERTY
@given(x=host_tensors(), device=st.sampled_from(["spyre", "spyre:0", torch.device("spyre")]),
       dtype=st.sampled_from((None, *DTYPES)))
def test_default_moves_are_pytorchs(x, device, dtype):
    """``x.to(device[, dtype])``: the C method and the runtime's ``_to_copy`` give the tensor
    PyTorch's composite ``_to_copy`` makes (``empty_strided`` of the source's strides where it is
    dense, else contiguous, then ``copy_`` below autograd: version 0): layout, strides, device bytes."""
    target = dtype or x.dtype
    dense = x.is_contiguous() or x.transpose(0, -1).is_contiguous()
    strides = x.stride() if dense else torch.empty(x.shape).stride()
    try:
        made = torch.empty_strided(x.shape, strides, dtype=target, device=device).copy_(x)
    except ValueError as refused:  # a value int64's device format cannot hold (NaN as int64): refused alike
        with pytest.raises(ValueError, match=str(refused).split(" (")[0]):
            x.to(device, target)
        return
    moved = x.to(device) if dtype is None else x.to(device, dtype)
    if dtype is None:
        assert package_calls(lambda: x.to(device)) == []
    assert same_tensor(moved, made) and moved._version == 0


@PROPERTY
@given(x=host_tensors(), dim_order=st.sampled_from(["row-major", "reversed"]))
def test_kept_moves_are_the_first_moves(x, dim_order):
    """The second move of a shape into one layout object (the C method, from the kept record) is
    the first one's tensor (Python's path, which binds the layout), holding ``x``."""
    order = list(range(x.dim())) if dim_order == "row-major" else list(range(x.dim()))[::-1]
    spec = SpyreTensorLayout(tuple(x.shape), x.dtype, order)
    assert "bind" in package_calls(lambda: x.to("spyre", device_layout=spec))
    first = x.to("spyre", device_layout=spec)
    assert package_calls(lambda: x.to("spyre", device_layout=spec)) == []
    assert same_tensor(x.to("spyre", device_layout=spec), first)
    assert torch.equal(as_bits(first.cpu()), as_bits(x))


class Seen(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.funcs: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class Logged(torch.Tensor):
    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_moves_the_c_method_leaves_to_pytorch_and_python():
    """Moves autograd records, a mode or subclass sees, the JIT traces, or that name no spyre
    device go where they went before the C method: each still gets what it expects."""
    x = random_bits(6 * 40, torch.float32, 5).view(6, 40)
    spec = SpyreTensorLayout((6, 40), torch.float32, [1, 0])
    x.to("spyre", device_layout=spec)  # its record kept
    w = x.detach().requires_grad_()
    assert w.to("spyre").grad_fn is not None and w.to("spyre", device_layout=spec).grad_fn is not None
    with torch.no_grad():
        assert w.to("spyre").grad_fn is None
    with Seen() as mode:
        x.to("spyre")
        x.to("spyre", device_layout=spec)
    assert mode.funcs.count("to") == 1 and "copy_" in mode.funcs  # PyTorch's method; Python's path
    Logged.seen.clear()
    x.as_subclass(Logged).to("spyre")
    assert Logged.seen[:1] == ["to"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace's own
        traced = torch.jit.trace(lambda t: t.to("spyre") * 2, (x,), check_trace=False)
    assert "aten::to" in str(traced.graph)
    assert x.to("cpu") is x and x.to(torch.float16).dtype == torch.float16
    with pytest.raises(RuntimeError, match="bogus"):
        x.to("bogus")
    with pytest.raises(RuntimeError, match="bogus"):
        x.to("bogus", device_layout=spec)


# Ways of calling Tensor.to: bound first, through the class, by keyword, with extra arguments,
# from the C API with a tuple (functools.partial): each gives what the plain call gives.
SPEC = SpyreTensorLayout((6, 40), torch.float32, [1, 0])
CALL_FORMS = [
    ("bound first", lambda x: (lambda to: to("spyre"))(x.to), lambda x: x.to("spyre")),
    ("bound, with a layout", lambda x: (lambda to: to("spyre", device_layout=SPEC))(x.to),
     lambda x: x.to("spyre", device_layout=SPEC)),
    ("through the class", lambda x: torch.Tensor.to(x, "spyre", device_layout=SPEC),
     lambda x: x.to("spyre", device_layout=SPEC)),
    ("partial", lambda x: functools.partial(torch.Tensor.to, x)("spyre"), lambda x: x.to("spyre")),
    ("device by keyword", lambda x: x.to(device="spyre"), lambda x: x.to("spyre")),
    ("layout and copy", lambda x: x.to("spyre", device_layout=SPEC, copy=True),
     lambda x: x.to("spyre", device_layout=SPEC)),
    ("layout and dtype", lambda x: x.half().to("spyre", torch.float32, device_layout=SPEC),
     lambda x: x.half().float().to("spyre", device_layout=SPEC)),
    ("layout None", lambda x: x.to("spyre", device_layout=None), lambda x: x.to("spyre")),
]


@pytest.mark.parametrize("_, call, plain", CALL_FORMS, ids=[c[0] for c in CALL_FORMS])
def test_every_form_of_the_call_moves_alike(_, call, plain):
    x = random_bits(6 * 40, torch.float32, 9).view(6, 40)
    for _ in range(2):  # the second time from the kept record
        assert same_tensor(call(x), plain(x))


def test_int64_out_of_range_is_refused_on_a_kept_move():
    t = torch.tensor([1, 2, 3])
    spec = SpyreTensorLayout((3,), torch.int64, [0])
    t.to("spyre", device_layout=spec)
    assert package_calls(lambda: t.to("spyre", device_layout=spec)) == []
    for move in (lambda v: v.to("spyre", device_layout=spec), lambda v: v.to("spyre")):
        with pytest.raises(ValueError, match="4294967296"):
            move(torch.tensor([1, 2**32, 3]))
    assert torch.equal(t.to("spyre", device_layout=spec).cpu(), t)


def test_kept_records_stay_bounded():
    """Each layout object keeps a record (holding the object); past 256 the oldest go first, and a
    move whose record went binds it again."""
    _C._clear_kept_records()
    x = random_bits(4 * 8, torch.float16, 2).view(4, 8)
    specs = [tensorrt.TensorFormat.kCHW4 if i == 0 else SpyreTensorLayout((4, 8), torch.float16, [1, 0])
             for i in range(300)]
    firsts = [x.view(1, 4, 8, 1).to("spyre", device_layout=specs[0])]
    for spec in specs[1:]:
        x.to("spyre", device_layout=spec)
    assert _C._kept_records() == 256
    assert package_calls(lambda: x.view(1, 4, 8, 1).to("spyre", device_layout=specs[0])) != []  # bound again
    assert same_tensor(x.view(1, 4, 8, 1).to("spyre", device_layout=specs[0]), firsts[0])
    assert package_calls(lambda: x.to("spyre", device_layout=specs[-1])) == []
    with pytest.raises(ValueError, match="'moved'"):
        _C._kept_record("moved", specs[-1], [4, 8], [8, 1], torch.float16)
