"""NVIDIA TensorRT's ``TensorFormat``: I/O tensor formats as device layouts.

Each format is a template: ``TensorFormat.kCHW4.bind(size, dtype)`` gives a
:class:`TensorFormatLayout` whose device dims are the format's array form, e.g.
kCHW4 ``[N][(C+3)/4][H][W][4]``. Logical dims are TensorRT's: the last three are
``{C, H, W}`` (the last four ``{C, D, H, W}`` for kDHWC8, kCDHW32, kDHWC); every dim
before C (N and any further batch dims) is an outer dim, kept in order, outermost.

* vector-major (kCHW2/4/16/32, kCDHW32): ``[outer][ceil(C/V)][spatial][V]``
* vector-minor (kHWC8, kHWC16, kDHWC8; kHWC and kDHWC with V=1): ``[outer][spatial][ceil(C/V)*V]``
* kLINEAR: the host dims, row-major
* kDLA_LINEAR: ``[outer][C][H][roundUp(W, 64/elemSize)]``
* kDLA_HWC4: ``[outer][H][roundUp(W, line/C'/elemSize)][C']`` with C in {1, 3, 4} -> C' in
  {1, 4, 4}; the line is 64 bytes on Orin (default) and 32 bytes on Xavier.

The DLA formats accept any rank: missing C/H/W dims are implicit size-1 dims (and
still appear in the array form). Allowed dtypes and minimum ranks follow
TensorRT's format table (docs/design.md section 8), plus BF16 where TensorRT 10's I/O-formats table lists it (kLINEAR,
kCHW2, kHWC8, kDHWC8; the ``TensorFormat`` docs say "bound to FP16 and BF16"), and
TensorRT 10.6's kDHWC (FP32, rank >= 4).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .core.family import Family, register
from .core.layout import DeviceLayout, LayoutTemplate, check_host

FP32, FP16, BF16, INT32, INT8 = torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8
_TRT_NAME = {FP32: "FP32", FP16: "FP16", BF16: "BF16", INT32: "INT32", INT8: "INT8"}

DLA_PLATFORMS = {"orin": 64, "xavier": 32}  # kDLA_HWC4 line size in bytes
DLA_LINEAR_BYTES = 64
DLA_HWC4_CHANNELS = {1: 1, 3: 4, 4: 4}  # C -> C'


class TensorFormat(enum.Enum):
    """TensorRT's ``nvinfer1::TensorFormat`` (same values); each member is a layout template."""

    kLINEAR = 0
    kCHW2 = 1
    kHWC8 = 2
    kCHW4 = 3
    kCHW16 = 4
    kCHW32 = 5
    kDHWC8 = 6
    kCDHW32 = 7
    kHWC = 8
    kDLA_LINEAR = 9
    kDLA_HWC4 = 10
    kHWC16 = 11
    kDHWC = 12

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> TensorFormatLayout:
        """The format's layout for a row-major host tensor (Orin rounding for kDLA_HWC4)."""
        return TensorFormatLayout(self, host_size, dtype)

    @property
    def is_dla(self) -> bool:
        return self in (TensorFormat.kDLA_LINEAR, TensorFormat.kDLA_HWC4)

    def __str__(self) -> str:
        return self.name


LayoutTemplate.register(TensorFormat)


@dataclass(frozen=True)
class _Rule:
    """A format's constraints and shape: kind is 'linear', 'major', 'minor', 'dla_linear' or 'dla_hwc4'."""

    kind: str
    dtypes: tuple[torch.dtype, ...]
    min_rank: int
    vector: int = 1  # scalars per vector (TensorRT's components per element)
    spatial: int = 2  # H, W (3 for D, H, W)


_ALL = (FP32, FP16, INT32, INT8)
_RULES = {
    TensorFormat.kLINEAR: _Rule("linear", _ALL + (BF16,), 0),
    TensorFormat.kCHW2: _Rule("major", (FP16, BF16), 3, 2),
    TensorFormat.kHWC8: _Rule("minor", (FP16, BF16), 3, 8),
    TensorFormat.kCHW4: _Rule("major", (FP16, INT8), 3, 4),
    TensorFormat.kCHW16: _Rule("major", (FP16,), 3, 16),
    TensorFormat.kCHW32: _Rule("major", _ALL, 3, 32),
    TensorFormat.kDHWC8: _Rule("minor", (FP16, BF16), 4, 8, spatial=3),
    TensorFormat.kCDHW32: _Rule("major", (FP16, INT8), 4, 32, spatial=3),
    TensorFormat.kHWC: _Rule("minor", (FP32,), 3),
    TensorFormat.kDLA_LINEAR: _Rule("dla_linear", _ALL, 0),
    TensorFormat.kDLA_HWC4: _Rule("dla_hwc4", _ALL, 0),
    TensorFormat.kHWC16: _Rule("minor", (FP16,), 3, 16),
    TensorFormat.kDHWC: _Rule("minor", (FP32,), 4, spatial=3),
}


def _check_platform(fmt: TensorFormat, dla: str | None) -> str | None:
    """The DLA platform a format binds with: 'orin' by default for DLA formats, None otherwise."""
    if dla is not None and not isinstance(dla, str):
        raise TypeError(f"dla must be a str ('orin' or 'xavier') or None, got {dla!r}")
    if not fmt.is_dla:
        if dla is not None:
            raise ValueError(f"dla={dla!r} only applies to kDLA_LINEAR and kDLA_HWC4, not {fmt}")
        return None
    if dla is None:
        return "orin"
    if dla.lower() not in DLA_PLATFORMS:
        raise ValueError(f"dla={dla!r} is not a DLA platform; expected 'orin' or 'xavier'")
    return dla.lower()


@dataclass(frozen=True)
class FormatTemplate(LayoutTemplate):
    """A TensorFormat with a DLA platform: ``FormatTemplate(TensorFormat.kDLA_HWC4, dla="xavier")``."""

    format: TensorFormat
    dla: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.format, TensorFormat):
            raise TypeError(f"format must be a TensorFormat, got {self.format!r}")
        object.__setattr__(self, "dla", _check_platform(self.format, self.dla))

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> TensorFormatLayout:
        return TensorFormatLayout(self.format, host_size, dtype, dla=self.dla)

    def __str__(self) -> str:
        return _spec(self.format, self.dla)


def _spec(fmt: TensorFormat, dla: str | None) -> str:
    return f"{fmt},{dla}" if dla not in (None, "orin") else str(fmt)


def parse(spec: str) -> TensorFormat | FormatTemplate:
    """A template from a CLI spec: ``"kCHW4"``, ``"chw4"``, ``"kDLA_HWC4,xavier"``."""
    if not isinstance(spec, str):
        raise TypeError(f"a TensorRT format spec must be a str, got {spec!r}")
    name, *rest = [part.strip() for part in spec.split(",")]
    by_name = {m.name.lower(): m for m in TensorFormat} | {m.name[1:].lower(): m for m in TensorFormat}
    fmt = by_name.get(name.lower())
    if fmt is None:
        names = ", ".join(m.name for m in TensorFormat)
        raise ValueError(f"bad TensorRT format spec {spec!r}: unknown format {name!r} (expected one of {names})")
    if not rest:
        return fmt
    if len(rest) > 1:
        raise ValueError(f"bad TensorRT format spec {spec!r}: expected FORMAT or FORMAT,PLATFORM")
    try:
        return FormatTemplate(fmt, dla=rest[0])
    except ValueError as err:
        raise ValueError(f"bad TensorRT format spec {spec!r}: {err}") from None


class TensorFormatLayout(DeviceLayout):
    """A TensorFormat bound to a host tensor; answers TensorRT's own queries.

    ``strides`` are ``IExecutionContext::getTensorStrides``: one per host dim, in
    elements, where an element is a whole vector for a vectorized format (for kHWC8
    a stride of one spans 8 scalars) and a scalar otherwise.
    """

    __slots__ = ("format", "dla", "strides")

    format: TensorFormat
    dla: str | None
    strides: tuple[int, ...]

    def __init__(self, fmt: TensorFormat, host_size: Sequence[int], dtype: torch.dtype, *,
                 dla: str | None = None, pad_value: int | float | bool = 0) -> None:
        if not isinstance(fmt, TensorFormat):
            raise TypeError(f"format must be a TensorFormat, got {fmt!r}")
        platform = _check_platform(fmt, dla)
        size, host_stride = check_host(host_size, None)
        dtype = _check_dtype(fmt, dtype)
        dims = _array_dims(fmt, size, dtype.itemsize, platform)
        device_size = [extent for extent, _, _ in dims]
        stride_map = [-1 if d is None or size[d] == 1 else step * host_stride[d] for _, d, step in dims]
        super().__init__(device_size, stride_map, dtype, pad_value=pad_value, host_size=size)
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "dla", platform)
        object.__setattr__(self, "strides", _trt_strides(fmt, size, dims, self.device_strides))

    def _identity(self) -> tuple:
        return super()._identity() + (self.format, self.dla, self.strides)

    @property
    def components_per_element(self) -> int:
        """``getTensorComponentsPerElement``: scalars per vector, 1 for a scalar format."""
        return _RULES[self.format].vector

    @property
    def vectorized_dim(self) -> int:
        """``getTensorVectorizedDim``: the index of C in the host dims, -1 when not vectorized."""
        rule = _RULES[self.format]
        return len(self.host_size) - rule.spatial - 1 if rule.vector > 1 else -1

    def __str__(self) -> str:
        array = "".join(f"[{extent}]" for extent in self.device_size)
        return f"{_spec(self.format, self.dla)} bound to {list(self.host_size)}: {array}"

    def __repr__(self) -> str:
        dla = "" if self.dla is None else f", dla={self.dla!r}"
        pad = "" if self.pad_value == 0 else f", pad_value={self.pad_value!r}"
        return f"TensorFormatLayout({self.format}, {list(self.host_size)}, {self.dtype}{dla}{pad})"


def _check_dtype(fmt: TensorFormat, dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    allowed = _RULES[fmt].dtypes
    if dtype not in allowed:
        names = " or ".join(_TRT_NAME[d] for d in allowed)
        raise ValueError(f"{fmt} is bound to {names}, got {str(dtype).removeprefix('torch.')}")
    return dtype


# An array dim: (extent, host dim it steps along or None for an implicit dim, step in that dim).
_Dim = tuple[int, int | None, int]


def _array_dims(fmt: TensorFormat, size: tuple[int, ...], itemsize: int, platform: str | None) -> list[_Dim]:
    """The format's array form over the host dims, outermost first."""
    rule = _RULES[fmt]
    rank = len(size)
    if rank < rule.min_rank:
        raise ValueError(f"{fmt} is only available for dimensions >= {rule.min_rank}, got {rank} "
                         f"(host size {list(size)})")
    if rule.kind == "linear":
        return [(extent, d, 1) for d, extent in enumerate(size)] or [(1, None, 1)]
    own = rule.spatial + 1  # C and the spatial dims; DLA formats make missing ones implicit
    first = rank - own
    named = [(size[d], d) if d >= 0 else (1, None) for d in range(first, rank)]
    outer = [(size[d], d, 1) for d in range(max(first, 0))]
    (c, cdim), spatial = named[0], named[1:]
    if rule.kind == "major":
        v = rule.vector
        return outer + [(-(-c // v), cdim, v)] + [(e, d, 1) for e, d in spatial] + [(v, cdim, 1)]
    if rule.kind == "minor":
        return outer + [(e, d, 1) for e, d in spatial] + [(-(-c // rule.vector) * rule.vector, cdim, 1)]
    (h, hdim), (w, wdim) = spatial
    if rule.kind == "dla_linear":
        per_line = DLA_LINEAR_BYTES // itemsize
        return outer + [(c, cdim, 1), (h, hdim, 1), (-(-w // per_line) * per_line, wdim, 1)]
    if c not in DLA_HWC4_CHANNELS:  # an implicit C is 1
        raise ValueError(f"{fmt} needs C in {{1, 3, 4}}, got C={c} (dim {cdim} of host size {list(size)})")
    c_vec = DLA_HWC4_CHANNELS[c]
    per_line = DLA_PLATFORMS[platform] // c_vec // itemsize
    return outer + [(h, hdim, 1), (-(-w // per_line) * per_line, wdim, 1), (c_vec, cdim, 1)]


def _trt_strides(fmt: TensorFormat, size: tuple[int, ...], dims: list[_Dim],
                 device_strides: tuple[int, ...]) -> tuple[int, ...]:
    """Per host dim, the device stride of its coarsest array dim in TensorRT's units."""
    rule = _RULES[fmt]
    carrier: dict[int, int] = {}
    for j, (_, d, step) in enumerate(dims):
        if d is not None and (d not in carrier or step > dims[carrier[d]][2]):
            carrier[d] = j
    c_dim = len(size) - rule.spatial - 1
    strides = []
    for d in range(len(size)):
        if rule.kind == "minor" and d == c_dim:
            strides.append(1)  # one vector of C
        else:
            strides.append(device_strides[carrier[d]] // rule.vector)
    return tuple(strides)


_PIXEL_FORMATS = {"kHWC8", "kHWC16", "kDHWC8", "kHWC", "kDHWC", "kDLA_HWC4"}


def _build(notation: str, host_size: tuple[int, ...], dtype: torch.dtype | None, pad_value: int | float,
           dim_order: Sequence[int] | None) -> TensorFormatLayout:
    """The CLI's ``trt:FORMAT[,PLATFORM]``; float16 by default (float32 for the FP32-only kHWC, kDHWC)."""
    template = parse(notation)
    fmt, dla = (template, None) if isinstance(template, TensorFormat) else (template.format, template.dla)
    if dtype is None:
        dtype = FP16 if FP16 in _RULES[fmt].dtypes else FP32
    return TensorFormatLayout(fmt, host_size, dtype, dla=dla, pad_value=pad_value)


def _chunk_name(layout: TensorFormatLayout) -> str:
    name = layout.format.name
    return "pixel" if name in _PIXEL_FORMATS else "vector" if name.startswith(("kCHW", "kCDHW")) else "line"


def _facts(layout: TensorFormatLayout) -> list[tuple[str, str]]:
    return [("trt strides", f"{list(layout.strides)} (getTensorStrides)"),
            ("components", f"{layout.components_per_element} per element, vectorized dim {layout.vectorized_dim}")]


register(Family(
    name="trt",
    aliases=("tensorrt",),
    layout_types=(TensorFormatLayout,),
    build=_build,
    specs=(("trt:FORMAT[,xavier]", "a TensorRT format: kLINEAR, kCHW2/4/16/32, kHWC8, kHWC16, kDHWC8, kCDHW32, "
                                   "kHWC, kDHWC, kDLA_LINEAR, kDLA_HWC4 (Orin, or ',xavier')"),),
    example="trt:kCHW4",
    logical_dims="NCHW (NCDHW)",
    default_dtype="float16 (float32 for the FP32-only formats kHWC, kDHWC)",
    chunk_name=_chunk_name,
    facts=_facts,
    safe_classes=(TensorFormat, FormatTemplate),
))

__all__ = ["DLA_PLATFORMS", "FormatTemplate", "TensorFormat", "TensorFormatLayout", "parse"]
