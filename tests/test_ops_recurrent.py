"""The fused LSTM and GRU cells on the device (``ops/rnn.py``, ``csrc/recurrent_cells.cpp``):
float32 cells and their backward run the runtime's one-pass cells on the buffers' views, replayed
without Python after the first call; their values are the device-op formulas' (CUDA's) to float32
rounding."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import kernels_in, padding_holds_pad_value, stays_on_device
from torch_layouts import _C
from torch_layouts.ops import elementwise, rnn

A = torch.ops.aten
# the activations' last bits differ from ATen's (another exp); 1 - g * g and 1 - i of saturated
# gates turn those into 1e-6 of a gradient of 10
close = {"atol": 1e-5, "rtol": 1e-5}


def _randn(*shape: int, gen: torch.Generator, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen) * scale


def _device(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to("spyre")


def _fused_calls_match(operands: list[torch.Tensor | None], run: Callable[..., list[torch.Tensor | None]],
                       want: list[torch.Tensor | None]) -> None:
    """``run`` (a cell and its backward) on device copies of ``operands``, three times: no
    fallback, no host bytes; the runtime's cell from Python on the first call only (the later ones
    replayed); results defined where ``want``'s are, each call with the first's bits and the
    padding the pad value; ``want``'s values to float32 rounding."""
    elementwise.forget_recipes()
    entered = []
    with pytest.MonkeyPatch.context() as patch:
        for name, original in (("_fused", rnn._fused), ("_on_lanes", rnn._on_lanes)):  # staged, or in place
            patch.setattr(rnn, name, lambda *a, f=original: entered.append(1) or f(*a))
        first = None
        for call in range(3):
            copies = [_device(t) for t in operands]
            torch_layouts.reset_stats()
            before = len(entered)
            got = run(*copies)
            stays_on_device()
            assert (len(entered) - before == 0) == (call > 0), call
            assert [g is None for g in got] == [w is None for w in want]
            got = [g for g in got if g is not None]
            assert all(padding_holds_pad_value(g) for g in got)
            bits = [g.cpu() for g in got]
            first = first or bits
            assert all(torch.equal(a, b) for a, b in zip(first, bits)), call
    for g, w in zip(first, [w for w in want if w is not None]):
        torch.testing.assert_close(g, w, **close)


CELL = st.tuples(st.integers(1, 20), st.sampled_from([1, 7, 32, 45, 64, 128]), st.booleans(), st.booleans(),
                 st.sampled_from(_C._rows_math_sets()), st.integers(0, 2**31))


@settings(max_examples=60, deadline=None)
@given(CELL, st.sampled_from(["both", "hy", "cy"]))
def test_fused_lstm_cell_and_backward(cell, grads):
    """An LSTM cell of ``rows`` x ``hidden`` (part of a stick, whole sticks, a padded one), either
    bias or none, the backward with both output gradients or one (the other None, as autograd
    passes it), in each instruction set of the row math: the device-op formulas' values
    (``_composed_lstm``, on CPU tensors; large gates saturate the activations too), as
    ``_fused_calls_match`` checks."""
    rows, hidden, input_bias, hidden_bias, instructions, seed = cell
    gen = torch.Generator().manual_seed(seed)
    ig, hg = _randn(rows, 4 * hidden, gen=gen), _randn(rows, 4 * hidden, gen=gen)
    cx = _randn(rows, hidden, gen=gen)
    ib = _randn(4 * hidden, gen=gen) if input_bias else None
    hb = _randn(4 * hidden, gen=gen) if hidden_bias else None
    ghy = _randn(rows, hidden, gen=gen) if grads != "cy" else None
    gcy = _randn(rows, hidden, gen=gen) if grads != "hy" else None
    has_bias = input_bias or hidden_bias
    want = _composed_lstm(ig, hg, cx, ib, hb)
    want_back = _composed_lstm_backward(ghy, gcy, cx, want[1], want[2], has_bias)

    def run(ig, hg, cx, ib, hb, ghy, gcy) -> list[torch.Tensor | None]:
        out = A._thnn_fused_lstm_cell(ig, hg, cx, ib, hb)
        return [*out, *A._thnn_fused_lstm_cell_backward_impl(ghy, gcy, cx, out[1], out[2], has_bias)]
    with kernels_in(_C._rows_set_math, instructions):
        _fused_calls_match([ig, hg, cx, ib, hb, ghy, gcy], run, [*want, *want_back])


@settings(max_examples=60, deadline=None)
@given(CELL)
def test_fused_gru_cell_and_backward(cell):
    """A GRU cell, as the LSTM's test: the device-op formulas' values (``_composed_gru``), as
    ``_fused_calls_match`` checks."""
    rows, hidden, input_bias, hidden_bias, instructions, seed = cell
    gen = torch.Generator().manual_seed(seed)
    ig, hg = _randn(rows, 3 * hidden, gen=gen), _randn(rows, 3 * hidden, gen=gen)
    hx, ghy = _randn(rows, hidden, gen=gen), _randn(rows, hidden, gen=gen)
    ib = _randn(3 * hidden, gen=gen) if input_bias else None
    hb = _randn(3 * hidden, gen=gen) if hidden_bias else None
    has_bias = input_bias or hidden_bias
    want = _composed_gru(ig, hg, hx, ib, hb)
    want_back = _composed_gru_backward(ghy, want[1], has_bias)

    def run(ig, hg, hx, ib, hb, ghy) -> list[torch.Tensor | None]:
        out = A._thnn_fused_gru_cell(ig, hg, hx, ib, hb)
        return [*out, *A._thnn_fused_gru_cell_backward(ghy, out[1], has_bias)]
    with kernels_in(_C._rows_set_math, instructions):
        _fused_calls_match([ig, hg, hx, ib, hb, ghy], run, [*want, *want_back])


def _composed_lstm(ig, hg, cx, ib, hb):
    """The LSTM cell from ATen ops on CPU tensors (the formulas ``rnn`` composes for other dtypes)."""
    i, f, g, o = ((ig + ib if ib is not None else ig) + (hg + hb if hb is not None else hg)).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return [o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)]


def _composed_lstm_backward(ghy, gcy, cx, cy, ws, has_bias):
    i, f, g, o = ws.chunk(4, 1)
    t = cy.tanh()
    ghy = torch.zeros_like(cy) if ghy is None else ghy
    gc = (torch.zeros_like(cy) if gcy is None else gcy) + ghy * o * (1 - t * t)
    gates = torch.cat([gc * g * i * (1 - i), gc * cx * f * (1 - f), gc * i * (1 - g * g), ghy * t * o * (1 - o)], 1)
    return [gates, gc * f, gates.sum(0) if has_bias else None]


def _composed_gru(ig, hg, hx, ib, hb):
    i_r, i_z, i_n = (ig + ib if ib is not None else ig).chunk(3, 1)
    h_r, h_z, h_n = (hg + hb if hb is not None else hg).chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    return [n + z * (hx - n), torch.cat([r, z, n, hx, h_n], 1)]


def _composed_gru_backward(ghy, ws, has_bias):
    r, z, n, hx, h_n = ws.chunk(5, 1)
    grad_n = ghy * (1 - z) * (1 - n * n)
    grad_z = ghy * (hx - n) * z * (1 - z)
    grad_r = grad_n * h_n * r * (1 - r)
    gi, gh = torch.cat([grad_r, grad_z, grad_n], 1), torch.cat([grad_r, grad_z, grad_n * r], 1)
    return [gi, gh, ghy * z, *((gi.sum(0), gh.sum(0)) if has_bias else (None, None))]


@pytest.mark.parametrize("kind,cell", [(torch.nn.LSTM, "aten::_thnn_fused_lstm_cell"),
                                       (torch.nn.GRU, "aten::_thnn_fused_gru_cell")])
def test_a_recurrent_network_trains_on_the_device_as_on_the_cpu(kind, cell):
    """A 2-layer ``nn.LSTM`` or ``nn.GRU`` (float32, batch first) and a linear head, two Adam
    steps on PyTorch's composite (oneDNN off: an LSTM would otherwise run whole layers,
    ``ops/lstm_layers.py``): its loss and every parameter the CPU's to float32 rounding, no CPU
    fallback, a fused cell per layer and step."""
    torch.manual_seed(0)
    cpu = torch.nn.ModuleDict({"rnn": kind(24, 40, num_layers=2, batch_first=True), "head": torch.nn.Linear(40, 5)})
    device = torch.nn.ModuleDict({"rnn": kind(24, 40, num_layers=2, batch_first=True),
                                  "head": torch.nn.Linear(40, 5)})
    device.load_state_dict(cpu.state_dict())
    device.to("spyre")
    x, y = torch.randn(6, 9, 24), torch.randint(0, 5, (6,))
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (cpu, device)]
    torch_layouts.reset_stats()
    losses = []
    with torch.backends.mkldnn.flags(enabled=False):
        for _ in range(2):
            for model, opt, (xs, ys) in zip((cpu, device), optimizers, ((x, y), (x.to("spyre"), y.to("spyre")))):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model["head"](model["rnn"](xs)[0][:, -1]), ys)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    s = torch_layouts.stats()
    assert s["fallbacks"] == {}
    assert s["kernel_calls"][cell] == 2 * 2 * 9
    assert losses[0] == pytest.approx(losses[1], rel=1e-5) and losses[2] == pytest.approx(losses[3], rel=1e-5)
    for (name, p), q in zip(cpu.named_parameters(), device.parameters()):
        torch.testing.assert_close(q.cpu(), p, atol=1e-5, rtol=1e-4, msg=name)


def test_bad_operands_are_named():
    """Operands of the wrong size or dtype reaching the runtime's cell: a ValueError naming them."""
    cx = torch.randn(3, 5)
    with pytest.raises(ValueError, match="workspace has 45 elements, expected 60"):
        torch.ops.torch_layouts.lstm_cell_backward(cx, None, cx, cx, torch.randn(3, 15), False)
    with pytest.raises(ValueError, match="input_gates must be a float32 CPU tensor"):
        torch.ops.torch_layouts.lstm_cell(torch.randn(3, 20).double(), torch.randn(3, 20), cx)
    lanes = torch.randn(3, 4, 2, 32)
    with pytest.raises(ValueError, match=r"hy must be a \[3, 2, 32\] view with contiguous lanes"):
        torch.ops.torch_layouts.lstm_cell.out(lanes, lanes, torch.randn(3, 2, 32), hy=torch.randn(3, 2, 33),
                                              cy=torch.randn(3, 2, 32), workspace=lanes.clone())
