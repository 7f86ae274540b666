// native_dropout's and native_dropout_backward's replays in the runtime's front
// (csrc/kernel_front.h): ops/dropout.py offers, for a call whose operands it read where they lie,
// their views and the results' layouts; later calls of that geometry draw and compute (pointwise.h)
// without Python.
#pragma once

#include "kernel_front.h"

namespace torch_layouts {

// native_dropout(x, p, train) (argument 0, read in `x_view`, float32): its keep draws made over a
// CPU tensor of `draws_sizes`/`draws_strides` (empty_like(x)), then moved into a new tensor of
// `values`; the result a new tensor of `values` too, the mask one of `mask`; with `boxes` (the real
// positions of padded coordinates), computed box by box.
bool offer_dropout(const at::Tensor& x, BufferView x_view, std::vector<int64_t> draws_sizes,
                   std::vector<int64_t> draws_strides, LayoutPtr values, LayoutPtr mask,
                   std::vector<std::vector<std::pair<int64_t, int64_t>>> boxes = {});

// `grad` and `mask` (arguments 0 and 1) read in `grad_view` and `mask_view`, the result a new tensor
// of `out` written through `out_view`.
bool offer_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, BufferView grad_view, BufferView mask_view,
                            LayoutPtr out, BufferView out_view);

}  // namespace torch_layouts
