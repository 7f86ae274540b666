"""Every family's layouts on the spyre device (issues 4, 5 and 6).

The family suites check each layout at the level of its DMA program; here the same tables
and independent vendor formulas check real device tensors: ``x.to("spyre",
device_layout=...)`` puts every element where the vendor's formula says
(``torch_layouts.device_memory``), padding holds zeros, ``.cpu()`` gives ``x`` back,
``new_empty``/``new_empty_strided``/``torch.empty`` take templates and bound layouts,
and device-to-device relayouts between the families (including Spyre) are exact.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_htp import FORMULAS, ODD_SIZES, expected_device, formula_offsets
from test_mace import IMAGE_CASES, expected_image
from test_tensorrt import ARRAY_CASES, BITS, bind, reference_array

import torch_layouts
from torch_layouts import SpyreTensorLayout, htp, mace, onednn, tensorrt
from torch_layouts.tensorrt import FormatTemplate


def template_of(fmt: tensorrt.TensorFormat, dla: str | None) -> object:
    return FormatTemplate(fmt, dla=dla) if fmt.is_dla else fmt


# -- HTP: device memory against the independent offset formulas --------------------------------
@pytest.mark.parametrize("name", sorted(FORMULAS))
@pytest.mark.parametrize("size", ODD_SIZES[:4], ids=str)
def test_htp_device_memory_matches_formula(name: str, size: tuple[int, ...]) -> None:
    x = torch.arange(1, 1 + math.prod(size), dtype=torch.float32).reshape(size)
    y = x.to("spyre", device_layout=getattr(htp, name))
    offsets, total = formula_offsets(name, size)
    assert torch.equal(torch_layouts.device_memory(y), expected_device(x, offsets, total, 0.0))
    assert torch.equal(y.cpu(), x)
    assert y.device_tensor_layout() == getattr(htp, name).bind(size, torch.float32)


def test_htp_issue_example() -> None:
    x = torch.arange(2 * 9 * 20 * 50, dtype=torch.float32).reshape(2, 9, 20, 50)
    y = x.to("spyre", device_layout=htp.R4CroutonLayout)
    layout = y.device_tensor_layout()
    assert str(layout) == ("ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32> bound to "
                           "[2, 9, 20, 50], padded [2, 16, 24, 64]")
    memory = torch_layouts.device_memory(y)
    assert memory.numel() == 2 * 16 * 24 * 64
    assert float(memory[layout.get_raw((0, 0, 8, 0))]) == float(x[0, 0, 8, 0])
    w = torch.randn(3, 3, 64, 96)
    assert torch.equal(w.to("spyre", device_layout=htp.R4ConvWeightLayout).cpu(), w)


# -- TensorRT: device memory against its documented array forms---------------------------------
@pytest.mark.parametrize("fmt, size, dtype, dla, array_dims", ARRAY_CASES, ids=lambda v: str(v))
def test_tensorrt_device_memory_matches_the_documented_array(fmt, size, dtype, dla, array_dims) -> None:
    bits = BITS[dtype.itemsize]
    index = torch.arange(math.prod(size), dtype=torch.int64).reshape(size)
    x = index.to(bits).view(dtype)  # each element holds its own linear index (mod the width)
    y = x.to("spyre", device_layout=template_of(fmt, dla))
    expected = reference_array(fmt, index, dtype.itemsize, dla or "orin").reshape(-1)
    want = torch.where(expected >= 0, x.view(bits).reshape(-1)[expected.clamp(min=0)], torch.zeros((), dtype=bits))
    assert torch.equal(torch_layouts.device_memory(y).view(bits), want)
    assert torch.equal(y.cpu().view(bits), x.view(bits))
    assert y.device_tensor_layout() == bind(fmt, size, dtype, dla or "orin")


def test_tensorrt_issue_example() -> None:
    x = torch.randn(2, 13, 7, 5, dtype=torch.float16)
    layout = x.to("spyre", device_layout=tensorrt.TensorFormat.kCHW4).device_tensor_layout()
    assert (layout.components_per_element, layout.vectorized_dim) == (4, 1)
    assert torch.equal(x.to("spyre", device_layout=tensorrt.TensorFormat.kCHW2).cpu(), x)
    with pytest.raises(ValueError, match="kCHW2 is bound to FP16.*float32"):
        torch.randn(2, 13, 7, 5).to("spyre", device_layout=tensorrt.TensorFormat.kCHW2)


# -- MACE: the device buffer is the RGBA image -------------------------------------------------
@pytest.mark.parametrize("bt, shape, image", IMAGE_CASES, ids=lambda v: str(v))
def test_mace_device_memory_is_the_image(bt, shape, image) -> None:
    x = torch.arange(1, 1 + math.prod(shape), dtype=torch.float32).reshape(shape)
    y = x.to("spyre", device_layout=mace.ImageLayout(bt))
    width, height = image
    assert y.device_tensor_layout().image_shape == image
    assert torch.equal(torch_layouts.device_memory(y).view(height, width, 4), expected_image(bt, x))
    assert torch.equal(y.cpu(), x)


# -- creation with templates and bound layouts -------------------------------------------------
TEMPLATES = [
    ("htp crouton", htp.R4CroutonLayout, (1, 9, 10, 40), torch.float32),
    ("htp conv weights", htp.R4ConvWeightLayout, (3, 3, 20, 40), torch.float16),
    ("trt kCHW4", tensorrt.TensorFormat.kCHW4, (2, 13, 7, 5), torch.float16),
    ("trt kDLA_HWC4 xavier", FormatTemplate(tensorrt.TensorFormat.kDLA_HWC4, dla="xavier"), (1, 3, 5, 7),
     torch.int8),
    ("mace in/out channel", mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL), (1, 7, 5, 10), torch.float32),
    ("mace conv filter", mace.ImageLayout(mace.BufferType.CONV2D_FILTER), (6, 3, 3, 3), torch.float16),
]


@pytest.mark.parametrize("name, template, size, dtype", TEMPLATES, ids=[row[0] for row in TEMPLATES])
def test_creation_with_templates_and_bound_layouts(name, template, size, dtype) -> None:
    bound = template.bind(size, dtype)
    made = [
        torch.empty(size, dtype=dtype, device="spyre", device_layout=template),
        torch.empty(*size, dtype=dtype, device="spyre", device_layout=bound),
        torch.zeros(1, dtype=dtype).new_empty(size, device="spyre", device_layout=template),
        torch.zeros(1, dtype=dtype).new_empty_strided(size, torch.empty(size).stride(), device="spyre",
                                                      device_layout=bound),
    ]
    real = bound.real_mask()
    for t in made:
        assert t.device.type == "spyre" and t.shape == size and t.dtype == dtype
        assert t.device_tensor_layout() == bound
        assert t.untyped_storage().nbytes() == bound.nbytes
        memory = torch_layouts.device_memory(t)
        assert bool((memory[~real] == 0).all())  # padding set at creation


# -- device-to-device relayout between the families ---------------------------------------------
NHWC = (2, 5, 9, 37)
RELAYOUT_SPECS = [
    ("spyre default", None),
    ("spyre dim_order [3,0,1,2]", SpyreTensorLayout(NHWC, torch.float32, [3, 0, 1, 2])),
    ("htp crouton", htp.R4CroutonLayout),
    ("htp crouton2x2", htp.R4Crouton2x2Layout),
    ("trt kCHW32 (as NCHW)", tensorrt.TensorFormat.kCHW32),
    ("trt kLINEAR", tensorrt.TensorFormat.kLINEAR),
    ("mace in/out channel", mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
    ("mace in/out width", mace.ImageLayout(mace.BufferType.IN_OUT_WIDTH)),
    ("onednn nChw16c", onednn.MemoryFormat("nChw16c")),
]


def move(x: torch.Tensor, spec: object) -> torch.Tensor:
    return x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)


@pytest.mark.parametrize("src", RELAYOUT_SPECS, ids=[row[0] for row in RELAYOUT_SPECS])
def test_relayout_between_families(src) -> None:
    x = torch.randn(NHWC)
    y = move(x, src[1])
    before = torch_layouts.device_memory(y)
    for name, spec in RELAYOUT_SPECS:
        target = SpyreTensorLayout(NHWC, torch.float32) if spec is None else spec
        z = y.to("spyre", device_layout=target)
        direct = move(x, spec)
        assert torch.equal(torch_layouts.device_memory(z), torch_layouts.device_memory(direct)), name
        assert torch.equal(z.cpu(), x), name
    assert torch.equal(torch_layouts.device_memory(y), before)  # the source is untouched
