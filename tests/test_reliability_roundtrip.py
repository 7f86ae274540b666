"""Reliability (issue 10.1): every family moves any host tensor in and out bit for bit.

Random shapes (0- and 1-size dims, odd sizes, multi-stick rows), dtypes, host views
(permuted, sliced, expanded) and layouts of every family (Spyre default / dim_order /
explicit, core layouts with tilings, HTP pair lists, TensorRT formats, MACE images and
CPU orders). Each property runs through the device runtime and checks:

* H2D then D2H gives back the same bits (NaN payloads, -0.0 included);
* device memory holds every host element where the layout's ``host_map`` says, and
  the pad value everywhere else;
* ``device_offset`` and ``host_index`` are inverse on real positions and agree with
  ``host_map`` (padding is None / -1);
* a device-to-device relayout between any two families is bit-exact and leaves the
  source untouched.

The strategies (``host_tensors``, ``specs``) are shared with the other reliability suites.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import DEVICE_DTYPES, as_bits, layout_cases, pad_bits, pad_values, random_bits, unravel
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, _C, htp, mace, tensorrt
from torch_layouts.core.layout import contiguous_strides, is_dense

FAMILIES = ("default", "spyre", "spyre_strided", "spyre_explicit", "core", "htp", "tensorrt", "mace")
TRT_TEMPLATES = (
    *tensorrt.TensorFormat,
    tensorrt.FormatTemplate(tensorrt.TensorFormat.kDLA_HWC4, dla="xavier"),
    tensorrt.FormatTemplate(tensorrt.TensorFormat.kDLA_LINEAR, dla="xavier"),
)
MACE_TEMPLATES = (*(mace.ImageLayout(bt) for bt in mace.BufferType), *mace.CpuLayout)


def scaled(n: int) -> settings:
    """``n`` examples in the default profile, ten times as many under ``--hypothesis-profile=long``."""
    return settings(max_examples=max(1, n * settings.default.max_examples // 100), deadline=None)


# -- host tensors ------------------------------------------------------------------------------
@st.composite
def shapes(draw: st.DrawFn, min_rank: int = 0, max_rank: int = 4, dtype: torch.dtype = torch.float32
           ) -> tuple[int, ...]:
    """Small shapes with 0-, 1- and odd sizes; sometimes one dim spans several sticks."""
    rank = draw(st.integers(min_rank, max_rank))
    size = [draw(st.sampled_from([0, 1, 1, 2, 3, 4, 5, 7])) for _ in range(rank)]
    if rank and draw(st.integers(0, 3)) == 0:
        size[draw(st.integers(0, rank - 1))] = draw(st.integers(1, 2 * (128 // dtype.itemsize) + 3))
    return tuple(size)


@st.composite
def host_tensors(draw: st.DrawFn, shape: tuple[int, ...], dtype: torch.dtype, kinds: tuple[str, ...] = (
        "contiguous", "permuted", "sliced", "expanded")) -> torch.Tensor:
    """A CPU tensor of ``shape`` full of random bit patterns: contiguous, a permuted view, a
    sliced (stepped, offset) view of a permuted tensor, or an expanded view."""
    kind = draw(st.sampled_from(kinds))
    seed = draw(st.integers(0, 2**31 - 1))
    rank = len(shape)
    if kind == "expanded" and rank:
        dims = draw(st.sets(st.integers(0, rank - 1), min_size=1))
        base_shape = [1 if d in dims else n for d, n in enumerate(shape)]
        return random_bits(math.prod(base_shape), dtype, seed).view(base_shape).expand(shape)
    perm = list(draw(st.permutations(range(rank)))) if kind in ("permuted", "sliced") else list(range(rank))
    steps = [draw(st.integers(1, 3)) if kind == "sliced" else 1 for _ in range(rank)]
    starts = [draw(st.integers(0, 2)) if kind == "sliced" else 0 for _ in range(rank)]
    big = [s + k * n for s, k, n in zip(starts, steps, shape)]
    inverse = [perm.index(d) for d in range(rank)]
    storage = random_bits(math.prod(big), dtype, seed).view([big[p] for p in perm]).permute(inverse)
    return storage[tuple(slice(s, s + k * n, k) for s, k, n in zip(starts, steps, shape))]


# -- layouts of every family -----------------------------------------------------------------
def _valid(templates: tuple, shape: tuple[int, ...], dtype: torch.dtype) -> list:
    """The templates that bind to ``shape``/``dtype`` (their rank and dtype rules are tested elsewhere)."""
    out = []
    for template in templates:
        try:
            template.bind(shape, dtype)
        except ValueError:
            continue
        out.append(template)
    return out


def families(shape: tuple[int, ...], dtype: torch.dtype) -> list[str]:
    """Families that have a layout for a row-major tensor of ``shape`` and ``dtype``."""
    out = ["default", "spyre", "spyre_strided", "spyre_explicit", "core"]
    if shape:
        out.append("htp")
    if _valid(TRT_TEMPLATES, shape, dtype):
        out.append("tensorrt")
    if _valid(MACE_TEMPLATES, shape, dtype):
        out.append("mace")
    return out


@st.composite
def dim_orders(draw: st.DrawFn, rank: int, sparse: bool = True) -> list[int]:
    order = list(draw(st.permutations(range(rank))))
    return order + [-1] if sparse and draw(st.booleans()) else order


@st.composite
def htp_templates(draw: st.DrawFn, rank: int, pad_value: object) -> htp.ChunkedMemoryLayout:
    """A random ``ChunkedMemoryLayout``: any chunk order, 0-3 sized pairs (dims may repeat)."""
    pairs = [(d, 0) for d in draw(st.permutations(range(rank)))]
    pairs += [(draw(st.integers(0, rank - 1)), draw(st.sampled_from([1, 2, 3, 4, 8])))
              for _ in range(draw(st.integers(0, 3)))]
    return htp.ChunkedMemoryLayout(rank, *(v for pair in pairs for v in pair), pad_value=pad_value)


@st.composite
def explicit_spyre(draw: st.DrawFn, x: torch.Tensor, pad_value: object) -> SpyreTensorLayout:
    """An explicit ``SpyreTensorLayout(device_size, stride_map, DataFormats)``: a dim_order layout
    written out, with extra tiles / rows / synthetic positions of padding. Its stride_map counts
    ``x``'s own storage offsets when ``x`` is dense (Torch-Spyre), else row-major offsets."""
    shape, dtype = tuple(x.shape), x.dtype
    stride = tuple(x.stride()) if x.numel() and is_dense(shape, x.stride()) else None
    base = SpyreTensorLayout(shape, stride, dtype, draw(dim_orders(len(shape), sparse=False)))
    size = [n + draw(st.sampled_from([0, 0, 1, 2])) for n in base.device_size[:-1]] + [base.device_size[-1]]
    layout = SpyreTensorLayout(size, list(base.stride_map), DataFormats(dtype), pad_value=pad_value)
    try:
        layout.resolve(shape, stride)
    except ValueError:
        assume(False)
    return layout


@st.composite
def specs(draw: st.DrawFn, x: torch.Tensor, family: str | None = None, allow_default: bool = True) -> object:
    """A ``device_layout`` for ``x`` (None = the default ``x.to("spyre")``) from a random family."""
    shape, dtype = tuple(x.shape), x.dtype
    options = [f for f in families(shape, dtype) if allow_default or f != "default"]
    family = family or draw(st.sampled_from(options))
    pad = draw(st.sampled_from(pad_values(dtype)))
    if family == "default":
        return None
    if family == "spyre":
        return SpyreTensorLayout(shape, dtype, draw(dim_orders(len(shape))), pad_value=pad)
    if family == "spyre_strided":  # read in x's own host strides (expanded dims included)
        stride = tuple(x.stride())
        return SpyreTensorLayout(shape, stride, dtype, draw(dim_orders(len(shape))), pad_value=pad)
    if family == "spyre_explicit":
        return draw(explicit_spyre(x, pad))
    if family == "core":  # an empty tensor fits any layout: draw one for a non-empty stand-in
        stand_in = tuple(n or draw(st.integers(1, 3)) for n in shape)
        layout = draw(layout_cases(host_size=stand_in, strided=False, dtypes=(dtype,))).layout()
        if stand_in != shape:
            return layout
        # made for x's row-major offsets: a layout made for this size keeps them for any strides of x
        return DeviceLayout(layout.device_size, layout.stride_map, dtype, pad_value=layout.pad_value,
                            host_size=shape, host_stride=contiguous_strides(shape))
    if family == "htp":
        return draw(htp_templates(len(shape), pad))
    if family == "tensorrt":
        template = draw(st.sampled_from(_valid(TRT_TEMPLATES, shape, dtype)))
        if isinstance(template, tensorrt.TensorFormat) and draw(st.booleans()):
            return tensorrt.TensorFormatLayout(template, shape, dtype, pad_value=pad)
        return template
    assert family == "mace"
    return draw(st.sampled_from(_valid(MACE_TEMPLATES, shape, dtype)))


@st.composite
def cases(draw: st.DrawFn, dtypes: tuple = DEVICE_DTYPES, max_rank: int = 4) -> tuple[torch.Tensor, object]:
    dtype = draw(st.sampled_from(dtypes))
    x = draw(host_tensors(draw(shapes(max_rank=max_rank, dtype=dtype)), dtype))
    return x, draw(specs(x))


def move(x: torch.Tensor, spec: object) -> torch.Tensor:
    return x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)


# -- checks ------------------------------------------------------------------------------------
def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(as_bits(a), as_bits(b))


def expected_layout(spec: object, x: torch.Tensor) -> DeviceLayout | None:
    if spec is None:
        return None
    return spec if isinstance(spec, DeviceLayout) else spec.bind(tuple(x.shape), x.dtype)


def check_device_tensor(y: torch.Tensor, x: torch.Tensor, layout: DeviceLayout | None = None,
                        samples: int = 24) -> None:
    """``y`` holds ``x``: values, device memory vs ``host_map``, padding, offsets both ways."""
    assert y.device.type == "spyre" and y.shape == x.shape and y.dtype == x.dtype
    assert bits_equal(y.cpu(), x), "D2H did not give back the host bits"
    found = y.device_tensor_layout()
    if layout is not None:
        assert found == layout, f"tensor carries {found!r}, expected {layout!r}"
    info = _C._bound_layout_of(y)
    assert list(y.shape) == info.base_size
    size, stride = tuple(info.base_size), tuple(info.base_stride)
    memory = torch_layouts.device_memory(y)
    host_map = found.host_map(size, stride)
    assert memory.numel() == host_map.numel() == found.device_numel
    real = host_map >= 0
    flat = as_bits(x.reshape(-1))
    assert torch.equal(as_bits(memory)[real], flat[host_map[real]]), "a real position holds the wrong element"
    assert bool((as_bits(memory)[~real] == pad_bits(found.pad_value, x.dtype)).all()), "padding lost its pad value"
    # distinct elements: a base read in expanded (stride-0) host strides holds one copy per expanded dim
    distinct = math.prod(n for n, st in zip(size, stride) if st != 0 or n == 0)
    assert int(real.sum()) >= distinct and int(torch.unique(host_map[real]).numel()) == distinct

    gen = torch.Generator().manual_seed(x.numel() * 31 + found.device_numel)
    if x.numel():
        for linear in torch.randint(0, x.numel(), (samples,), generator=gen).tolist():
            index = tuple(int(c) for c in unravel(torch.tensor(linear), size))
            offset = found.device_offset(index, size, stride)
            # along expanded (stride-0) host dims every index is the element at coordinate 0
            canonical = tuple(0 if st == 0 else c for c, st in zip(index, stride))
            row_major = [math.prod(size[d + 1:]) for d in range(len(size))]
            assert int(host_map[offset]) == sum(i * r for i, r in zip(canonical, row_major))
            assert found.host_index(offset, size, stride) == canonical
    if found.device_numel:
        for offset in torch.randint(0, found.device_numel, (samples,), generator=gen).tolist():
            index = found.host_index(offset, size, stride)
            if index is None:
                assert int(host_map[offset]) == -1
            else:
                row_major = [math.prod(size[d + 1:]) for d in range(len(size))]
                assert int(host_map[offset]) == sum(i * s for i, s in zip(index, row_major))
                assert found.host_index(found.device_offset(index, size, stride), size, stride) == index


# -- properties --------------------------------------------------------------------------------
@scaled(60)
@given(cases())
def test_h2d_d2h_bit_exact(case: tuple[torch.Tensor, object]) -> None:
    x, spec = case
    check_device_tensor(move(x, spec), x, expected_layout(spec, x))


@pytest.mark.parametrize("family", FAMILIES)
@scaled(8)
@given(data=st.data())
def test_every_family_every_dtype(family: str, data: st.DataObject) -> None:
    """Each family gets its own examples (float16, bfloat16, float32, int8, int32, bool where allowed)."""
    dtype = data.draw(st.sampled_from(DEVICE_DTYPES))
    shape = data.draw(shapes(dtype=dtype))
    assume(family in families(shape, dtype))
    x = data.draw(host_tensors(shape, dtype))
    spec = data.draw(specs(x, family))
    check_device_tensor(move(x, spec), x, expected_layout(spec, x))


@scaled(60)
@given(data=st.data())
def test_relayout_between_families_bit_exact(data: st.DataObject) -> None:
    x, first = data.draw(cases())
    y = move(x, first)
    # explicit layouts count y's storage offsets (row-major ones when y is not dense); y.cpu() is dense
    reference = y.cpu() if is_dense(tuple(y.shape), tuple(y.stride())) else y.cpu().contiguous()
    second = data.draw(specs(reference, allow_default=False))
    before = torch_layouts.device_memory(y)
    z = y.to("spyre", device_layout=second)
    check_device_tensor(z, x, expected_layout(second, x))
    assert bits_equal(torch_layouts.device_memory(y), before), "relayout changed its source"
    if y.device_tensor_layout().host_size is None and y.stride() != z.stride():
        z = z.to("spyre", device_layout=SpyreTensorLayout(y.shape, y.stride(), x.dtype), copy=True)
    back = z.to("spyre", device_layout=y.device_tensor_layout())
    check_device_tensor(back, x, y.device_tensor_layout())


@scaled(30)
@given(data=st.data())
def test_relayout_of_views_and_writes_into_views(data: st.DataObject) -> None:
    """Sliced device views copied into another layout, and host data written into a device view."""
    dtype = data.draw(st.sampled_from(DEVICE_DTYPES))
    shape = data.draw(shapes(min_rank=1, dtype=dtype))
    assume(all(n >= 2 for n in shape))
    x = data.draw(host_tensors(shape, dtype, ("contiguous",)))
    spec = data.draw(specs(x))
    y = move(x, spec)
    dim = data.draw(st.integers(0, len(shape) - 1))
    view = y.narrow(dim, 1, shape[dim] - 1)
    expect = x.narrow(dim, 1, shape[dim] - 1)
    assert bits_equal(view.cpu(), expect)
    z = view.to("spyre", device_layout=data.draw(specs(expect, allow_default=False)))
    check_device_tensor(z, expect, None)
    patch = data.draw(host_tensors(tuple(expect.shape), dtype))
    view.copy_(patch)
    whole = x.clone()
    whole.narrow(dim, 1, shape[dim] - 1).copy_(patch)
    check_device_tensor(y, whole, None)


def test_layout_in_expanded_host_strides() -> None:
    x = torch.arange(3.0).view(3, 1).expand(3, 5)
    layout = SpyreTensorLayout(x.shape, x.stride(), torch.float32)
    assert torch.equal(x.to("spyre", device_layout=layout).cpu(), x)


def test_relayout_into_broadcast_layout() -> None:
    """Every copy of a broadcast device dim is written, also without a direct relayout program."""
    x = torch.arange(8.0).view(2, 2, 2)
    layout = DeviceLayout([2, 4, 2], [1, 2, 0], torch.float32)
    z = x.to("spyre").to("spyre", device_layout=layout)
    host_map = layout.host_map(x.shape)
    assert torch.equal(torch_layouts.device_memory(z), x.reshape(-1)[host_map])


def test_write_into_view_of_broadcast_layout() -> None:
    layout = DeviceLayout([2, 4], [1, 0], torch.float32)
    y = torch.zeros(2).to("spyre", device_layout=layout)
    y[1:].copy_(torch.tensor([5.0]))
    assert torch_layouts.device_memory(y).tolist() == [0.0] * 4 + [5.0] * 4
