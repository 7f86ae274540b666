"""The core device layout: the one model every layout family compiles to.

A layout is a row-major array of device dims (``device_size``) and, for each, a
host stride (``stride_map``): ``host_offset = sum_j device_coord[j] * stride_map[j]``.
``-1`` marks a synthetic or size-1 dim with no host counterpart, ``0`` a broadcast
dim. Resolving a layout against a host tensor's size and strides tells which
device dims step along which host dim, and therefore which device positions hold
real elements and which are padding (docs/design.md section 4).
"""

from __future__ import annotations

import abc
import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import torch

from .dtypes import check_device_dtype, check_pad_value
from .regions import Box, box_volume, split_group

MAX_ELEMENTS = 2**62
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``size``."""
    strides = []
    running = 1
    for extent in reversed(size):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


def is_dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether the elements fill offsets [0, numel) once each (a permutation of row-major)."""
    expected = 1
    for s, n in sorted((s, n) for n, s in zip(size, stride) if n != 1):
        if s != expected:
            return False
        expected *= n
    return True


def _int_tuple(values: object, name: str, minimum: int) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | torch.Size):
        raise TypeError(f"{name} must be a sequence of ints, got {values!r}")
    out = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}[{i}] must be an int, got {value!r}")
        if value < minimum:
            raise ValueError(f"{name}[{i}]={value} is invalid (must be >= {minimum}) in {list(values)}")
        out.append(int(value))
    return tuple(out)


def check_host(host_size: object, host_stride: object | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate a host size and strides (default row-major)."""
    size = _int_tuple(host_size, "host_size", 0)
    stride = contiguous_strides(size) if host_stride is None else _int_tuple(host_stride, "host_stride", 0)
    if len(stride) != len(size):
        raise ValueError(f"host_stride {list(stride)} and host_size {list(size)} differ in length")
    if math.prod(size) >= MAX_ELEMENTS:
        raise ValueError(f"host_size {list(size)} has too many elements")
    return size, stride


def blocked(size: Sequence[int], stride: Sequence[int], outer_order: Sequence[int],
            blocks: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """``(device_size, stride_map)`` of a blocked layout (HTP chunks, oneDNN blocks).

    Outer device dims count whole blocks of the host dims in ``outer_order``; then one device
    dim per inner block ``(host dim, size)``, outermost first. A dim that a block does not
    reach (its step past the host extent) gets stride -1. Example: oneDNN's nChw16c over
    [1, 20, 2, 2] is ``blocked(size, stride, [0, 1, 2, 3], [(1, 16)])``: device_size
    ``[1, 2, 2, 2, 16]``.
    """
    per_dim = [math.prod(n for d, n in blocks if d == dim) for dim in range(len(size))]
    dims = [(d, per_dim[d], -(-size[d] // per_dim[d])) for d in outer_order]
    for i, (d, n) in enumerate(blocks):
        dims.append((d, math.prod(n2 for d2, n2 in blocks[i + 1:] if d2 == d), n))
    return [extent for _, _, extent in dims], [step * stride[d] if step < size[d] else -1 for d, step, _ in dims]


class DeviceLayout:
    """A concrete device layout: an immutable value with pure functions.

    ``host_size``/``host_stride`` record the host tensor a layout was made for (None
    for explicit layouts); they are the defaults of every function that needs a host,
    and are not part of the value (two layouts with the same device dims are equal).
    """

    __slots__ = ("device_size", "stride_map", "dtype", "pad_value", "host_size", "host_stride")

    device_size: tuple[int, ...]
    stride_map: tuple[int, ...]
    dtype: torch.dtype
    pad_value: int | float | bool
    host_size: tuple[int, ...] | None
    host_stride: tuple[int, ...] | None

    def __init__(
        self,
        device_size: Sequence[int],
        stride_map: Sequence[int],
        dtype: torch.dtype,
        *,
        pad_value: int | float | bool = 0,
        host_size: Sequence[int] | None = None,
        host_stride: Sequence[int] | None = None,
    ) -> None:
        device_size = _int_tuple(device_size, "device_size", 0)
        stride_map = _int_tuple(stride_map, "stride_map", -1)
        if any(m >= MAX_ELEMENTS for m in stride_map):
            raise ValueError(f"stride_map {list(stride_map)} has a stride beyond any host tensor (>= 2**62)")
        if len(device_size) != len(stride_map):
            raise ValueError(
                f"device_size {list(device_size)} and stride_map {list(stride_map)} differ in length"
            )
        if not device_size:
            raise ValueError("device_size must have at least one dim")
        if math.prod(device_size) >= MAX_ELEMENTS:
            raise ValueError(f"device_size {list(device_size)} has too many elements")
        dtype = check_device_dtype(dtype)
        host = None if host_size is None else check_host(host_size, host_stride)
        object.__setattr__(self, "device_size", device_size)
        object.__setattr__(self, "stride_map", stride_map)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "pad_value", check_pad_value(pad_value, dtype))
        object.__setattr__(self, "host_size", None if host is None else host[0])
        object.__setattr__(self, "host_stride", None if host is None else host[1])

    # -- value semantics -------------------------------------------------------
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (tried to set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable (tried to delete {name!r})")

    def _identity(self) -> tuple:
        """What makes two layouts equal; families extend it with their own notation."""
        return (self.device_size, self.stride_map, self.dtype, self.pad_value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceLayout):
            return NotImplemented
        return type(self) is type(other) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._identity()))

    def _state(self) -> dict[str, Any]:
        slots = (s for cls in type(self).__mro__ for s in getattr(cls, "__slots__", ()))
        return {name: getattr(self, name) for name in slots}

    def __reduce__(self) -> tuple:
        return (_restore, (type(self), self._state()))

    def __copy__(self) -> DeviceLayout:
        return self

    def __deepcopy__(self, memo: dict) -> DeviceLayout:
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(device_size={list(self.device_size)}, "
            f"stride_map={list(self.stride_map)}, dtype={self.dtype})"
        )

    # -- derived properties ----------------------------------------------------
    @property
    def device_rank(self) -> int:
        return len(self.device_size)

    @property
    def device_strides(self) -> tuple[int, ...]:
        return contiguous_strides(self.device_size)

    @property
    def device_numel(self) -> int:
        return math.prod(self.device_size)

    @property
    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.device_numel * self.element_size

    def size_bytes(self) -> int:
        """Bytes of device memory the layout occupies, padding included."""
        return self.nbytes

    def describe(self) -> str:
        """The layout in its family's own notation."""
        return str(self)

    # -- functions of a host tensor -------------------------------------------
    def resolve(self, host_size: Sequence[int] | None = None, host_stride: Sequence[int] | None = None) -> BoundLayout:
        """Resolve against a host tensor (default: the one the layout was made for)."""
        if host_size is None:
            if self.host_size is None:
                raise ValueError(f"{self!r} is not bound to a host size; pass host_size")
            host_size, host_stride = self.host_size, self.host_stride if host_stride is None else host_stride
        elif host_stride is None and self.host_size is not None and tuple(host_size) == self.host_size:
            host_stride = self.host_stride
        size, stride = check_host(host_size, host_stride)
        return _resolve(self, size, stride)

    def device_offset(self, index: Sequence[int], host_size: Sequence[int] | None = None,
                      host_stride: Sequence[int] | None = None) -> int:
        """Element offset in device memory of the host element at ``index``."""
        return self.resolve(host_size, host_stride).device_offset(index)

    def host_index(self, device_offset: int, host_size: Sequence[int] | None = None,
                   host_stride: Sequence[int] | None = None) -> tuple[int, ...] | None:
        """Host index held at a device element offset, or None for padding."""
        return self.resolve(host_size, host_stride).host_index(device_offset)

    def host_map(self, host_size: Sequence[int] | None = None, host_stride: Sequence[int] | None = None) -> torch.Tensor:
        """For each device position, the row-major host index it holds, or -1 for padding."""
        return self.resolve(host_size, host_stride).host_map()

    def real_mask(self, host_size: Sequence[int] | None = None, host_stride: Sequence[int] | None = None) -> torch.Tensor:
        """Boolean mask over device positions: True where a real element lives."""
        return self.host_map(host_size, host_stride) >= 0

    def for_host_dtype(self, dtype: torch.dtype) -> DeviceLayout:
        """This layout holding host tensors of ``dtype``: itself when it holds that dtype.

        A family whose device format holds several host dtypes (Spyre's IEEE_INT32 holds
        int64) overrides this; any other dtype raises ``ValueError``.
        """
        if dtype != self.dtype:
            raise ValueError(f"{self} holds {self.dtype}, not {dtype}")
        return self


class LayoutTemplate(abc.ABC):
    """A family's layout notation that becomes a DeviceLayout once bound to a host tensor.

    ``x.to("spyre", device_layout=template)`` binds it to ``x``'s size and dtype.
    """

    @abc.abstractmethod
    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> DeviceLayout:
        """The concrete layout for a row-major host tensor of this size and dtype."""


def _restore(cls: type, state: dict[str, Any]) -> DeviceLayout:
    obj = object.__new__(cls)
    for name, value in state.items():
        object.__setattr__(obj, name, value)
    return obj


class Digit(NamedTuple):
    """A device dim stepping along a host-dim group."""

    dim: int
    step: int
    size: int
    device_stride: int


class Group(NamedTuple):
    """Host dims that device dims step along together (contiguous in the host strides)."""

    host_dims: tuple[int, ...]  # outer to inner
    size: int  # product of their host sizes
    unit_stride: int  # host stride of the innermost host dim
    digits: tuple[Digit, ...]  # finest first
    real: tuple[Box, ...]
    pad: tuple[Box, ...]

    @property
    def nested(self) -> bool:
        """True when each digit spans exactly the next coarser one (a mixed radix)."""
        d = self.digits
        return d[0].step == 1 and all(a.step * a.size == b.step for a, b in zip(d, d[1:]))

    @property
    def radices(self) -> tuple[int, ...] | None:
        """Per digit (finest first), how many of its values are real before the next coarser
        digit steps: its size where the digits nest, fewer where it ends in padding (a host dim
        of 48 in sticks of 32 holding 16 each, digits (step 1, size 32) and (step 16, size 3):
        (16, 3)); None where the digits form no mixed radix (a step that does not divide the
        next, or a gap between a digit's values and the next step)."""
        return radices_of([(dig.step, dig.size) for dig in self.digits])


def radices_of(digits: Sequence[tuple[int, int]]) -> tuple[int, ...] | None:
    """``Group.radices`` of digits given as (step, size), finest first, steps counted from 1."""
    if digits[0][0] != 1 or any(b % a or b > a * n for (a, n), (b, _) in zip(digits, digits[1:])):
        return None
    return (*(b // a for (a, _), (b, _) in zip(digits, digits[1:])), digits[-1][1])


class Component(NamedTuple):
    """Device dims whose coordinates are constrained together, with their boxes."""

    dims: tuple[int, ...]
    real: tuple[Box, ...]
    pad: tuple[Box, ...]


class _Binding(NamedTuple):
    layout: DeviceLayout
    size: tuple[int, ...]
    stride: tuple[int, ...]


class BoundLayout(_Binding):
    """A layout bound to one host tensor's geometry: a frozen, hashable value.

    ``layout`` reads its ``stride_map`` in the host strides ``stride`` of a host tensor
    of ``size``. What binding derives, ``groups`` (host-dim groups with the device dims,
    or digits, stepping along them), ``synthetic`` (device dims with no host counterpart),
    ``broadcast`` (device dims holding copies) and ``empty``, is computed on first use,
    shared by equal values and stored on the instance; it raises ``ValueError`` when the
    layout cannot hold such a tensor (``DeviceLayout.resolve`` binds eagerly).

    >>> bound = BoundLayout(DeviceLayout([2, 4], [3, 1], torch.float16), (2, 3), (3, 1))
    >>> bound.device_offset((1, 2)), bound.host_index(7)
    (6, None)
    """

    def _derived(self, name: str) -> Any:
        self.__dict__.update(_resolve(self.layout, self.size, self.stride).__dict__)
        return self.__dict__[name]

    @functools.cached_property
    def groups(self) -> tuple[Group, ...]:
        """Host-dim groups with the device dims (digits) stepping along them."""
        return self._derived("groups")

    @functools.cached_property
    def synthetic(self) -> tuple[int, ...]:
        """Device dims with no host counterpart (only coordinate 0 is real)."""
        return self._derived("synthetic")

    @functools.cached_property
    def broadcast(self) -> tuple[int, ...]:
        """Device dims holding copies of the same elements (``stride_map`` 0)."""
        return self._derived("broadcast")

    @functools.cached_property
    def empty(self) -> bool:
        return self._derived("empty")

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of a buffer in this layout (its ``device_size``)."""
        return self.layout.device_size

    # -- regions ---------------------------------------------------------------
    def components(self, broadcast_full: bool = True) -> list[Component]:
        """Constrained device dims; broadcast dims span all copies or only the first."""
        size = self.layout.device_size
        comps = [Component(tuple(dig.dim for dig in g.digits), g.real, g.pad) for g in self.groups]
        for j in self.synthetic:
            comps.append(Component((j,), (((0, 1),),), (((1, size[j] - 1),),) if size[j] > 1 else ()))
        for j in self.broadcast:
            real = ((0, size[j]),) if broadcast_full else ((0, 1),)
            comps.append(Component((j,), (real,), ()))
        return comps

    def real_boxes(self, broadcast_full: bool = True) -> Iterator[Box]:
        """Disjoint device-space boxes covering every real position."""
        if self.empty or self.layout.device_numel == 0:
            return
        comps = self.components(broadcast_full)
        for choice in itertools.product(*(c.real for c in comps)):
            yield self._device_box(comps, choice)

    def pad_boxes(self) -> Iterator[Box]:
        """Disjoint device-space boxes covering every padding position."""
        size = self.layout.device_size
        if self.layout.device_numel == 0:
            return
        if self.empty:
            yield tuple((0, s) for s in size)
            return
        comps = self.components()
        for k, comp in enumerate(comps):
            before = [c.real for c in comps[:k]]
            after = [(tuple((0, size[j]) for j in c.dims),) for c in comps[k + 1:]]
            for choice in itertools.product(*before, comp.pad, *after):
                yield self._device_box(comps, choice)

    def _device_box(self, comps: list[Component], choice: tuple[Box, ...]) -> Box:
        box = [(0, 1)] * self.layout.device_rank
        for comp, part in zip(comps, choice):
            for dim, rng in zip(comp.dims, part):
                box[dim] = rng
        return tuple(box)

    @property
    def real_count(self) -> int:
        """Real device positions, counting broadcast copies once."""
        return sum(box_volume(b) for b in self.real_boxes(broadcast_full=False))

    # -- point functions -------------------------------------------------------
    def device_offset(self, index: Sequence[int]) -> int:
        index = tuple(index)
        if len(index) != len(self.size) or any(
            not isinstance(i, int) or not 0 <= i < s for i, s in zip(index, self.size)
        ):
            raise IndexError(f"host index {list(index)} is out of range for host size {list(self.size)}")
        offset = 0
        for group in self.groups:
            h = 0
            for d in group.host_dims:
                h = h * self.size[d] + index[d]
            for dig in reversed(group.digits):
                coord, h = divmod(h, dig.step)
                offset += coord * dig.device_stride
        return offset

    def host_index(self, device_offset: int) -> tuple[int, ...] | None:
        layout = self.layout
        if not isinstance(device_offset, int) or not 0 <= device_offset < layout.device_numel:
            raise IndexError(f"device offset {device_offset!r} is outside [0, {layout.device_numel})")
        coords = [(device_offset // st) % sz for st, sz in zip(layout.device_strides, layout.device_size)]
        if self.empty or any(coords[j] for j in self.synthetic):
            return None
        index = [0] * len(self.size)
        for group in self.groups:
            partial = 0
            for i, dig in enumerate(group.digits):
                partial += coords[dig.dim] * dig.step
                bound = group.digits[i + 1].step if i + 1 < len(group.digits) else group.size
                if partial >= bound:
                    return None
            for d in reversed(group.host_dims):
                partial, index[d] = divmod(partial, self.size[d])
        return tuple(index)

    # -- vectorised functions ---------------------------------------------------
    def host_map(self) -> torch.Tensor:
        """Row-major host index held at every device position, -1 for padding."""
        layout = self.layout
        pos = torch.arange(layout.device_numel, dtype=torch.int64)
        if self.empty:
            return torch.full_like(pos, -1)
        coords = {j: (pos // st) % sz for j, (st, sz) in enumerate(zip(layout.device_strides, layout.device_size))}
        real = torch.ones_like(pos, dtype=torch.bool)
        for j in self.synthetic:
            real &= coords[j] == 0
        host_linear = torch.zeros_like(pos)
        row_major = contiguous_strides(self.size)
        for group in self.groups:
            partial = torch.zeros_like(pos)
            for i, dig in enumerate(group.digits):
                bound = group.digits[i + 1].step if i + 1 < len(group.digits) else group.size
                # coord * step alone must stay below the bound; testing that first keeps int64 from overflowing
                fits = coords[dig.dim] <= (bound - 1) // dig.step
                partial += torch.where(fits, coords[dig.dim], 0) * dig.step
                real &= fits & (partial < bound)
            for d in reversed(group.host_dims):
                host_linear += (partial % self.size[d]) * row_major[d]
                partial = partial // self.size[d]
        return torch.where(real, host_linear, -1)

    def device_offsets(self, host_offsets: torch.Tensor) -> torch.Tensor:
        """Device offsets of host elements given by their offsets under ``host_stride``."""
        rest = host_offsets.to(torch.int64)
        coord: dict[int, torch.Tensor] = {}
        for d in sorted(range(len(self.size)), key=lambda d: -self.stride[d]):
            if self.size[d] > 1 and self.stride[d] > 0:
                coord[d] = rest // self.stride[d]
                rest = rest - coord[d] * self.stride[d]
        out = torch.zeros_like(rest)
        for group in self.groups:
            h = torch.zeros_like(rest)
            for d in group.host_dims:
                h = h * self.size[d] + coord[d]
            for dig in reversed(group.digits):
                c = h // dig.step
                h = h - c * dig.step
                out += c * dig.device_stride
        return out


def binding_key(layout: DeviceLayout) -> tuple:
    """A key equal only for interchangeable layouts: every attribute, the host binding included.

    ``==`` ignores ``host_size``/``host_stride`` (and attributes a family leaves out of its
    identity, such as a Spyre layout's ``dim_order``); a cache handing back a layout, or
    anything that depends on its binding, keys on this so that each caller gets its own.
    The pad value's ``repr`` tells ``-0.0`` from ``0.0``, which ``==`` does not.
    """
    return type(layout), _slot_getter(type(layout))(layout), repr(layout.pad_value)


@functools.cache
def _slot_getter(cls: type) -> Callable[[DeviceLayout], tuple]:
    return operator.attrgetter(*(s for c in cls.__mro__ for s in getattr(c, "__slots__", ())))


def cache_by_binding(maxsize: int) -> Callable[[_Fn], _Fn]:
    """``functools.lru_cache`` whose key adds each layout argument's ``binding_key``."""
    def decorate(fn: _Fn) -> _Fn:
        @functools.lru_cache(maxsize=maxsize)
        def cached(keys: tuple, *args: Any) -> Any:
            return fn(*args)

        @functools.wraps(fn)
        def wrapper(*args: Any) -> Any:
            return cached(tuple(binding_key(a) for a in args if isinstance(a, DeviceLayout)), *args)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]
    return decorate


_DERIVED = ("groups", "synthetic", "broadcast", "empty")


@cache_by_binding(maxsize=4096)
def _resolve(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...]) -> BoundLayout:
    bound = BoundLayout(layout, size, stride)
    bound.__dict__.update(zip(_DERIVED, (*_bind(layout, size, stride), math.prod(size) == 0)))
    return bound


def _bind(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...]
          ) -> tuple[tuple[Group, ...], tuple[int, ...], tuple[int, ...]]:
    """Groups, synthetic and broadcast device dims of ``layout`` over a host tensor (section 4)."""
    dsize, smap, dstride = layout.device_size, layout.stride_map, layout.device_strides
    if math.prod(size) == 0:
        return (), (), ()
    if layout.device_numel == 0:
        raise ValueError(f"{layout!r} has no device positions, so it cannot hold a host tensor of size "
                         f"{list(size)} ({math.prod(size)} elements)")
    eligible = [d for d in range(len(size)) if size[d] > 1 and stride[d] > 0]
    assigned: dict[int, list[int]] = {d: [] for d in eligible}
    synthetic, broadcast = [], []
    for j, (extent, m) in enumerate(zip(dsize, smap)):
        if extent == 1:
            continue
        if m == -1:
            synthetic.append(j)
        elif m == 0:
            broadcast.append(j)
        else:
            candidates = [d for d in eligible if m % stride[d] == 0]
            if not candidates:
                raise ValueError(
                    f"stride_map[{j}]={m} of {layout!r} does not step along any host dim of "
                    f"size {list(size)} with strides {list(stride)}"
                )
            assigned[max(candidates, key=lambda d: (stride[d], d))].append(j)

    # Host dims no device dim steps along fold into their inner contiguous neighbour.
    member_lists: list[list[int]] = []
    inner = None
    for d in sorted(eligible, key=lambda d: (stride[d], d)):
        if assigned[d]:
            member_lists.append([d])
        elif inner is not None and stride[d] == stride[inner] * size[inner] and member_lists:
            member_lists[-1].append(d)
        else:
            raise ValueError(
                f"{layout!r} has no device dim stepping along host dim {d} (size {size[d]}, "
                f"stride {stride[d]}) of host size {list(size)} with strides {list(stride)}"
            )
        inner = d

    groups = []
    for members in member_lists:
        host_dims = tuple(reversed(members))
        unit = stride[members[0]]
        js = sorted((j for d in members for j in assigned[d]), key=lambda j: (smap[j] // unit, -j))
        digits = tuple(Digit(j, smap[j] // unit, dsize[j], dstride[j]) for j in js)
        extent = math.prod(size[d] for d in members)
        real, pad = split_group([dg.step for dg in digits], [dg.size for dg in digits], extent)
        held = sum(box_volume(b) for b in real)
        if held != extent:
            raise ValueError(
                f"{layout!r} cannot hold a host tensor of size {list(size)}: only {held} of the "
                f"{extent} elements along host dim(s) {list(host_dims)} have a device position"
            )
        groups.append(Group(host_dims, extent, unit, digits, tuple(real), tuple(pad)))
    return tuple(groups), tuple(synthetic), tuple(broadcast)
