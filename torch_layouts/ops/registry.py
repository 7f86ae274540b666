"""Registration of device kernels at the PrivateUse1 (``spyre``) dispatch key.

Kernels are registered for ATen's own ops, so PyTorch's autograd formulas apply
above them, through the runtime's front (``csrc/kernel_front.cpp``): it calls the kernel
with the arguments ``torch.library`` would pass, counts each call in
``stats()["kernel_calls"]`` and replays the recipes kernels offer it (``elementwise``).
Every functional kernel also serves the op's ``out=`` overload (``register_out_variants``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .. import _C

_kernels: dict[str, Callable[..., Any]] = {}  # overload name -> the kernel's function
_fallback_outs: set[str] = set()  # out= overloads left to the CPU fallback (``leave_to_fallback``)


def register(name: str, fn: Callable[..., Any], counted: bool = True) -> None:
    """Register ``fn`` as the spyre kernel of ``aten::name`` (``"add.Tensor"``), once;
    ``counted=False`` leaves the counting to ``fn`` (for kernels that may delegate)."""
    if name in _kernels:
        return
    _C._register_kernel(name, fn, counted)
    _kernels[name] = fn


def leave_to_fallback(name: str) -> None:
    """Keep ``register_out_variants`` off the out= overload ``name`` (``"index.Tensor_out"``): its
    functional kernel calls it for the cases it leaves to the CPU fallback."""
    _fallback_outs.add(name)


def aten_overload(name: str) -> torch._ops.OpOverload:
    """The ATen overload named ``name`` (``"add.Tensor"``; ``"relu"``: the default overload)."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def out_overload(name: str) -> tuple[str, str] | None:
    """(overload, name of its out argument) of the ``out=`` form of functional ``aten::name``:
    the overload of the same op whose arguments are the functional's plus one out tensor."""
    functional = aten_overload(name)
    packet, schema = functional.overloadpacket, functional._schema
    if len(schema.returns) != 1:
        return None
    wanted = [(a.name, str(a.type)) for a in schema.arguments]
    for candidate in packet.overloads():
        arguments = getattr(packet, candidate)._schema.arguments
        outs = [a.name for a in arguments if a.is_out]
        if len(outs) == 1 and [(a.name, str(a.type)) for a in arguments if not a.is_out] == wanted:
            return f"{name.partition('.')[0]}.{candidate}", outs[0]
    return None


def write_out(result: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Copy a kernel's result into a user's ``out=`` tensor with ATen's rules: same device,
    a dtype the result casts to, resized (with ATen's warning unless it was empty)."""
    if out.device != result.device:
        raise RuntimeError(f"Expected out tensor to have device {result.device}, but got {out.device} instead")
    check_cast(result.dtype, out.dtype)
    if out.shape != result.shape:
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                          f"which does not match the required output shape {list(result.shape)}. This behavior "
                          "is deprecated, and in a future PyTorch release outputs will not be resized unless "
                          "they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
                          "inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=2)
        out.resize_(result.shape)
    return out.copy_(result)


def check_cast(result: torch.dtype, target: torch.dtype) -> None:
    """ATen's error when an op's result dtype may not be written into ``target``'s dtype."""
    if not torch.can_cast(result, target):
        raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the desired output type "
                           f"{scalar_type_name(target)}")


@functools.lru_cache(maxsize=None)
def scalar_type_name(dtype: torch.dtype) -> str:
    """ATen's name of a dtype, as its messages print it (Half, Float, Char, ...)."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def register_out_variants() -> None:
    """Serve each functional kernel's ``out=`` overload that has no kernel of its own: the
    functional kernel's result copied into ``out`` (device to device, ``write_out``)."""
    for name, fn in list(_kernels.items()):
        found = out_overload(name)
        if found is None or found[0] in _kernels or found[0] in _fallback_outs:
            continue
        overload, out_name = found

        def kernel(*args: Any, fn: Callable[..., Any] = fn, out_name: str = out_name, **kwargs: Any) -> Any:
            out = kwargs.pop(out_name)
            return write_out(fn(*args, **kwargs), out)

        register(overload, kernel)
