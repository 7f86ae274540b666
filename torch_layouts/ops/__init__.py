"""Layout-aware device kernels: ops that compute on device memory and honour layout rules.

Importing this package registers kernels at the ``spyre`` (PrivateUse1) dispatch key,
so PyTorch's own autograd formulas run above them:

* ``elementwise`` -- unary, binary and ternary pointwise ops (scalars, broadcasting of
  operands that share the stick), type conversion (``_to_copy``), ``clone``,
  ``fill_``/``zero_``, in-place variants and a few backward ops;
* ``reductions`` -- ``sum``, ``mean``, ``amax``, ``amin``, ``all``, ``any`` (sparse results when
  the stick dim is reduced);
* ``softmax`` -- ``softmax``/``log_softmax``/``_safe_softmax`` (and backward);
* ``layer_norm`` -- ``native_layer_norm`` and its backward;
* ``rms_norm`` -- ``_fused_rms_norm`` (which ``rms_norm`` calls on the device) and its backward;
* ``scans`` -- ``cumsum`` along rows of the buffer (the row kernel), else as ``on_views`` does;
* ``matmul`` -- ``mm``, ``bmm``, ``mv``, ``addmm`` (``matmul``/``linear`` decompose into them;
  half precision through the CPU's GEMM on the operands' views);
* ``rnn`` -- the fused LSTM/GRU cells ``nn.LSTM``/``nn.GRU`` call on accelerators (and backward);
* ``lstm_layers`` -- ``lstm`` as the CPU runs it: a oneDNN layer (``mkldnn_rnn_layer``, and
  backward) per layer and direction, the CPU's kernel on the buffers' views;
* ``dropout`` -- ``native_dropout`` (drawing from the spyre generator) and its backward;
* ``losses`` -- ``mse_loss``, ``nll_loss`` (and backward);
* ``convolution`` -- convolutions and ``native_batch_norm`` (and backward), the CPU's kernels on the
  buffers' views;
* ``max_pool`` -- ``max_pool2d_with_indices`` and its backward, the runtime's kernel on the
  buffers' views;
* ``embedding`` -- ``embedding_dense_backward``, an embedding's weight gradient;
* ``on_views`` -- an op's CPU kernel on strided views of the buffers (or dense copies), offered to
  the runtime's front (the losses, ``logsumexp``; ``argmax``, ``max``/``min`` over a dim, ``topk``,
  ``sort``, ``var``, ``std``, ``linalg_vector_norm``, ``index_select``, ``gather``,
  ``scatter``, ``prod``, ``tril``, ``flip``, ...: ``on_views.CPU_KERNELS``);
* ``view_backward`` -- ``select_backward``, ``slice_backward``;
* ``concat`` -- ``cat``, ``stack``, each input copied into its part of one new buffer;
* ``indexing`` -- ``index_copy_``/``index_copy`` (a static KV cache's update), as copies into part of a buffer;
* ``view_copy`` -- copies into or out of part of a device buffer (the runtime's hook for ``copy_``);
* ``foreach`` -- the ``_foreach_*`` ops optimizers call, one CPU call on the raw buffers where they line up;
* ``attention`` -- ``scaled_dot_product_attention``'s backend choice and fused kernel (and backward);
* ``registry`` -- registration; the ``out=`` overloads of all of them.

``operands`` reads operands as strided views of their raw device buffers in an op's
device coordinates; ``rules`` holds strict mode, ``LayoutError`` and ``restickify``;
``stats`` the counters. Every other op keeps running on the runtime's CPU fallback,
counted per op in ``stats()``.
"""

from __future__ import annotations

from . import (arg_extremes, attention, concat, convolution, dropout, elementwise, embedding, foreach, indexing,
               layer_norm, losses, lstm_layers, matmul, max_pool, on_views, reductions, rms_norm, rnn, scans, softmax,
               view_backward, view_copy)
from .registry import register_out_variants
from .rules import LayoutError, restickify, strict_layouts
from .stats import reset_stats, stats, warn_on_fallback

elementwise.register_all()
reductions.register_all()
softmax.register_all()
layer_norm.register_all()
rms_norm.register_all()
matmul.register_all()
rnn.register_all()
lstm_layers.register_all()
attention.register_all()
dropout.register_all()
losses.register_all()
convolution.register_all()
max_pool.register_all()
view_backward.register_all()
indexing.register_all()
embedding.register_all()
foreach.register_all()
concat.register_all()
arg_extremes.register_all()
on_views.register_all()
scans.register_all()
view_copy.register_all()
register_out_variants()

__all__ = ["LayoutError", "reset_stats", "restickify", "stats", "strict_layouts", "warn_on_fallback"]
