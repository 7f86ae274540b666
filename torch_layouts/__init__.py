"""torch_layouts: a PyTorch device (``spyre``) whose tensors live in tiled device layouts.

Importing it registers the device. Layout families: ``SpyreTensorLayout`` (IBM Spyre),
``htp`` (Qualcomm HTP), ``tensorrt`` (NVIDIA TensorRT), ``mace`` (XiaoMi MACE),
``onednn`` (oneDNN memory formats).
"""


def _autoload() -> None:
    """Entry point for ``torch.backends`` autoloading: importing this package does the work.

    Defined before ``import torch``: when this package is imported first, torch's own import
    calls it on the half-initialised package, and the import then carries on.
    """


import torch  # noqa: E402,F401  (loads libtorch before the extension that links against it)

from . import _C, htp, mace, onednn, tensorrt  # noqa: F401  (_C: the runtime, torch_layouts._C)
from .core import DataFormats, DeviceLayout, LayoutTemplate
from . import distributed as _distributed
from . import compile as _compile
from .compile import explain_compile
from .dma import DmaProgram, dma_program
from .ops import LayoutError, reset_stats, restickify, stats, strict_layouts, warn_on_fallback
from .runtime import init as _init
from .runtime.tensor_methods import device_memory, to_layout
from .spyre import SpyreTensorLayout

_init()
from . import custom_ops, model_utils  # noqa: E402,F401  (torch.ops.spyre; Torch-Spyre's model_utils)
from .runtime.torch_spyre_api import FallbackWarning  # noqa: E402
_compile.install()
_distributed.install()


__all__ = [
    "DataFormats",
    "DeviceLayout",
    "DmaProgram",
    "FallbackWarning",
    "LayoutError",
    "LayoutTemplate",
    "SpyreTensorLayout",
    "device_memory",
    "dma_program",
    "explain_compile",
    "htp",
    "mace",
    "onednn",
    "reset_stats",
    "restickify",
    "stats",
    "strict_layouts",
    "tensorrt",
    "to_layout",
    "warn_on_fallback",
]
