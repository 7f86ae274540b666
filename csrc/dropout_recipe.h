// native_dropout_backward's replay in the runtime's front (csrc/kernel_front.h): ops/dropout.py
// offers, for a call whose grad and mask it read where they lie, their views and the result's
// layout; later calls of that geometry compute grad * mask * scale (pointwise.h) without Python.
#pragma once

#include "kernel_front.h"

namespace torch_layouts {

// `grad` and `mask` (arguments 0 and 1) read in `grad_view` and `mask_view`, the result a new tensor
// of `out` written through `out_view`.
bool offer_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, BufferView grad_view, BufferView mask_view,
                            LayoutPtr out, BufferView out_view);

}  // namespace torch_layouts
