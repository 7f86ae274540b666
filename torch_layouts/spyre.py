"""IBM Spyre's ``SpyreTensorLayout``: sticks of 128 bytes, tiled along the host dims.

Four constructor forms (docs/design.md section 3)::

    SpyreTensorLayout(size, dtype)                          # default layout
    SpyreTensorLayout(size, dtype, dim_order)               # Spyre's documented form
    SpyreTensorLayout(size, stride, dtype, dim_order=None)  # Torch-Spyre's form
    SpyreTensorLayout(device_size, stride_map, DataFormats) # explicit

For ``dim_order`` o the device dims are ``[o1, ..., o(r-1) as stick tiles, o0, stick]``;
``stride_map`` is filled right to left in the host strides given. A trailing ``-1``
in ``dim_order`` makes a sparse layout (one element per stick).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .core.dtypes import DataFormats, check_device_dtype, data_format, elems_per_stick
from .core.family import Family, register
from .core.layout import DeviceLayout, check_host

MAX_RANK = 6


class SpyreTensorLayout(DeviceLayout):
    """A Spyre device layout; ``str()`` prints exactly what Torch-Spyre prints."""

    __slots__ = ("dim_order",)

    dim_order: tuple[int, ...] | None

    def __init__(self, *args: object, pad_value: int | float | bool = 0) -> None:
        if len(args) == 3 and isinstance(args[2], DataFormats):
            device_size, stride_map, fmt = args
            _check_explicit(device_size, stride_map, fmt)
            super().__init__(device_size, stride_map, fmt.dtype, pad_value=pad_value)
            object.__setattr__(self, "dim_order", None)
            return
        if len(args) >= 2 and isinstance(args[1], (torch.dtype, DataFormats)) and len(args) <= 3:
            size, dtype = args[0], args[1]
            stride, dim_order = None, args[2] if len(args) == 3 else None
        elif 3 <= len(args) <= 4 and isinstance(args[2], (torch.dtype, DataFormats)):
            size, stride, dtype = args[0], args[1], args[2]
            dim_order = args[3] if len(args) == 4 else None
        else:
            raise TypeError(
                "SpyreTensorLayout takes (size, dtype[, dim_order]), (size, stride, dtype[, dim_order]) "
                f"or (device_size, stride_map, DataFormats); got {args!r}"
            )
        dtype = check_device_dtype(dtype)
        size, stride = check_host(size, stride)
        order = _check_dim_order(dim_order, len(size))
        device_size, stride_map = _default_dims(size, stride, order, elems_per_stick(dtype))
        super().__init__(device_size, stride_map, dtype, pad_value=pad_value, host_size=size, host_stride=stride)
        object.__setattr__(self, "dim_order", order)

    @property
    def device_dtype(self) -> DataFormats:
        return data_format(self.dtype)

    def elems_per_stick(self) -> int:
        return elems_per_stick(self.dtype)

    def for_host_dtype(self, dtype: torch.dtype) -> SpyreTensorLayout:
        """This layout holding host tensors of ``dtype``, which must have the same device format.

        Torch-Spyre's IEEE_INT32 layouts hold int64 tensors (the device format of int64):

        >>> SpyreTensorLayout([1, 32], [32, 1], DataFormats.IEEE_INT32).for_host_dtype(torch.int64).dtype
        torch.int64
        """
        dtype = check_device_dtype(dtype)
        if data_format(dtype) is not self.device_dtype:
            raise ValueError(f"{self} has device format {self.device_dtype!r}; {dtype} is held as "
                             f"{data_format(dtype)!r}")
        if dtype == self.dtype:
            return self
        new = object.__new__(type(self))
        DeviceLayout.__init__(new, self.device_size, self.stride_map, dtype, pad_value=self.pad_value,
                              host_size=self.host_size, host_stride=self.host_stride)
        object.__setattr__(new, "dim_order", self.dim_order)
        return new

    @property
    def sparse(self) -> bool:
        """One element per stick: the stick holds no host dim."""
        return self.stride_map[-1] == -1 and self.device_size[-1] > 1

    def __repr__(self) -> str:
        text = (
            f"SpyreTensorLayout(device_size={list(self.device_size)}, stride_map ={list(self.stride_map)}, "
            f"device_dtype={self.device_dtype!r}"
        )
        pad = "" if self.pad_value == 0 else f", pad_value={self.pad_value!r}"
        return text + pad + ")"

    __str__ = __repr__


def _check_explicit(device_size: object, stride_map: object, fmt: DataFormats) -> None:
    if not isinstance(device_size, Sequence) or not device_size:
        raise ValueError(f"device_size must be a non-empty sequence, got {device_size!r}")
    if len(device_size) > MAX_RANK + 3:  # sparse rank-7 host: its 7 dims, a synthetic dim, the stick
        raise ValueError(f"device_size {list(device_size)} has rank {len(device_size)}; a Spyre layout allows "
                         f"at most {MAX_RANK + 3} device dims")
    eps = fmt.elems_per_stick()
    if device_size[-1] != eps:
        raise ValueError(f"the stick dim device_size[-1]={device_size[-1]!r} must be {eps} "
                         f"(elements per 128-byte stick of {fmt!r})")


def _check_dim_order(dim_order: object, rank: int) -> tuple[int, ...]:
    if dim_order is None:
        order: tuple[int, ...] = tuple(range(rank))
    else:
        if isinstance(dim_order, (str, bytes)) or not isinstance(dim_order, Sequence):
            raise TypeError(f"dim_order must be a sequence of ints, got {dim_order!r}")
        if any(isinstance(d, bool) or not isinstance(d, int) for d in dim_order):
            raise TypeError(f"dim_order must hold ints, got {list(dim_order)}")
        order = tuple(dim_order)
    dims = order[:-1] if order and order[-1] == -1 else order
    if sorted(dims) != list(range(rank)):
        raise ValueError(
            f"dim_order {list(order)} must be a permutation of {list(range(rank))}, optionally followed by -1 "
            "(sparse)"
        )
    limit = MAX_RANK + 1 if len(order) == rank + 1 else MAX_RANK
    if rank > limit:
        raise ValueError(f"host rank {rank} exceeds the Spyre limit of {limit} for dim_order {list(order)} "
                         f"({MAX_RANK} dims, {MAX_RANK + 1} when sparse)")
    return order


def _default_dims(size: tuple[int, ...], stride: tuple[int, ...], order: tuple[int, ...], eps: int
                  ) -> tuple[list[int], list[int]]:
    """Device dims ``[o1..o(r-1) (stick tiles), o0, stick]`` and their host strides."""
    if not size:
        return [1, eps], [-1, -1]
    n = len(order)
    stick = order[-1]

    def extent(dim: int) -> int:
        if dim == -1:
            return 1
        return -(-size[dim] // eps) if dim == stick else size[dim]

    host_dims = list(order[1:]) + [order[0], stick]
    device_size = [extent(d) for d in host_dims[:-1]] + [eps]
    stride_map = [-1] * (n + 1)
    inner_stride: dict[int, int] = {}
    for j in reversed(range(n + 1)):  # right to left: each dim's finer part first
        d = host_dims[j]
        if d == -1 or size[d] == 1:
            continue
        stride_map[j] = inner_stride.get(d, stride[d])
        inner_stride[d] = stride_map[j] * device_size[j]
    return device_size, stride_map


# -- the family protocol (torch_layouts.core.family): the CLI's spyre specs and picture vocabulary --------
def parse_spec(notation: str, rank: int, dim_order: Sequence[int] | None = None) -> list[int] | None:
    """The dim_order of the CLI specs ``spyre``, ``spyre:sparse``, ``spyre:dim_order=1,0,2`` (None: default).

    ``dim_order`` (the ``--dim-order`` option) is merged in; ``parse_spec("sparse", 2)`` -> ``[0, 1, -1]``.
    """
    text = notation.replace(" ", "")
    if text in ("", "sparse"):
        order = None if dim_order is None else list(dim_order)
        if text == "sparse":
            order = order or list(range(rank))
            order = order if order[-1:] == [-1] else order + [-1]
        return order
    if text.startswith("dim_order="):
        try:
            order = [int(v) for v in text.removeprefix("dim_order=").split(",")]
        except ValueError:
            raise ValueError(f"bad spyre spec 'spyre:{notation}': dim_order takes comma-separated integers "
                             "like 1,0,2") from None
        if dim_order is not None and list(dim_order) != order:
            raise ValueError(f"spyre:{notation} and --dim-order {','.join(map(str, dim_order))} disagree")
        return order
    raise ValueError(f"bad spyre spec 'spyre:{notation}': expected spyre, spyre:sparse or spyre:dim_order=1,0,2")


def device_default_layout(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> DeviceLayout:
    """The device's default layout: Spyre's for ``dtype`` (the last dim in sticks), and
    above rank 6 (more dims than a Spyre layout holds) the host order, unpadded."""
    if len(size) <= MAX_RANK:
        return SpyreTensorLayout(tuple(size), tuple(stride), dtype)
    order = sorted(range(len(size)), key=lambda d: -stride[d])
    return DeviceLayout([size[d] for d in order], [stride[d] if size[d] != 1 else -1 for d in order], dtype,
                        host_size=size, host_stride=stride)


def _build(notation: str, host_size: tuple[int, ...], dtype: torch.dtype | None, pad_value: int | float,
           dim_order: Sequence[int] | None) -> SpyreTensorLayout:
    order = parse_spec(notation, len(host_size), dim_order)
    return SpyreTensorLayout(host_size, dtype or torch.float16, order, pad_value=pad_value)


def _facts(layout: SpyreTensorLayout) -> list[tuple[str, str]]:
    facts = [("elems/stick", str(layout.elems_per_stick())), ("sparse", str(layout.sparse))]
    return ([("dim_order", str(list(layout.dim_order)))] if layout.dim_order is not None else []) + facts


register(Family(
    name="spyre",
    layout_types=(SpyreTensorLayout,),
    build=_build,
    specs=(("spyre", "Spyre default layout (dim_order 0..r-1)"),
           ("spyre:dim_order=1,0,2", "a Spyre dim_order (same as --dim-order 1,0,2); a trailing -1 = sparse"),
           ("spyre:sparse", "one element per stick")),
    example="spyre",
    logical_dims="any",
    default_dtype="float16",
    notation_optional=True,
    options=("dim_order",),
    chunk_name=lambda layout: "stick",
    facts=_facts,
    safe_classes=(DataFormats,),
    device_default=device_default_layout,
))
