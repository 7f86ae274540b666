"""The layout core: one model of a device layout that every family compiles to."""

from .dtypes import BYTES_IN_STICK, DataFormats, elems_per_stick
from .layout import BoundLayout, DeviceLayout, LayoutTemplate, contiguous_strides

__all__ = ["BYTES_IN_STICK", "BoundLayout", "DataFormats", "DeviceLayout", "LayoutTemplate", "contiguous_strides",
           "elems_per_stick"]
