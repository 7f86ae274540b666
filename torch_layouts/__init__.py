"""torch_layouts: a simulated accelerator device whose tensors live in tiled device layouts."""

from .core import DataFormats, DeviceLayout
from .dma import DmaProgram, dma_program
from .spyre import SpyreTensorLayout

__all__ = ["DataFormats", "DeviceLayout", "DmaProgram", "SpyreTensorLayout", "dma_program"]
