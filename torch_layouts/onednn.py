"""oneDNN memory formats (``dnnl::memory::format_tag``) as device layouts: plain and blocked.

A tag lists the logical dims in memory order, outermost first, then the inner blocks::

    nchw, nhwc, ncdhw, ndhwc, nc, cn, oihw, hwio, goihw, ab, ba, acdb     plain
    nChw16c, nChw8c, nChw4c, nCdhw16c, nCdhw8c, aBcd16b                   activation blocks
    OIhw8i8o, OIhw16i16o, OIhw4i16o4i, gOIhw16i16o, Ohwi16o, ABcd8b8a     weight blocks

An upper-case letter is a blocked dim: its outer index ``i // B`` sits at the letter's
place and the blocks after the letters (``16c``, ``4i16o4i``: number and dim, first
listed outermost) hold ``i % B``, where ``B`` is the product of the dim's blocks. Dims
are padded up to a multiple of ``B`` and, by oneDNN's zero-padding contract, the padding
holds zeros (``pad_value`` is always 0).

Logical dims are oneDNN's: a tag's letters name them in a fixed order, whatever the
memory order: activations ``{N, C, D, H, W}``, weights ``{G, O, I, D, H, W}`` (missing
letters are skipped: ``nchw`` is ``{N, C, H, W}``, ``oihw`` is ``{O, I, H, W}``, ``x`` is
1-D), domain-agnostic tags ``a`` to ``l`` for dims 0 to 11. ``nhwc`` therefore takes an
``{N, C, H, W}`` host tensor and stores it channels-last.

Mapping to the core, as for HTP chunks (host sizes ``S_d``, row-major host strides ``h_d``):
one device dim per letter, in tag order, of extent ``ceil(S_d / B_d)`` and step ``B_d``;
then one device dim per block, in listed order, of the block's size and step = product of
the same dim's blocks listed after it; ``stride_map = step * h_d``, or ``-1`` when
``step >= S_d`` (only coordinate 0 of such a dim holds a real element).

    from torch_layouts import onednn
    y = x.to("spyre", device_layout=onednn.MemoryFormat("nChw16c"))   # x is {N, C, H, W}
    y.device_tensor_layout().padded_dims                                # C rounded up to 16
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .core.family import Family, register
from .core.layout import DeviceLayout, LayoutTemplate, blocked, check_host

ABSTRACT = "abcdefghijkl"  # oneDNN's domain-agnostic dim letters (DNNL_MAX_NDIMS = 12)
ACTIVATION = "ncdhw"
WEIGHTS = "goidhw"
DATA_TYPES = {  # torch dtype -> dnnl::memory::data_type
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int8: "s8", torch.uint8: "u8",
    torch.int32: "s32", torch.float8_e5m2: "f8_e5m2", torch.float8_e4m3fn: "f8_e4m3", torch.bool: "boolean",
}
_TAG = re.compile(r"([A-Za-z]+)((?:\d+[a-z])*)")
_BLOCK = re.compile(r"(\d+)([a-z])")

Block = tuple[int, int]  # (logical dim, block size)


def _abstract(letters: str, tag: str) -> str:
    """A tag's dim letters in oneDNN's domain-agnostic alphabet (``nChw`` -> ``aBcd``, ``x`` -> ``a``)."""
    lower = letters.lower()
    if "a" in lower:
        if not set(lower) <= set(ABSTRACT):
            raise ValueError(f"oneDNN tag {tag!r} mixes the letters a to l with {sorted(set(lower) - set(ABSTRACT))}")
        return letters
    alphabet = next((a for a in ("x", ACTIVATION, WEIGHTS) if set(lower) <= set(a)), None)
    if alphabet is None:
        raise ValueError(f"oneDNN tag {tag!r} mixes dim letters {sorted(set(lower))}; use activation letters "
                         f"{ACTIVATION!r}, weight letters {WEIGHTS!r}, 'x' or a to l")
    present = [c for c in alphabet if c in lower]
    rename = {c: ABSTRACT[i] for i, c in enumerate(present)}
    return "".join(rename[c.lower()].upper() if c.isupper() else rename[c] for c in letters)


def _parse_tag(tag: str) -> tuple[tuple[int, ...], tuple[Block, ...]]:
    """``"OIhw4i16o4i"`` -> ((0, 1, 2, 3), ((1, 4), (0, 16), (1, 4))): dims in memory order and blocks."""
    match = _TAG.fullmatch(tag)
    if match is None:
        raise ValueError(f"bad oneDNN tag {tag!r}: expected dim letters then blocks, like nchw, nChw16c or "
                         "OIhw4i16o4i")
    letters, block_text = match[1], match[2]
    dims = _abstract(letters, tag)
    order = tuple(ABSTRACT.index(c.lower()) for c in dims)
    if len(set(order)) != len(order):
        raise ValueError(f"bad oneDNN tag {tag!r}: it names a dim twice")
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"bad oneDNN tag {tag!r}: its dim letters must name each of its {len(order)} dims "
                         "exactly once")
    dim_of = {orig.lower(): d for orig, d in zip(letters, order)}
    upper = {d for c, d in zip(letters, order) if c.isupper()}
    blocks = []
    for size_text, letter in _BLOCK.findall(block_text):
        if letter not in dim_of:
            raise ValueError(f"bad oneDNN tag {tag!r}: block {size_text}{letter} names no dim of the tag")
        if dim_of[letter] not in upper:
            raise ValueError(f"bad oneDNN tag {tag!r}: block {size_text}{letter} blocks dim {letter!r}, which the "
                             "tag writes in lower case (write it upper case to block it)")
        if int(size_text) < 2:
            raise ValueError(f"bad oneDNN tag {tag!r}: block {size_text}{letter} must have a size >= 2")
        blocks.append((dim_of[letter], int(size_text)))
    for c, d in zip(letters, order):
        if c.isupper() and d not in {b for b, _ in blocks}:
            raise ValueError(f"bad oneDNN tag {tag!r}: dim {c!r} is upper case (blocked) but has no block")
    return order, tuple(blocks)


@dataclass(frozen=True, init=False)
class MemoryFormat(LayoutTemplate):
    """A oneDNN format tag as a layout template: ``MemoryFormat("nChw16c")``.

    ``x.to("spyre", device_layout=MemoryFormat("OIhw16i16o"))`` binds it to ``x``, whose
    dims are in oneDNN's logical order (here ``{O, I, H, W}``).
    """

    tag: str
    order: tuple[int, ...]  # logical dims in memory order, outermost first
    blocks: tuple[Block, ...]  # (logical dim, size), outermost first

    def __init__(self, tag: str) -> None:
        if not isinstance(tag, str):
            raise TypeError(f"a oneDNN format tag must be a str, got {tag!r}")
        order, blocks = _parse_tag(tag.strip())
        object.__setattr__(self, "tag", tag.strip())
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "blocks", blocks)

    @property
    def ndims(self) -> int:
        return len(self.order)

    @property
    def abstract(self) -> str:
        """The domain-agnostic spelling of the tag: ``nChw16c`` -> ``aBcd16b``."""
        blocked = {d for d, _ in self.blocks}
        dims = "".join(ABSTRACT[d].upper() if d in blocked else ABSTRACT[d] for d in self.order)
        return dims + "".join(f"{size}{ABSTRACT[d]}" for d, size in self.blocks)

    @property
    def block_size(self) -> tuple[int, ...]:
        """Per logical dim, the product of its blocks (1 for a plain dim)."""
        return tuple(math.prod(s for d, s in self.blocks if d == dim) for dim in range(self.ndims))

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> BoundMemoryFormat:
        return BoundMemoryFormat(self, host_size, dtype)

    def __str__(self) -> str:
        return self.tag

    def __repr__(self) -> str:
        return f"onednn.MemoryFormat({self.tag!r})"


class BoundMemoryFormat(DeviceLayout):
    """A ``MemoryFormat`` bound to a host tensor; answers with oneDNN's blocking descriptor.

    ``padded_dims`` is ``memory::desc::get_padded_dims()``; ``strides``, ``inner_blks`` and
    ``inner_idxs`` are the ``blocking_desc_t`` fields: the offset of logical index ``i`` is
    ``sum_d (i_d // B_d) * strides[d]`` plus its place inside the inner blocks.
    """

    __slots__ = ("template", "strides")

    template: MemoryFormat
    strides: tuple[int, ...]

    def __init__(self, template: MemoryFormat, host_size: Sequence[int], dtype: torch.dtype) -> None:
        if not isinstance(template, MemoryFormat):
            raise TypeError(f"template must be an onednn.MemoryFormat, got {template!r}")
        size, stride = check_host(host_size, None)
        if len(size) != template.ndims:
            raise ValueError(f"oneDNN tag {template.tag!r} describes {template.ndims}-D tensors; host size "
                             f"{list(size)} has rank {len(size)}")
        if dtype not in DATA_TYPES:
            names = ", ".join(str(t).removeprefix("torch.") for t in DATA_TYPES)
            raise ValueError(f"oneDNN has no memory::data_type for {dtype}; supported: {names}")
        device_size, stride_map = blocked(size, stride, template.order, template.blocks)
        super().__init__(device_size, stride_map, dtype, host_size=size)
        outer = self.device_strides[: template.ndims]
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "strides", tuple(outer[template.order.index(d)] for d in range(template.ndims)))

    def _identity(self) -> tuple:
        return super()._identity() + (self.template, self.host_size)

    @property
    def padded_dims(self) -> tuple[int, ...]:
        """The host size with each blocked dim rounded up to a multiple of its block."""
        return tuple(-(-s // b) * b for s, b in zip(self.host_size, self.template.block_size))

    @property
    def inner_blks(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.template.blocks)

    @property
    def inner_idxs(self) -> tuple[int, ...]:
        return tuple(d for d, _ in self.template.blocks)

    @property
    def data_type(self) -> str:
        """oneDNN's name of the element type (``f32``, ``bf16``, ``s8``, ...)."""
        return DATA_TYPES[self.dtype]

    def __str__(self) -> str:
        padded = "" if self.padded_dims == self.host_size else f", padded {list(self.padded_dims)}"
        return f"{self.template.tag} bound to {list(self.host_size)}{padded}"

    def __repr__(self) -> str:
        return f"BoundMemoryFormat({self.template.tag!r}, {list(self.host_size)}, {self.dtype})"


def _build(notation: str, host_size: tuple[int, ...], dtype: torch.dtype | None, pad_value: int | float,
           dim_order: Sequence[int] | None) -> BoundMemoryFormat:
    """The CLI's ``onednn:TAG``; float32 by default. Padding always holds zeros (oneDNN's contract)."""
    if pad_value != 0:
        raise ValueError(f"oneDNN pads blocked dims with zeros; --pad-value {pad_value} is not possible for "
                         f"onednn:{notation}")
    return MemoryFormat(notation).bind(host_size, dtype or torch.float32)


def _facts(layout: BoundMemoryFormat) -> list[tuple[str, str]]:
    return [("tag", f"{layout.template.tag} ({layout.template.abstract}), data_type {layout.data_type}"),
            ("padded_dims", str(list(layout.padded_dims))),
            ("strides", f"{list(layout.strides)} (blocking_desc, elements)"),
            ("inner blocks", f"inner_blks {list(layout.inner_blks)}, inner_idxs {list(layout.inner_idxs)}")]


register(Family(
    name="onednn",
    aliases=("dnnl",),
    layout_types=(BoundMemoryFormat,),
    build=_build,
    specs=(("onednn:TAG", "a oneDNN format tag: plain (nchw, nhwc, ncdhw, ndhwc, nc, oihw, hwio, ab, ba, ...), "
                          "blocked (nChw16c, nChw8c, nCdhw16c, OIhw16i16o, OIhw4i16o4i, gOIhw16i16o, Ohwi16o, "
                          "aBcd16b, ...)"),),
    example="onednn:nChw16c",
    logical_dims="NCHW (NCDHW), weights OIHW (GOIHW)",
    chunk_name=lambda layout: "block" if layout.template.blocks else "row",
    facts=_facts,
    safe_classes=(MemoryFormat,),
))

__all__ = ["DATA_TYPES", "BoundMemoryFormat", "MemoryFormat"]
