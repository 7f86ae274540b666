"""torch_layouts: a PyTorch device (``spyre``) whose tensors live in tiled device layouts.

Importing it registers the device. Layout families: ``SpyreTensorLayout`` (IBM Spyre),
``htp`` (Qualcomm HTP), ``tensorrt`` (NVIDIA TensorRT), ``mace`` (XiaoMi MACE).
"""


def _autoload() -> None:
    """Entry point for ``torch.backends`` autoloading: importing this package does the work.

    Defined before ``import torch``: when this package is imported first, torch's own import
    calls it on the half-initialised package, and the import then carries on.
    """


import torch  # noqa: E402,F401  (loads libtorch before the extension that links against it)

from . import _C, htp, mace, tensorrt  # noqa: F401  (_C: the runtime, torch_layouts._C)
from .core import DataFormats, DeviceLayout, LayoutTemplate
from .dma import DmaProgram, dma_program
from .ops import LayoutError, reset_stats, restickify, stats, strict_layouts, warn_on_fallback
from .runtime import init as _init
from .runtime.tensor_methods import device_memory, to_layout
from .spyre import SpyreTensorLayout

_init()


__all__ = [
    "DataFormats",
    "DeviceLayout",
    "DmaProgram",
    "LayoutError",
    "LayoutTemplate",
    "SpyreTensorLayout",
    "device_memory",
    "dma_program",
    "htp",
    "mace",
    "reset_stats",
    "restickify",
    "stats",
    "strict_layouts",
    "tensorrt",
    "to_layout",
    "warn_on_fallback",
]
