"""Convolutions and batch norm on device memory: ATen's CPU kernels on the buffers' views.

``F.conv*`` on spyre reaches ``convolution_overrideable`` (and, in backward,
``convolution_backward_overrideable``); ``F.batch_norm`` reaches ``native_batch_norm`` and its
backward. Each runs the CPU's own kernel (``aten::convolution``, ``aten::convolution_backward``,
...) on strided views of the operands' device buffers, or on dense device copies where a layout
has no strided view (``on_views``), and writes its results into new device tensors in the default
layout of their shapes: the CPU's bits, and no copy to or from the host. A batch norm's running
statistics are updated where they lie. The forward convolution's recipe replays later calls of a
geometry without Python (the runtime's front computes ``convolution_overrideable`` as
``aten::convolution``).

>>> x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
>>> y = torch.nn.functional.conv2d(x.to("spyre"), w.to("spyre"), padding=1)
>>> torch.equal(y.cpu(), torch.nn.functional.conv2d(x, w, padding=1))
True
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from .on_views import common_device, meta_results, on_views, on_views_kept
from .operands import default_coords, host_read
from .registry import register

Tensor = torch.Tensor
aten = torch.ops.aten


def on_views_masked(op: torch._ops.OpOverload, values: list, inputs: tuple[int, ...],
                    overrides: Sequence[tuple[int, object]] = (), in_place: Collection[int] = (),
                    sizes: dict[int, tuple[int, ...]] | None = None) -> tuple[Tensor | None, ...]:
    """``op`` (a functional CPU op whose results an ``output_mask`` may leave out) on the
    device tensors' views at ``inputs`` of ``values`` (each read row-major, as the CPU kernel
    would copy it, but those at ``in_place``, which it updates): a new device tensor for each
    result its meta kernel defines, None for the others (whatever the CPU kernel returns there).
    A geometry the meta kernel rejects raises the CPU kernel's own error, on CPU copies of the
    operands. ``overrides``: as ``on_views``; ``sizes``: results' sizes where the CPU kernel's
    differ from its meta kernel's."""
    device = common_device([v for v in values if isinstance(v, Tensor)])
    sizes = sizes or {}
    results = [None if m is None else default_coords(sizes.get(i, tuple(m.shape)), m.dtype)
               for i, m in enumerate(meta_results(op, values))]
    return on_views_kept(op, values, inputs, results, device, contiguous=set(inputs) - set(in_place),
                         overrides=overrides)


def convolution(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    """``convolution_overrideable``: ``aten::convolution`` on the operands' views."""
    values = [input, weight, bias, stride, padding, dilation, transposed, output_padding, groups]
    return on_views_masked(aten.convolution.default, values, (0, 1, 2))[0]


def convolution_backward(grad_output: Tensor, input: Tensor, weight: Tensor, stride: Sequence[int],
                         padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                         output_padding: Sequence[int], groups: int, output_mask: Sequence[bool]
                         ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """``convolution_backward_overrideable``: ``aten::convolution_backward`` on the operands'
    views (the bias's size is the gradient's channels)."""
    bias_sizes = [grad_output.shape[1]] if output_mask[2] else None
    values = [grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
              list(output_mask)]
    return on_views_masked(aten.convolution_backward.default, values, (0, 1, 2), overrides=[(3, bias_sizes)])


def batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
               running_var: Tensor | None, training: bool, momentum: float, eps: float
               ) -> tuple[Tensor, Tensor, Tensor]:
    """``native_batch_norm``: the CPU's kernel on the views; running statistics updated in place
    (where one has no strided view: on CPU copies of the operands, copied back, the statistics'
    copies strided as they are, whose strides pick the CPU kernel's path and so its bits)."""
    values = [input, weight, bias, running_mean, running_var, training, momentum, eps]
    stats = [s for s in (running_mean, running_var) if s is not None]
    if training and any(host_read(s) is None for s in stats):
        copies = [v.cpu() if isinstance(v, Tensor) else v for v in values]
        for i in (3, 4):
            if values[i] is not None:
                copies[i] = torch.empty_strided(values[i].shape, values[i].stride()).copy_(copies[i])
        results = aten.native_batch_norm.default(*copies)
        for s, updated in ((running_mean, copies[3]), (running_var, copies[4])):
            if s is not None:
                s.copy_(updated)
        return tuple(r.to(input.device) for r in results)
    # The runtime's batch norm (csrc/batch_norm.cpp: ATen's contiguous arithmetic, on the views
    # where they lie); evaluating, the CPU's saved statistics are empty (its meta kernel's, a value
    # per channel).
    results = [default_coords((0,) if i and not training else tuple(m.shape), m.dtype)
               for i, m in enumerate(meta_results(aten.native_batch_norm.default, values))]
    return on_views(torch.ops.torch_layouts.batch_norm.out, values, (0, 1, 2, 3, 4), results,
                    common_device([v for v in values[:5] if isinstance(v, Tensor)]))


def batch_norm_backward(grad_out: Tensor, input: Tensor, weight: Tensor | None, running_mean: Tensor | None,
                        running_var: Tensor | None, save_mean: Tensor | None, save_invstd: Tensor | None,
                        train: bool, eps: float, output_mask: Sequence[bool]
                        ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """``native_batch_norm_backward``: the CPU's kernel on the views."""
    values = [grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
              list(output_mask)]
    if not all(output_mask):
        return on_views_masked(aten.native_batch_norm_backward.default, values, (0, 1, 2, 3, 4, 5, 6))
    # the runtime's (csrc/batch_norm.cpp: ATen's contiguous arithmetic, on the views where they lie)
    results = [default_coords(tuple(m.shape), m.dtype)
               for m in meta_results(aten.native_batch_norm_backward.default, values)]
    return on_views(torch.ops.torch_layouts.batch_norm_backward.out, values, (0, 1, 2, 3, 4, 5, 6), results,
                    common_device([v for v in values[:7] if isinstance(v, Tensor)]))


def register_all() -> None:
    register("convolution_overrideable", convolution)
    register("convolution_backward_overrideable", convolution_backward)
    register("native_batch_norm", batch_norm)
    register("native_batch_norm_backward", batch_norm_backward)
