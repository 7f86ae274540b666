"""Layout rules of the ops: strict mode, ``LayoutError`` and ``restickify``.

Spyre's documented constraints ("Per-operation stick and padding constraints"): pointwise
operands and the result share the stick dim and layout; matmul wants A sticked on k,
B and C on n, and B's k padded to whole sticks with zeros. When an operand breaks a
rule, ops insert a device-side restickify (counted in ``stats()``), like the
compiler's stickification pass. Inside ``strict_layouts()`` they raise
``LayoutError`` instead, naming the op, every operand's layout and the fix.

What strict mode rejects is an operand whose own buffer is in an incompatible layout.
Partial views (slices that cannot be read in place) and operands of another element
size (a bool mask next to float16 data) are copied into a compatible layout in both
modes, and so is the primary operand an op computes in; the copies are counted as
restickifies, as are copies that move the stick (``x.t().contiguous()`` of a whole
``x`` keeps its buffer's arrangement; of a slice, it may not).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

from .. import _C
from ..core.layout import DeviceLayout, LayoutTemplate
from ..runtime.tensor_methods import to_layout
from . import operands
from .stats import count_restickify

_state = threading.local()


class LayoutError(ValueError):
    """An op's operands break its layout rules (raised inside ``strict_layouts()``)."""


def is_strict() -> bool:
    return getattr(_state, "strict", False)


@contextlib.contextmanager
def strict_layouts(enabled: bool = True) -> Iterator[None]:
    """Inside the block (this thread), ops raise ``LayoutError`` instead of restickifying."""
    if not isinstance(enabled, bool):
        raise TypeError(f"strict_layouts takes a bool, got {enabled!r}")
    previous = is_strict()
    _state.strict = enabled
    _C._set_strict(enabled)  # the runtime's front replays no recipe either
    try:
        yield
    finally:
        _state.strict = previous
        _C._set_strict(previous)


def describe(t: object) -> str:
    """An operand's layout, its stick dim and, for views, the view geometry."""
    if not isinstance(t, torch.Tensor):
        return repr(t)
    if t.device.type != "spyre":
        return f"a {t.device.type} tensor of size {list(t.shape)}"
    layout = t.device_tensor_layout()
    stick = operands.stick_dim(t)
    where = "sparse or unsticked" if stick is None else f"sticked on dim {stick}"
    text = f"{layout} ({where}, size {list(t.shape)})"
    info = operands.record_of(t)
    if info is not None and not operands.is_whole_dense(t, info):
        text += f", a view (stride {list(t.stride())}, offset {t.storage_offset()}) of a {list(info.base_size)} buffer"
    return text


def check(op: str, requirement: str, named: Sequence[tuple[str, object]], offender: str,
          target: DeviceLayout | str) -> None:
    """Raise ``LayoutError`` in strict mode; outside it the caller restickifies ``offender``."""
    if not is_strict():
        return
    listed = "; ".join(f"{name}: {describe(t)}" for name, t in named if isinstance(t, torch.Tensor))
    raise LayoutError(
        f"{op} needs {requirement}; {listed}. Fix: restickify {offender} first, e.g. "
        f"torch_layouts.restickify({offender}, {target}), or run outside torch_layouts.strict_layouts()"
    )


def restickify(t: torch.Tensor, layout: DeviceLayout | LayoutTemplate) -> torch.Tensor:
    """``t`` (a spyre tensor) in ``layout``, copied device to device; ``t`` itself when it
    already is. Any family's layout or template works; autograd flows through it (the
    gradient goes back in ``t``'s layout). Counted in ``stats()``."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"restickify takes a tensor, got {type(t).__name__}")
    if t.device.type != "spyre":
        raise ValueError(f"restickify needs a spyre tensor, got one on {t.device}; use "
                         "t.to('spyre', device_layout=layout) to move it")
    if not isinstance(layout, (DeviceLayout, LayoutTemplate)):
        raise TypeError(f"layout must be a device layout or a layout template, got {layout!r}")
    out = to_layout(t, layout)
    if out is not t:
        count_restickify(t.numel() * t.element_size())
    return out
