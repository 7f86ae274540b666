"""Whole LSTM layers on spyre: the oneDNN layer the CPU runs ``nn.LSTM`` on, on the buffers' views.

On CPU tensors ``aten::lstm`` runs each layer and direction as one ``mkldnn_rnn_layer`` (every
step's gates in one oneDNN primitive, a workspace saved for ``mkldnn_rnn_layer_backward``); on an
accelerator PyTorch's composite steps through the time steps, two GEMMs and a fused cell each, and
four GEMMs each in backward. The device's ``lstm`` (registered at ``AutogradPrivateUse1``, where it
takes precedence over that composite, and at the backend's key for inference mode) makes the
CPU's choice: where the CPU would take oneDNN (its dtype rule, oneDNN enabled, no projections) it
calls ``mkldnn_rnn_layer`` per layer and direction as the CPU does, and PyTorch's own derivative
for it records ``mkldnn_rnn_layer_backward``. Both run the CPU's kernel on the operands' device
buffers (``convolution.on_views_masked``; the workspace, oneDNN's opaque bytes, in a ``uint8``
device tensor), so the results are the CPU's bits, and later calls of a geometry replay without
Python. Other calls take the composite.

>>> lstm, x = torch.nn.LSTM(8, 32), torch.randn(5, 3, 8)
>>> want = lstm(x)[0]
>>> got = lstm.to("spyre")(x.to("spyre"))[0]
>>> torch.equal(got.cpu(), want)
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .convolution import on_views_masked
from .on_views import common_device, meta_results, on_views_kept
from .operands import default_coords, keep
from .registry import register

Tensor = torch.Tensor
aten = torch.ops.aten
LSTM_MODE = 2  # the mode number of an LSTM in mkldnn_rnn_layer
GATES = {0: 1, 1: 1, LSTM_MODE: 4, 3: 3}  # per mkldnn_rnn_layer mode (tanh RNN, relu RNN, LSTM, GRU)
_library: torch.library.Library | None = None
WORKSPACES: dict[tuple, int | None] = {}  # per geometry and grad mode
MAX_WORKSPACES = 256


def _workspace_bytes(values: list, grad: bool) -> int | None:
    """The size of the workspace the CPU's ``mkldnn_rnn_layer`` returns for ``values`` (its
    arguments) in grad mode ``grad``, None where it returns none (grad mode off): found once per
    geometry by running it on zeros of the operands' shapes (oneDNN decides it)."""
    key = (grad, *((tuple(v.shape), v.dtype) if isinstance(v, Tensor) else tuple(v) if isinstance(v, list) else v
                   for v in values))
    if key not in WORKSPACES:
        with torch.set_grad_enabled(grad):
            workspace = aten.mkldnn_rnn_layer.default(*[torch.zeros(v.shape, dtype=v.dtype) if isinstance(v, Tensor)
                                                        else v for v in values])[3]
        keep(WORKSPACES, key, None if workspace is None else workspace.numel(), MAX_WORKSPACES)
    return WORKSPACES[key]


def _check(op: torch._ops.OpOverload, values: list, mode: int, hidden: int, batch_sizes: Sequence[int]) -> None:
    """The CPU's layer reads its operands unchecked: a ValueError naming a mode that is no RNN's,
    packed input (``batch_sizes``), or a tensor operand (the first 7 of the forward's, 13 of the
    backward's) not of the input's dtype and of its size for a layer of ``hidden`` units (a bias:
    at least a gate's rows; the CPU passes zeros of the weights' shapes where there are none)."""
    name = op._schema.name
    if mode not in GATES:
        raise ValueError(f"{name}: mode {mode} is none of {sorted(GATES)} (tanh RNN, relu RNN, LSTM, GRU)")
    if batch_sizes:
        raise ValueError(f"{name}: batch_sizes {list(batch_sizes)}: packed input is not supported")
    input = values[0]
    if input.dim() != 3:
        raise ValueError(f"{name}: input must be (steps, batch, features), got size {list(input.shape)}")
    steps, batch, features = input.shape
    rows, state, sequence = GATES[mode] * hidden, (batch, hidden), (steps, batch, hidden)
    sizes = [tuple(input.shape), (rows, features), (rows, hidden), rows, rows, state, state,
             sequence, state, state, sequence, state, state]  # (the backward's last six)
    for argument, t, size in zip(op._schema.arguments, values, sizes[:7 if name.endswith("layer") else 13]):
        if t is None:
            continue
        fits = t.numel() >= size if isinstance(size, int) else tuple(t.shape) == size
        if not fits or t.dtype != input.dtype:
            want = f"at least {size} elements" if isinstance(size, int) else f"of size {list(size)}"
            raise ValueError(f"{name}: {argument.name} must be a {input.dtype} tensor {want}, got {t.dtype} of "
                             f"size {list(t.shape)}")


def rnn_layer(*values: object) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """``mkldnn_rnn_layer``: (output, hy, cy, workspace), the CPU's kernel on the operands' views;
    no workspace where grad mode is off, as on the CPU."""
    values = list(values)
    batch_sizes, mode, hidden = values[8:11]
    _check(aten.mkldnn_rnn_layer.default, values, mode, hidden, batch_sizes)
    inputs = tuple(range(7))
    workspace = _workspace_bytes(values, torch.is_grad_enabled())
    results = [default_coords(tuple(m.shape), m.dtype) for m in meta_results(aten.mkldnn_rnn_layer.default, values)[:3]]
    results.append(None if workspace is None else default_coords((workspace,), torch.uint8))
    return on_views_kept(aten.mkldnn_rnn_layer.default, values, inputs, results,
                         common_device([values[i] for i in inputs]), contiguous=inputs)


def rnn_layer_backward(*values: object) -> tuple[Tensor, ...]:
    """``mkldnn_rnn_layer_backward``: the gradients of the input, the four weights and the two
    states, the CPU's kernel on the operands' views (its workspace: the one the forward made)."""
    values = list(values)
    reverse, mode, hidden, layers, has_biases, train, bidirectional, batch_sizes, batch_first = values[13:22]
    _check(aten.mkldnn_rnn_layer_backward.default, values, mode, hidden, batch_sizes)
    forward = values[:7] + [reverse, batch_sizes, mode, hidden, layers, has_biases, bidirectional, batch_first, train]
    workspace, size = values[22], _workspace_bytes(forward, True)
    if workspace.dtype != torch.uint8 or tuple(workspace.shape) != (size,):
        raise ValueError(f"mkldnn_rnn_layer_backward: workspace must be the forward's, a torch.uint8 tensor of size "
                         f"[{size}], got {workspace.dtype} of size {list(workspace.shape)}")
    return on_views_masked(aten.mkldnn_rnn_layer_backward.default, values, (*range(13), 22))


def _takes_onednn(input: Tensor, hx: Sequence[Tensor]) -> bool:
    """Whether the CPU would run ``lstm`` on these operands (were they CPU tensors) by oneDNN:
    ``use_mkldnn``'s dtype rule, oneDNN enabled, operands with elements, and no projections."""
    dtype_ok = (input.dtype == torch.float32
                or (input.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported())
                or (input.dtype == torch.float16 and not torch.is_grad_enabled()
                    and torch.ops.mkldnn._is_mkldnn_fp16_supported()))
    return (torch.backends.mkldnn.enabled and dtype_ok and input.numel() != 0 and len(hx) == 2
            and hx[0].shape[2] == hx[1].shape[2])


def lstm(input: Tensor, hx: Sequence[Tensor], params: Sequence[Tensor], has_biases: bool, num_layers: int,
         dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``lstm.input`` on the device: each layer and direction one ``mkldnn_rnn_layer``, as the CPU
    runs it (then the next layer's input: the directions' outputs side by side, dropped out while
    training between layers); PyTorch's composite where the CPU would not take oneDNN, and its
    decomposition for compilers while a graph is traced."""
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    if torch.compiler.is_compiling() or any(type(t) not in (Tensor, torch.nn.Parameter) for t in (input, *hx, *params)):
        return aten.lstm.input.decompose(*args)  # traced (fake or functional tensors): the compilers' decomposition
    if not _takes_onednn(input, hx):
        # (ATen's C++ composite, as on an accelerator: a fused cell a step; not ``decompose``, which
        # takes the Python decomposition registered for compilers)
        return aten.lstm.input._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args)
    h0, c0 = hx
    hidden = h0.shape[2]
    directions = 2 if bidirectional else 1
    per_layer = 4 if has_biases else 2
    layer_input = input.transpose(0, 1) if batch_first else input
    hy, cy = [], []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            w = params[index * per_layer:(index + 1) * per_layer]
            # (without biases, the CPU passes zeros of the weights' shapes, which the layer ignores)
            biases = w[2:] if has_biases else [torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in w]
            output, h, c, _ = aten.mkldnn_rnn_layer(layer_input, w[0], w[1], *biases, h0[index], c0[index],
                                                    direction > 0, [], LSTM_MODE, hidden, num_layers, has_biases,
                                                    bidirectional, batch_first, train)
            outputs.append(output)
            hy.append(h)
            cy.append(c)
        layer_input = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        if dropout != 0 and train and layer < num_layers - 1:
            layer_input = torch.dropout(layer_input, dropout, True)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    return output, torch.stack(hy, 0), torch.stack(cy, 0)


def register_all() -> None:
    global _library
    register("mkldnn_rnn_layer", rnn_layer)
    register("mkldnn_rnn_layer_backward", rnn_layer_backward)
    register("lstm.input", lstm)  # the backend's key: where autograd is off (inference mode)
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        _library.impl("lstm.input", lstm, "AutogradPrivateUse1")
