"""Explicit channels-last requests on the device are refused like ``torch.empty``'s (issue 15).

``empty_like`` (and the ``*_like`` factories built on it) with ``memory_format=channels_last``
or ``channels_last_3d`` raise "only supports contiguous memory format" for a spyre result;
contiguous and preserve work, and a CPU result may still be channels-last.
``new_empty`` takes no ``memory_format`` in PyTorch: it raises the same TypeError as on the CPU.
"""

from __future__ import annotations

import pytest
import torch

import torch_layouts  # noqa: F401  (registers spyre)

CL = {4: torch.channels_last, 5: torch.channels_last_3d}
LIKE = [
    ("empty_like", torch.empty_like),
    ("zeros_like", torch.zeros_like),
    ("ones_like", torch.ones_like),
    ("rand_like", torch.rand_like),
    ("full_like", lambda t, **kw: torch.full_like(t, 2.0, **kw)),
]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("name, like", LIKE, ids=[n for n, _ in LIKE])
def test_like_factories_refuse_channels_last_on_spyre(shape, name, like):
    t = torch.zeros(shape, device="spyre")
    with pytest.raises(RuntimeError, match="Spyre backend only supports contiguous memory format"):
        like(t, memory_format=CL[len(shape)])
    for fmt in (torch.contiguous_format, torch.preserve_format):
        out = like(t, memory_format=fmt)
        assert out.device == t.device and out.shape == t.shape and out.is_contiguous()
    on_host = like(t, device="cpu", memory_format=CL[len(shape)])
    assert on_host.is_contiguous(memory_format=CL[len(shape)])


def test_preserve_keeps_a_channels_last_source():
    host = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    t = host.to("spyre")
    assert torch.empty_like(t).stride() == host.stride()


def test_empty_and_new_empty_match():
    with pytest.raises(RuntimeError, match="only supports contiguous memory format"):
        torch.empty((2, 3, 4, 5), device="spyre", memory_format=torch.channels_last)
    t = torch.zeros(2, 3, 4, 5, device="spyre")
    for x in (t, t.cpu()):  # PyTorch's new_empty has no memory_format, on any device
        with pytest.raises(TypeError, match="memory_format"):
            x.new_empty((2, 3, 4, 5), memory_format=torch.channels_last)
