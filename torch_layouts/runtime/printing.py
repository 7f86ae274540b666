"""``repr``/``print`` of spyre tensors: the values are formatted from a host copy.

PyTorch's formatter converts floating tensors to float64 on their own device, and
float64 is not a device type; formatting a host copy avoids that and any device work.
As in Torch-Spyre, the device comes last:
``tensor([1., 2.], dtype=torch.float16, device='spyre:0')``.
"""

from __future__ import annotations

import re

import torch
from torch import _tensor_str

_DEVICE = re.compile(r", device='spyre:\d+'")

_original_str = _tensor_str._str


def _has_values(t: torch.Tensor) -> bool:
    """A spyre tensor with data to format (not a fake tensor of a trace, nor a functorch wrapper)."""
    from torch._subclasses.fake_tensor import is_fake

    tracing = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None
    return (t.device.type == "spyre" and t.numel() > 0 and not torch._C._functorch.is_functorch_wrapped_tensor(t)
            and not is_fake(t) and not tracing)


def _str(self: torch.Tensor, *, tensor_contents: str | None = None) -> str:
    if tensor_contents is None and _has_values(self):
        plain = type(self) in (torch.Tensor, torch.nn.Parameter)
        indent = len("tensor(" if plain else f"{type(self).__name__}(")
        with torch.no_grad():
            tensor_contents = _tensor_str._tensor_str(self.detach().cpu(), indent)
    text = _original_str(self, tensor_contents=tensor_contents)
    if self.device.type != "spyre":
        return text
    found = _DEVICE.search(text)
    if found is None or not text.endswith(")"):
        return text
    return text[:found.start()] + text[found.end():-1] + found.group(0) + ")"


def install() -> None:
    """Route the formatting of spyre tensors' values through a host copy."""
    _tensor_str._str = _str
