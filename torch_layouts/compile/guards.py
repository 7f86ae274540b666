"""A Dynamo guard on every spyre input's device layout.

Dynamo's tensor guard checks dtype, device, sizes and strides, not the layout a spyre
tensor's bytes are in, yet the compiled plan depends on it. Dynamo has no hook for
extra per-tensor guards, so ``install`` wraps ``GuardBuilder.TENSOR_MATCH`` (as
Torch-Spyre does): after Dynamo's own checks it adds a guard
``x.device_tensor_layout() == <layout at compile time>`` for spyre tensors. A call with
another layout recompiles once; the same layout coming back hits the cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

_installed = False


def _wrap(tensor_match: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(tensor_match)
    def TENSOR_MATCH(self: Any, guard: Any, value: Any | None = None) -> None:
        tensor_match(self, guard, value)
        from torch._dynamo.guards import get_verbose_code_parts
        from torch._subclasses import FakeTensor

        real = value() if callable(value) and not isinstance(value, torch.Tensor) else value
        real = real if real is not None else self.get(guard)
        if not isinstance(real, torch.Tensor) or isinstance(real, FakeTensor) or real.device.type != "spyre":
            return
        expected = real.device_tensor_layout()

        def same_layout(x: torch.Tensor) -> bool:
            return x.device_tensor_layout() == expected

        code = f"{self.arg_ref(guard)}.device_tensor_layout() == {expected!r}"
        self.get_guard_manager(guard).add_lambda_guard(
            same_layout, get_verbose_code_parts(code, guard), guard.user_stack)

    TENSOR_MATCH.spyre_layout_guard = True  # type: ignore[attr-defined]
    return TENSOR_MATCH


def install() -> None:
    """Add the layout guard to Dynamo's tensor guard (once)."""
    global _installed
    if _installed:
        return
    from torch._dynamo.guards import GuardBuilder

    if not getattr(GuardBuilder.TENSOR_MATCH, "spyre_layout_guard", False):
        GuardBuilder.TENSOR_MATCH = _wrap(GuardBuilder.TENSOR_MATCH)
    _installed = True
