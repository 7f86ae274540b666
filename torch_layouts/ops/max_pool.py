"""2-D max pooling on device memory: the runtime's kernel on the buffers' strided views.

``max_pool2d_with_indices`` and its backward run ``torch.ops.torch_layouts.max_pool2d`` and
``max_pool2d_backward`` (``csrc/max_pool.cpp``) on views of the operands' device buffers (or on
dense copies where a layout has no strided view, ``on_views``), with ATen's rule: per window the
first maximum in row-major order or the last NaN, its index in the input's plane; the gradient
added into zeros in output order. So the results are the CPU's bits. ATen's own CPU kernel, on
such views, copies the input contiguous, writes through contiguous temporaries and compares
element by element; the runtime's kernel reads the views where they lie and takes the 2x2,
stride-2 windows a row at a time. Later calls of a geometry replay without Python (the runtime's
front computes the ATen ops as the runtime's).

>>> x = torch.randn(2, 3, 8, 8)
>>> values, indices = torch.nn.functional.max_pool2d(x.to("spyre"), 2, return_indices=True)
>>> want = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
>>> torch.equal(values.cpu(), want[0]) and torch.equal(indices.cpu(), want[1])
True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .on_views import common_device, meta_results, on_views
from .operands import default_coords
from .registry import register

Tensor = torch.Tensor
aten = torch.ops.aten


def max_pool2d(self: Tensor, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Sequence[int] = (0,),
               dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
    """``max_pool2d_with_indices``: (values, int64 indices into each input plane), new tensors in
    the default layouts of their shapes; a geometry ATen rejects raises its own error."""
    values = [self, list(kernel_size), list(stride), list(padding), list(dilation), ceil_mode]
    results = [default_coords(tuple(m.shape), m.dtype) for m in meta_results(aten.max_pool2d_with_indices.default, values)]
    return on_views(torch.ops.torch_layouts.max_pool2d.out, values, (0,), results, self.device)


def max_pool2d_backward(grad_output: Tensor, self: Tensor, kernel_size: Sequence[int], stride: Sequence[int],
                        padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool, indices: Tensor) -> Tensor:
    """``max_pool2d_with_indices_backward``: the input's gradient, a new tensor in the default
    layout of its shape; an index outside its plane (other than -1, which ATen skips) raises a
    ValueError naming it, where ATen's kernel would write outside its buffer."""
    values = [grad_output, self, list(kernel_size), list(stride), list(padding), list(dilation), ceil_mode, indices]
    (result,) = meta_results(aten.max_pool2d_with_indices_backward.default, values)
    return on_views(torch.ops.torch_layouts.max_pool2d_backward.grad_input, values, (0, 1, 7),
                    [default_coords(tuple(result.shape), result.dtype)],
                    common_device([grad_output, self, indices]))[0]


def register_all() -> None:
    register("max_pool2d_with_indices", max_pool2d)
    register("max_pool2d_with_indices_backward", max_pool2d_backward)
