"""Device element types: which torch dtypes live on the device and how they stick.

A stick is 128 contiguous bytes of device memory; ``elems_per_stick`` is how many
elements of a dtype's device format fill one. The bytes stored are the host dtype's own;
the ``DataFormats`` names follow Torch-Spyre where it has one (docs/design.md section 3).
As in Torch-Spyre, int64 tensors take the device format IEEE_INT32 (32 per stick, values
must fit in int32; see ``int64_downcast``); the simulator keeps each in an 8-byte slot.
"""

from __future__ import annotations

import enum
import math

import torch

from .. import _C

BYTES_IN_STICK = 128


class DataFormats(enum.Enum):
    """Device data formats, one per supported torch dtype."""

    SEN169_FP16 = torch.float16
    BFLOAT16 = torch.bfloat16
    IEEE_FP32 = torch.float32
    SENINT8 = torch.int8
    UINT8 = torch.uint8
    SENINT16 = torch.int16
    IEEE_INT32 = torch.int32
    IEEE_INT64 = torch.int64
    BOOL = torch.bool
    SEN143_FP8 = torch.float8_e4m3fn
    SEN152_FP8 = torch.float8_e5m2

    @property
    def dtype(self) -> torch.dtype:
        return self.value

    def elems_per_stick(self) -> int:
        return elems_per_stick(self.value)

    def __repr__(self) -> str:
        return f"DataFormats.{self.name}"

    __str__ = __repr__


_FORMAT_OF = {fmt.value: fmt for fmt in DataFormats}
# The device format of each dtype: its own, but int64 lives on the device as IEEE_INT32 (Torch-Spyre).
_DEVICE_FORMAT = {**_FORMAT_OF, torch.int64: DataFormats.IEEE_INT32}

# Integer dtypes of each element width: copies move bits, never values.
BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class DeviceDtypeError(ValueError, RuntimeError):
    """A dtype the device cannot hold (float64, complex): a ValueError, and the RuntimeError Torch-Spyre raises."""


def check_device_dtype(dtype: object, what: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it can live on the device, else raise naming it."""
    if isinstance(dtype, DataFormats):
        return dtype.value
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{what} must be a torch.dtype or DataFormats, got {dtype!r}")
    if dtype not in _FORMAT_OF:
        supported = ", ".join(str(d).removeprefix("torch.") for d in _FORMAT_OF)
        raise DeviceDtypeError(
            f"{what} {dtype} is not a device type (float64 and complex types are host-only); "
            f"supported: {supported}"
        )
    return dtype


def data_format(dtype: torch.dtype) -> DataFormats:
    """The device data format of a torch dtype (Torch-Spyre's ``get_device_dtype``).

    >>> data_format(torch.int64)
    DataFormats.IEEE_INT32
    """
    return _DEVICE_FORMAT[check_device_dtype(dtype)]


def get_downcast_warning() -> bool:
    """Whether int64 device tensors warn that they hold int32 values (Torch-Spyre's name).

    Starts from the environment variable ``TORCH_SPYRE_DOWNCAST_WARN`` (0/false/off disable it).
    """
    return _C._get_downcast_warning()


def set_downcast_warning(enabled: bool) -> None:
    """Turn the int64 downcast warning on or off for this process (Torch-Spyre's name)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_downcast_warning takes a bool, got {enabled!r}")
    _C._set_downcast_warning(enabled)


def int64_downcast(dtype: torch.dtype) -> None:
    """For int64: warn, unless silenced, that the device holds int32 values ("does not support int64").

    Once per process, as Torch-Spyre's; every time under ``torch.set_warn_always(True)``.
    """
    if dtype == torch.int64:
        _C._warn_int64_downcast()


def elems_per_stick(dtype: torch.dtype) -> int:
    """Elements of ``dtype`` in one 128-byte stick of its device format (int64: 32, as IEEE_INT32)."""
    return BYTES_IN_STICK // data_format(dtype).value.itemsize


def check_pad_value(value: object, dtype: torch.dtype) -> int | float | bool:
    """Validate that ``value`` is exactly representable in ``dtype``."""
    if isinstance(value, bool) or dtype == torch.bool:
        if value not in (0, 1, True, False):
            raise ValueError(f"pad_value {value!r} is not a bool")
        return bool(value) if dtype == torch.bool else int(value)
    if not isinstance(value, (int, float)):
        raise TypeError(f"pad_value must be a number, got {value!r}")
    if dtype.is_floating_point:
        stored = torch.tensor(float(value), dtype=dtype).item()
        if stored != float(value) and not (math.isnan(stored) and math.isnan(value)):
            raise ValueError(f"pad_value {value!r} is not exactly representable in {dtype} (it would be {stored!r})")
        return float(value)
    info = torch.iinfo(dtype)
    if float(value) != int(value) or not info.min <= int(value) <= info.max:
        raise ValueError(f"pad_value {value!r} does not fit {dtype} [{info.min}, {info.max}]")
    return int(value)
