"""Registration of device kernels at the PrivateUse1 (``spyre``) dispatch key.

Kernels are registered for ATen's own ops, so PyTorch's autograd formulas apply
above them. Each call is counted in ``stats()["kernel_calls"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .stats import count_kernel

_LIB = torch.library.Library("aten", "IMPL")
_registered: set[str] = set()


def register(name: str, fn: Callable[..., Any], counted: bool = True) -> None:
    """Register ``fn`` as the spyre kernel of ``aten::name`` (``"add.Tensor"``), once;
    ``counted=False`` leaves the counting to ``fn`` (for kernels that may delegate)."""
    if name in _registered:
        return
    qualified = "aten::" + name

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if counted:
            count_kernel(qualified)
        return fn(*args, **kwargs)

    kernel.__name__ = f"spyre_{name.replace('.', '_')}"
    _LIB.impl(name, kernel, "PrivateUse1")
    _registered.add(name)


def kernel(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator form of ``register`` for one or more overload names."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            register(name, fn)
        return fn
    return wrap
