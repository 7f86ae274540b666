"""CPU kernels' results adopted as device buffers (``kernel_front.cpp``'s functional replays,
``device_memory.cpp``'s ``adopt_host_storage``): where a replayed functional compute returns a
result whose device buffer is its row-major bytes (a 1-D tensor, oneDNN's LSTM workspace), the
compute runs with CPU allocations shaped as device blocks, and the returned bytes become the
device tensor with no copy. The results stay the CPU's bits, the bytes are counted as device
memory while they live and come back when freed, and CPU allocations outside those computes are
PyTorch's own."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import torch_layouts
from torch_layouts.ops import lstm_layers

REPO = Path(__file__).resolve().parents[1]


def _step(module: nn.LSTM, x: torch.Tensor) -> list[torch.Tensor]:
    """A training forward and backward: the output, final states and every gradient."""
    x = x.detach().requires_grad_()
    out, (h, c) = module(x)
    (out.square().sum() + h.sum() + c.sum()).backward()
    grads = [x.grad] + [p.grad for p in module.parameters()]
    module.zero_grad(set_to_none=True)
    return [out, h, c, *grads]


def _workspace_bytes(module: nn.LSTM, x: torch.Tensor) -> int:
    """The bytes of the workspace the CPU's oneDNN layer returns for this call in grad mode."""
    p = list(module._flat_weights)
    values = [x.transpose(0, 1) if module.batch_first else x, *p,
              torch.zeros(x.shape[0 if module.batch_first else 1], module.hidden_size),
              torch.zeros(x.shape[0 if module.batch_first else 1], module.hidden_size),
              False, [], lstm_layers.LSTM_MODE, module.hidden_size, 1, True, False, module.batch_first, True]
    return lstm_layers._workspace_bytes(values, True)


def _adopting_lstm(seed: int) -> tuple[nn.LSTM, torch.Tensor, int]:
    """A device LSTM (64 -> 128) and a 32 x 16 x 64 input after three training steps (its layer
    replayed, its workspace adopted), and the workspace's bytes."""
    torch.manual_seed(seed)
    cpu, x = nn.LSTM(64, 128), torch.randn(32, 16, 64)
    workspace = _workspace_bytes(cpu, x)
    module, x = cpu.to("spyre"), x.to("spyre")
    for _ in range(3):
        _step(module, x)
    return module, x, workspace


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("hidden", [32, 40, 128])
def test_the_lstm_workspace_is_adopted_with_the_cpus_bits(batch_first, hidden):
    """A training step's LSTM layer replayed: its workspace (oneDNN's opaque bytes, which the
    backward reads) and the bias gradients are adopted, not copied; every output and gradient
    is the CPU's bits on each of three calls."""
    torch.manual_seed(hidden)
    cpu = nn.LSTM(24, hidden, batch_first=batch_first)
    device = copy.deepcopy(cpu).to("spyre")
    x = torch.randn(6, 5, 24)
    want = _step(cpu, x)
    workspace = _workspace_bytes(cpu, x)
    for call in range(3):
        torch_layouts.reset_stats()
        got = _step(device, x.to("spyre"))
        adopted = torch_layouts.stats()["adopted_bytes"]
        for w, g in zip(want, got):
            assert torch.equal(g.cpu(), w), call
        if call > 0:  # replayed by the runtime's front (the first call runs the Python kernels)
            assert adopted >= workspace + 2 * 4 * 4 * hidden, (call, adopted, workspace)


def test_adopted_bytes_are_device_memory_while_they_live():
    """An adopted workspace counts in ``memory_allocated`` while the graph holds it and leaves it
    when freed; a loop of training steps keeps allocated and reserved memory flat (the next
    step's CPU allocation takes the block the last one freed)."""
    module, x, workspace = _adopting_lstm(0)
    base = torch.spyre.memory_allocated()
    result = module(x)  # its graph holds the workspace
    held = torch.spyre.memory_allocated() - base
    assert held >= workspace, (held, workspace)
    del result
    assert torch.spyre.memory_allocated() == base
    reserved = []
    torch_layouts.reset_stats()
    for _ in range(2):
        for _ in range(10):
            _step(module, x)
        reserved.append(torch.spyre.memory_reserved())
    assert torch_layouts.stats()["adopted_bytes"] >= 20 * workspace
    assert torch.spyre.memory_allocated() == base
    assert reserved[1] == reserved[0]


def test_cpu_allocations_outside_the_computes_are_pytorchs():
    """After adopted calls, a CPU tensor of the workspace's size is PyTorch's allocation: it takes
    no block the device keeps (reserved device memory is unchanged while it lives)."""
    module, x, workspace = _adopting_lstm(1)
    reserved = torch.spyre.memory_reserved()
    cached = reserved - torch.spyre.memory_allocated()
    assert cached > 0  # the freed workspace's block is kept
    host = torch.empty(workspace, dtype=torch.uint8)
    host.fill_(1)
    assert torch.spyre.memory_reserved() == reserved
    assert torch.spyre.memory_reserved() - torch.spyre.memory_allocated() == cached


# A subprocess's set-up: a CPU LSTM and its copy on `{device}`, an input there, the CPU's output.
LSTM_PAIR = """
    import torch, torch_layouts
    from torch import nn
    torch.manual_seed(0)
    cpu = nn.LSTM(64, 128)
    device = nn.LSTM(64, 128)
    device.load_state_dict(cpu.state_dict())
    device.to("{device}")
    x = torch.randn(32, 16, 64)
    xd = x.to("{device}")
    want = cpu(x)[0]
"""


def _run(script: str, **env: str) -> str:
    """``script`` (``LSTM_PAIR`` and what follows it) in a fresh interpreter with ``env`` set;
    its stdout (it must exit with 0)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout


TIGHT_SCRIPT = LSTM_PAIR.format(device="spyre") + """
    for _ in range(3):
        got = device(xd)[0]
        assert torch.equal(got.cpu(), want)
        del got
    try:
        hoard = torch.empty(9 << 19, dtype=torch.uint8, device="spyre")  # no room left for a workspace
        device(xd)
    except torch.OutOfMemoryError as e:
        assert "out of memory" in str(e), e
    else:
        raise AssertionError("expected OutOfMemoryError")
    del hoard
    got = device(xd)[0]
    assert torch.equal(got.cpu(), want)
    print("ok", torch_layouts.stats()["adopted_bytes"] > 0)
"""


def test_a_device_without_room_raises_and_recovers():
    """With a device of 8 MiB, training forwards adopt their 4 MiB workspace; with memory held
    elsewhere (4.5 MiB) the call raises ``OutOfMemoryError`` (as a copy into a new buffer would), and the
    next call, with the room back, gives the CPU's bits."""
    out = _run(TIGHT_SCRIPT, TORCH_LAYOUTS_DEVICE_MEMORY="8MiB")
    assert out.startswith("ok True"), out


SECOND_DEVICE_SCRIPT = LSTM_PAIR.format(device="spyre:1") + """
    base = torch.spyre.memory_allocated(1)
    torch_layouts.reset_stats()
    for _ in range(3):
        got = device(xd)[0]
        assert torch.equal(got.cpu(), want)
        assert torch.spyre.memory_allocated(1) > base + 4_000_000  # the graph holds the workspace
        del got
    assert torch.spyre.memory_allocated(1) == base
    print("ok", torch_layouts.stats()["adopted_bytes"] > 0, torch.spyre.memory_allocated(0))
"""


def test_results_are_adopted_on_their_own_device():
    """On ``spyre:1`` of two devices, the adopted workspace is counted in device 1's memory while
    the graph holds it and leaves it after; device 0 holds nothing."""
    out = _run(SECOND_DEVICE_SCRIPT, TORCH_LAYOUTS_DEVICE_COUNT="2")
    assert out.startswith("ok True 0"), out
