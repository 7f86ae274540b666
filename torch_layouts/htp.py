"""Qualcomm QNN HTP's ``ChunkedMemoryLayout<rank, dim,size, ...>``: tensors cut into chunks.

Notation (HTP's documentation, docs/design.md section 8): pairs with size 0 list every dim once, in chunk order,
slowest first; pairs with size > 0 describe the inside of a chunk, first listed
outermost, and a dim may be split more than once (``2,8 ... 2,4`` is 8 groups of 4).
Each dim ``d`` has chunk size ``C_d`` = product of its sized pairs (1 if none) and
is padded up to a multiple of it. Logical dims are HTP's: activations NHWC, conv
weights (filter height, filter width, in channels, out channels).

Mapping to the core (row-major host strides ``h_d``, host sizes ``S_d``):

* one device dim per zero-size pair, in chunk order: size ``ceil(S_d / C_d)`` (the
  chunks along ``d``), step ``C_d``;
* then one device dim per sized pair, in listed order: size = the pair's size, step
  = product of the sizes of the pairs of the same dim listed after it;
* ``stride_map = step * h_d``, or ``-1`` when ``step >= S_d``: only coordinate 0 of
  such a dim can hold a real element (this covers every dim stepping along a size-1
  host dim, and keeps a large step from being read as a coarser host dim's stride).

``ChunkedMemoryLayout`` is a template; ``bind(host_size, dtype)`` gives the concrete
``BoundChunkedLayout``, whose offsets, inverse and padding are the core's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .core.family import Family, register
from .core.layout import DeviceLayout, LayoutTemplate, blocked, check_host

Pair = tuple[int, int]


def _check_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return value


@dataclass(frozen=True, init=False, repr=False)
class ChunkedMemoryLayout(LayoutTemplate):
    """``ChunkedMemoryLayout(rank, d0,s0, d1,s1, ..., pad_value=0)``: a layout template."""

    rank: int
    pairs: tuple[Pair, ...]
    pad_value: int | float | bool

    def __init__(self, rank: int, *pairs: int, pad_value: int | float | bool = 0) -> None:
        if _check_int(rank, "rank") < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        values = [_check_int(v, f"pair value {i}") for i, v in enumerate(pairs)]
        if len(values) % 2:
            raise ValueError(f"pairs {values} have an odd number of values ({len(values)}); "
                             "they must come as dim,size pairs")
        grouped = tuple(zip(values[::2], values[1::2]))
        for dim, size in grouped:
            if not 0 <= dim < rank:
                raise ValueError(f"dim {dim} of pair ({dim},{size}) is out of range for rank {rank}")
            if size < 0:
                raise ValueError(f"pair ({dim},{size}) has a negative size {size}; a chunk size must be > 0 "
                                 "(size 0 lists the dim in the chunk order)")
        order = [dim for dim, size in grouped if size == 0]
        for dim in range(rank):
            if order.count(dim) != 1:
                problem = "is missing from" if dim not in order else "is listed twice in"
                raise ValueError(f"dim {dim} {problem} the chunk order (the size-0 pairs {order}) "
                                 f"of a rank-{rank} layout; each dim must appear there exactly once")
        if not isinstance(pad_value, (int, float)):
            raise TypeError(f"pad_value must be a number or bool, got {pad_value!r}")
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "pairs", grouped)
        object.__setattr__(self, "pad_value", pad_value)

    @property
    def chunk_order(self) -> tuple[int, ...]:
        """Dims in the order their chunks are laid out, slowest first."""
        return tuple(dim for dim, size in self.pairs if size == 0)

    @property
    def chunk_pairs(self) -> tuple[Pair, ...]:
        """The sized pairs: the inside of a chunk, outermost first."""
        return tuple(pair for pair in self.pairs if pair[1] > 0)

    @property
    def chunk_size(self) -> tuple[int, ...]:
        """Extent of a chunk along each dim (product of the dim's sized pairs)."""
        return tuple(math.prod(s for d, s in self.chunk_pairs if d == dim) for dim in range(self.rank))

    def notation(self) -> str:
        """HTP's notation, e.g. ``ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0>``."""
        return f"ChunkedMemoryLayout<{', '.join([str(self.rank)] + [f'{d},{s}' for d, s in self.pairs])}>"

    def _pad_suffix(self) -> str:
        return "" if self.pad_value == 0 else f", pad_value={self.pad_value!r}"

    def __str__(self) -> str:
        return self.notation() + self._pad_suffix()

    def __repr__(self) -> str:
        args = ", ".join([str(self.rank)] + [f"{d},{s}" for d, s in self.pairs])
        return f"htp.ChunkedMemoryLayout({args}{self._pad_suffix()})"

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> BoundChunkedLayout:
        return BoundChunkedLayout(self, host_size, dtype)


class BoundChunkedLayout(DeviceLayout):
    """A ``ChunkedMemoryLayout`` bound to a row-major host size and dtype."""

    __slots__ = ("template",)

    template: ChunkedMemoryLayout

    def __init__(self, template: ChunkedMemoryLayout, host_size: Sequence[int], dtype: torch.dtype) -> None:
        if not isinstance(template, ChunkedMemoryLayout):
            raise TypeError(f"template must be a ChunkedMemoryLayout, got {template!r}")
        size, stride = check_host(host_size, None)
        if len(size) != template.rank:
            raise ValueError(f"host_size {list(size)} has rank {len(size)}, but {template.notation()} "
                             f"has rank {template.rank}")
        device_size, stride_map = blocked(size, stride, template.chunk_order, template.chunk_pairs)
        super().__init__(device_size, stride_map, dtype, pad_value=template.pad_value, host_size=size)
        object.__setattr__(self, "template", template)

    def _identity(self) -> tuple:
        return super()._identity() + (self.template, self.host_size)

    @property
    def chunk_size(self) -> tuple[int, ...]:
        return self.template.chunk_size

    @property
    def chunk_grid(self) -> tuple[int, ...]:
        """Number of chunks along each dim."""
        return tuple(-(-s // c) for s, c in zip(self.host_size, self.chunk_size))

    @property
    def num_chunks(self) -> int:
        return math.prod(self.chunk_grid)

    @property
    def padded_size(self) -> tuple[int, ...]:
        """The host size padded up to whole chunks."""
        return tuple(g * c for g, c in zip(self.chunk_grid, self.chunk_size))

    def get_raw(self, index: Sequence[int]) -> int:
        """Element offset in device memory of the host element at ``index`` (HTP's ``get_raw``)."""
        return self.device_offset(index)

    def __str__(self) -> str:
        return (f"{self.template.notation()} bound to {list(self.host_size)}, padded {list(self.padded_size)}"
                f"{self.template._pad_suffix()}")


def FlatMemoryLayout(rank: int) -> ChunkedMemoryLayout:  # noqa: N802 - HTP's name
    """``FlatMemoryLayout<rank>``: row-major, chunks of one element."""
    _check_int(rank, "rank")
    return ChunkedMemoryLayout(rank, *(v for dim in range(rank) for v in (dim, 0)))


R4FlatMemoryLayout = FlatMemoryLayout(4)
R4NCHWMemoryLayout = ChunkedMemoryLayout(4, 0,0, 3,0, 1,0, 2,0)  # fmt: skip
R4Depth32MemoryLayout = ChunkedMemoryLayout(4, 0,0, 1,0, 3,0, 2,0, 2,4, 3,32)  # fmt: skip
R4CroutonLayout = ChunkedMemoryLayout(4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32)  # fmt: skip
R4Crouton4x1Layout = ChunkedMemoryLayout(4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,2, 3,32, 2,4)  # fmt: skip
R4Crouton2x2Layout = ChunkedMemoryLayout(4, 0,0, 1,0, 2,0, 3,0, 1,4, 2,4, 3,32, 1,2, 2,2)  # fmt: skip
R4Crouton2Layout = ChunkedMemoryLayout(4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,2, 3,32, 2,2)  # fmt: skip
R4ConvWeightLayout = ChunkedMemoryLayout(4, 3,0, 2,0, 0,0, 1,0, 2,8, 3,32, 2,4)  # fmt: skip

TABLE: dict[str, ChunkedMemoryLayout] = {
    "R4FlatMemoryLayout": R4FlatMemoryLayout,
    "R4NCHWMemoryLayout": R4NCHWMemoryLayout,
    "R4Depth32MemoryLayout": R4Depth32MemoryLayout,
    "R4CroutonLayout": R4CroutonLayout,
    "R4Crouton4x1Layout": R4Crouton4x1Layout,
    "R4Crouton2x2Layout": R4Crouton2x2Layout,
    "R4Crouton2Layout": R4Crouton2Layout,
    "R4ConvWeightLayout": R4ConvWeightLayout,
}
"""HTP's table of named layouts (and the convolution weight layout)."""

NAMED: dict[str, ChunkedMemoryLayout] = {
    "flat": R4FlatMemoryLayout,
    "nchw": R4NCHWMemoryLayout,
    "depth32": R4Depth32MemoryLayout,
    "d32": R4Depth32MemoryLayout,
    "crouton": R4CroutonLayout,
    "crouton4x1": R4Crouton4x1Layout,
    "crouton2x2": R4Crouton2x2Layout,
    "crouton2": R4Crouton2Layout,
    "convweight": R4ConvWeightLayout,
}
"""Short names for command lines."""

_LOOKUP = {**NAMED, **{name.lower(): t for name, t in TABLE.items()}}
_NOTATION = re.compile(r"(?:(ChunkedMemoryLayout|FlatMemoryLayout)\s*<(.*)>|([-\d\s,]*))", re.DOTALL)


def parse(spec: str) -> ChunkedMemoryLayout:
    """A template from a short name (``NAMED``), a ``TABLE`` name, or a pair list.

    Pair lists: ``"4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32"``, optionally wrapped as
    ``ChunkedMemoryLayout<...>``; also ``FlatMemoryLayout<rank>``.
    """
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, got {spec!r}")
    text = spec.strip()
    if text.lower() in _LOOKUP:
        return _LOOKUP[text.lower()]
    match = _NOTATION.fullmatch(text)
    try:
        if match is None:
            raise ValueError("not a layout name or a pair list")
        values = [int(v) for v in (match[2] if match[1] else match[3]).split(",")]
        if match[1] == "FlatMemoryLayout":
            if len(values) != 1:
                raise ValueError("FlatMemoryLayout takes exactly one value, the rank")
            return FlatMemoryLayout(values[0])
        return ChunkedMemoryLayout(*values)
    except ValueError as err:
        raise ValueError(
            f"bad HTP layout spec {spec!r}: {err}; use one of {sorted(NAMED)} or a pair list like "
            "'4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32'"
        ) from err


def _build(notation: str, host_size: tuple[int, ...], dtype: torch.dtype | None, pad_value: int | float,
           dim_order: Sequence[int] | None) -> BoundChunkedLayout:
    """The CLI's ``htp:NOTATION``: a named layout or pair list bound to ``host_size`` (float32 by default)."""
    template = parse(notation)
    if pad_value != 0:
        template = ChunkedMemoryLayout(template.rank, *(v for pair in template.pairs for v in pair),
                                       pad_value=pad_value)
    return template.bind(host_size, dtype or torch.float32)


def _facts(layout: BoundChunkedLayout) -> list[tuple[str, str]]:
    return [("chunk size", str(list(layout.chunk_size))), ("chunk grid", str(list(layout.chunk_grid))),
            ("padded host", str(list(layout.padded_size)))]


register(Family(
    name="htp",
    layout_types=(BoundChunkedLayout,),
    build=_build,
    specs=(("htp:NAME", "crouton, crouton4x1, crouton2x2, crouton2, flat, nchw, d32, convweight, "
                        "or a table name such as R4CroutonLayout"),
           ("htp:4,0,0,1,0,2,0,3,0,1,8,2,8,3,32", "an HTP ChunkedMemoryLayout pair list (rank, then dim,size "
                                                  "pairs)")),
    example="htp:crouton",
    logical_dims="NHWC (conv weights HWIO)",
    chunk_name=lambda layout: "chunk row",
    facts=_facts,
    safe_classes=(ChunkedMemoryLayout,),
))

__all__ = [
    "NAMED", "TABLE", "BoundChunkedLayout", "ChunkedMemoryLayout", "FlatMemoryLayout", "R4ConvWeightLayout",
    "R4Crouton2Layout", "R4Crouton2x2Layout", "R4Crouton4x1Layout", "R4CroutonLayout", "R4Depth32MemoryLayout",
    "R4FlatMemoryLayout", "R4NCHWMemoryLayout", "parse",
]
