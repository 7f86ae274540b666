"""Fused RNN cells on spyre: the kernels PyTorch's ``nn.LSTM``/``nn.GRU`` call on accelerators.

PyTorch sends accelerator tensors (CUDA, XPU, PrivateUse1) to ``_thnn_fused_lstm_cell`` and
``_thnn_fused_gru_cell``, which have no CPU kernel for the fallback to borrow. These kernels
compute the same cells, saving the activated gates as CUDA's kernels do, and the matching
backward kernels make ``backward()`` work through PyTorch's own formulas. A float32 cell (and
its backward) is one pass of the runtime's fused cell (``torch.ops.torch_layouts.lstm_cell``,
``gru_cell``; ``csrc/recurrent_cells.cpp``), replayed by the runtime's front after its first
call: where the hidden size is whole sticks, its out= form on the buffers where they lie (a
stick's lanes at a time), else on row-major copies; cells of other dtypes compute from device ops.
"""

from __future__ import annotations

import torch

from .on_views import common_device, finish, on_views_kept
from .operands import default_coords, new_tensor, plan, raw_view, read_of, runtime_record
from .registry import register

Tensor = torch.Tensor
STICK = 32  # float32 elements a stick: hidden sizes of whole sticks are read where they lie


def _gates(input_gates: Tensor, hidden_gates: Tensor, input_bias: Tensor | None,
           hidden_bias: Tensor | None) -> tuple[Tensor, Tensor]:
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates, hidden_gates


def _float32(values: list) -> bool:
    return all(v.dtype == torch.float32 for v in values if isinstance(v, Tensor))


def _fused(op: torch._ops.OpOverload, values: list, results: list[tuple[int, ...] | None]
           ) -> tuple[Tensor | None, ...]:
    """``op``, a runtime cell (``csrc/recurrent_cells.cpp``), on row-major views of the float32
    operands in ``values``: a new tensor in the default layout for each result size, None where
    there is none."""
    inputs = tuple(i for i, v in enumerate(values) if isinstance(v, Tensor))
    return on_views_kept(op, values, inputs, [None if size is None else default_coords(size, torch.float32)
                                              for size in results],
                         common_device([values[i] for i in inputs]), contiguous=inputs)


def _lane_view(t: Tensor, groups: int) -> Tensor | None:
    """Float32 ``t`` (``(B, groups * H)``, a state ``(B, H)`` with ``groups`` 0, or a bias
    ``(groups * H,)``; H whole sticks) read where its buffer holds it in the default layout, as
    the runtime's cells take it: ``(B, groups, H / 32, 32)`` (``(B, H / 32, 32)``,
    ``(groups, H / 32, 32)``); None where the buffer does not hold it so."""
    coords = default_coords(tuple(t.shape), torch.float32)
    p = plan(t, coords)
    if p is None or not p.stick_ok or p.shape is not None:
        return None
    v = raw_view(t, coords.shape, p.strides, p.offset)  # (sticks, rows, lanes) or (sticks, lanes)
    if t.dim() == 1:
        return v.unflatten(0, (groups, -1))
    v = v.permute(1, 0, 2)
    return v.unflatten(1, (groups, -1)) if groups else v


def _on_lanes(op: torch._ops.OpOverload, values: list, groups: list[int],
              results: list[tuple[str, tuple[int, ...], int]]) -> tuple[Tensor, ...] | None:
    """``op``, a runtime cell's out= form, on the operands' buffers where they lie
    (``_lane_view``, ``groups`` per value), writing new default-layout results (out= name, size,
    groups) in place; its recipe offered to the runtime's front. None where an operand's buffer
    does not hold it in the default layout."""
    views = {}
    for i, (value, g) in enumerate(zip(values, groups)):
        if isinstance(value, Tensor):
            views[i] = _lane_view(value, g)
            if views[i] is None:
                return None
    device = common_device([values[i] for i in views])
    coords = [default_coords(size, torch.float32) for _, size, _ in results]
    outs = [new_tensor(c, device) for c in coords]
    written = [_lane_view(o, g) for o, (_, _, g) in zip(outs, results)]
    op(*(views.get(i, v) for i, v in enumerate(values)), **{name: w for (name, _, _), w in zip(results, written)})
    finish(values, outs, [runtime_record(c) for c in coords], [(i, (values[i], read_of(v), None)) for i, v in views.items()],
           [(o, read_of(w), None) for o, w in zip(outs, written)], f"{op._schema.name}.{op._overloadname}")
    return tuple(outs)


def lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor, input_bias: Tensor | None = None,
              hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(hy, cy, workspace): workspace holds the activated gates [i, f, g, o] (CUDA's layout).
    float32 cells of matching sizes run the runtime's fused cell, other dtypes these device ops."""
    values = [input_gates, hidden_gates, cx, input_bias, hidden_bias]
    if _float32(values) and cx.dim() == 2 and input_gates.shape == hidden_gates.shape == (cx.shape[0], 4 * cx.shape[1]):
        rows, hidden = cx.shape
        done = _on_lanes(torch.ops.torch_layouts.lstm_cell.out, values, [4, 4, 0, 4, 4],
                         [("hy", (rows, hidden), 0), ("cy", (rows, hidden), 0), ("workspace", (rows, 4 * hidden), 4)]
                         ) if hidden % STICK == 0 else None
        return done or _fused(torch.ops.torch_layouts.lstm_cell.default, values,
                              [(rows, hidden), (rows, hidden), (rows, 4 * hidden)])
    igates, hgates = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = (igates + hgates).chunk(4, dim=1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], dim=1)


def lstm_cell_backward(grad_hy: Tensor | None, grad_cy: Tensor | None, cx: Tensor, cy: Tensor, workspace: Tensor,
                       has_bias: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """(grad of the gates, grad_cx, grad of the bias) of ``lstm_cell``."""
    values = [grad_hy, grad_cy, cx, cy, workspace, has_bias]
    if _float32(values) and cx.dim() == 2 and cy.shape == cx.shape and workspace.shape == (cx.shape[0], 4 * cx.shape[1]):
        rows, hidden = cx.shape
        done = _on_lanes(torch.ops.torch_layouts.lstm_cell_backward.out, values, [0, 0, 0, 0, 4, 0],
                         [("grad_gates", (rows, 4 * hidden), 4), ("grad_cx", (rows, hidden), 0),
                          ("grad_bias", (4 * hidden,), 4)]) if has_bias and hidden % STICK == 0 else None
        return done or _fused(torch.ops.torch_layouts.lstm_cell_backward.default, values,
                              [(rows, 4 * hidden), (rows, hidden), (4 * hidden,) if has_bias else None])
    i, f, g, o = workspace.chunk(4, dim=1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = (torch.zeros_like(cy) if grad_cy is None else grad_cy) + grad_hy * o * (1 - tanh_cy * tanh_cy)
    grad_gates = torch.cat([grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f), grad_c * i * (1 - g * g),
                            grad_hy * tanh_cy * o * (1 - o)], dim=1)
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


def gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor, input_bias: Tensor | None = None,
             hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(hy, workspace): workspace holds [r, z, n, hx, hidden n-gate] (CUDA's layout). float32
    cells of matching sizes run the runtime's fused cell, other dtypes these device ops."""
    values = [input_gates, hidden_gates, hx, input_bias, hidden_bias]
    if _float32(values) and hx.dim() == 2 and input_gates.shape == hidden_gates.shape == (hx.shape[0], 3 * hx.shape[1]):
        rows, hidden = hx.shape
        done = _on_lanes(torch.ops.torch_layouts.gru_cell.out, values, [3, 3, 0, 3, 3],
                         [("hy", (rows, hidden), 0), ("workspace", (rows, 5 * hidden), 5)]) if hidden % STICK == 0 else None
        return done or _fused(torch.ops.torch_layouts.gru_cell.default, values, [(rows, hidden), (rows, 5 * hidden)])
    igates, hgates = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    i_r, i_z, i_n = igates.chunk(3, dim=1)
    h_r, h_z, h_n = hgates.chunk(3, dim=1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, h_n], dim=1)


def gru_cell_backward(grad_hy: Tensor, workspace: Tensor, has_bias: bool
                      ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """(grad input gates, grad hidden gates, grad_hx, grad input bias, grad hidden bias) of ``gru_cell``."""
    if _float32([grad_hy, workspace]) and grad_hy.dim() == 2 and workspace.shape == (grad_hy.shape[0],
                                                                                       5 * grad_hy.shape[1]):
        rows, hidden = grad_hy.shape
        bias = (3 * hidden,) if has_bias else None
        done = _on_lanes(torch.ops.torch_layouts.gru_cell_backward.out, [grad_hy, workspace, has_bias], [0, 5, 0],
                         [("grad_input_gates", (rows, 3 * hidden), 3), ("grad_hidden_gates", (rows, 3 * hidden), 3),
                          ("grad_hx", (rows, hidden), 0), ("grad_input_bias", (3 * hidden,), 3),
                          ("grad_hidden_bias", (3 * hidden,), 3)]) if has_bias and hidden % STICK == 0 else None
        return done or _fused(torch.ops.torch_layouts.gru_cell_backward.default, [grad_hy, workspace, has_bias],
                      [(rows, 3 * hidden), (rows, 3 * hidden), (rows, hidden), bias, bias])
    r, z, n, hx, h_n = workspace.chunk(5, dim=1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], dim=1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], dim=1)
    bias = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return grad_input, grad_hidden, grad_hy * z, *bias


def register_all() -> None:
    register("_thnn_fused_lstm_cell", lstm_cell)
    register("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward)
    register("_thnn_fused_gru_cell", gru_cell)
    register("_thnn_fused_gru_cell_backward", gru_cell_backward)
