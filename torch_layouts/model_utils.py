"""Load a model's weights onto spyre in the layouts its ops want (Torch-Spyre's ``model_utils``).

* ``nn.Linear`` weights (out, in) stick along ``out_features``: ``dim_order=[1, 0]``.
* ``nn.Embedding`` tables (rows, D) take the indirect-access (gather) layout, device dims
  ``[rows, D / eps, eps]``: a row is whole sticks. When D is not a whole number of sticks
  it warns and the table takes the default layout.
* Every other parameter and buffer takes the default layout.

Shapes stay as they are; only the device layout changes::

    from torch_layouts.model_utils import load_model_to_spyre, patch_module_to_for_spyre
    load_model_to_spyre(model)            # or: patch_module_to_for_spyre(); model.to("spyre")
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .core.dtypes import check_device_dtype, data_format, elems_per_stick
from .runtime.tensor_methods import to_layout
from .spyre import SpyreTensorLayout

__all__ = ["load_model_to_spyre", "patch_module_to_for_spyre"]


def _host(t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    t = t.detach()
    return (t if dtype is None else t.to(dtype)).contiguous()


def _dma_to_spyre_default(t: torch.Tensor, target_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``t`` on spyre in the default layout (as ``target_dtype`` when given)."""
    t = _host(t, target_dtype)
    return to_layout(t, SpyreTensorLayout(tuple(t.shape), tuple(t.stride()), t.dtype))


def _dma_to_spyre_dim_order_swapped(weight: torch.Tensor, target_dtype: torch.dtype | None = None) -> torch.Tensor:
    """A 2-D Linear weight on spyre stuck along dim 0 (``dim_order=[1, 0]``); shape unchanged."""
    if weight.ndim != 2:
        raise AssertionError(f"dim_order=[1, 0] is for 2-D Linear weights; got shape {list(weight.shape)}")
    weight = _host(weight, target_dtype)
    layout = SpyreTensorLayout(tuple(weight.shape), tuple(weight.stride()), weight.dtype, [1, 0])
    return to_layout(weight, layout)


def _dma_to_spyre_indirect_access(weight: torch.Tensor, target_dtype: torch.dtype | None = None
                                  ) -> torch.Tensor | None:
    """A 2-D Embedding table on spyre in device dims ``[rows, D / eps, eps]``; None (with a
    warning) when D is not a whole number of sticks, for the caller to use the default layout."""
    if weight.ndim != 2:
        raise AssertionError(f"the indirect-access layout is for 2-D embedding tables; got shape "
                             f"{list(weight.shape)}")
    weight = _host(weight, target_dtype)
    rows, d = weight.shape
    eps = elems_per_stick(weight.dtype)
    if d % eps:
        warnings.warn(f"Embedding hidden dim {d} is not a multiple of the Spyre stick size {eps} for "
                      f"{weight.dtype}; falling back to the default layout (no gather optimization) for this "
                      "embedding table.", UserWarning, stacklevel=3)
        return None
    layout = SpyreTensorLayout([rows, d // eps, eps], [d, eps, 1], data_format(weight.dtype))
    return to_layout(weight, layout)


def _overrides_apply(module: nn.Module) -> bool:
    apply = module._apply
    return getattr(apply, "__func__", apply) is not nn.Module._apply


def _transfer(module: nn.Module, dtype: torch.dtype | None) -> None:
    """Move ``module``'s tensors to spyre; a module overriding ``_apply`` governs its own subtree."""
    if _overrides_apply(module):
        module._apply(lambda t: t if t is None or t.device.type == "spyre" else _dma_to_spyre_default(t, dtype))
        return
    for child in module.children():
        _transfer(child, dtype)
    for name, param in list(module._parameters.items()):
        if param is None or param.device.type == "spyre":
            continue
        moved = None
        if name == "weight" and param.ndim == 2 and isinstance(module, nn.Linear):
            moved = _dma_to_spyre_dim_order_swapped(param, dtype)
        elif name == "weight" and param.ndim == 2 and isinstance(module, nn.Embedding):
            moved = _dma_to_spyre_indirect_access(param, dtype)
        if moved is None:
            moved = _dma_to_spyre_default(param, dtype)
        module._parameters[name] = nn.Parameter(moved, requires_grad=param.requires_grad)
    for name, buf in list(module._buffers.items()):
        if buf is not None and buf.device.type != "spyre":
            module._buffers[name] = _dma_to_spyre_default(buf, dtype)


def load_model_to_spyre(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """Move ``model`` to spyre in place, each weight in the layout its op wants; returns ``model``.

    Tensors already on spyre are left alone (a second call is a no-op). ``dtype`` converts every
    tensor (a dtype the device cannot hold raises ValueError).

    >>> load_model_to_spyre(nn.Linear(64, 128, dtype=torch.float16)).weight.device_tensor_layout().device_size
    (2, 64, 64)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"load_model_to_spyre takes an nn.Module, got {type(model).__name__}")
    if dtype is not None:
        check_device_dtype(dtype)
    _transfer(model, dtype)
    return model


def _is_spyre(device: Any) -> bool:
    return isinstance(device, (str, torch.device)) and torch.device(device).type == "spyre"


def patch_module_to_for_spyre() -> None:
    """Make ``nn.Module.to("spyre")`` use ``load_model_to_spyre`` (idempotent); other targets are unchanged."""
    if getattr(nn.Module.to, "_spyre_patched", False):
        return
    original: Callable[..., Any] = nn.Module.to

    def to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        if not (any(_is_spyre(a) for a in args) or _is_spyre(kwargs.get("device"))):
            return original(self, *args, **kwargs)
        dtype = kwargs.get("dtype") or next((a for a in args if isinstance(a, torch.dtype)), None)
        return load_model_to_spyre(self, dtype=dtype)

    to._spyre_patched = True  # type: ignore[attr-defined]
    to.__doc__ = original.__doc__
    nn.Module.to = to  # type: ignore[method-assign]
