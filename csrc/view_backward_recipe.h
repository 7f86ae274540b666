// select_backward's and slice_backward's replay in the runtime's front (csrc/kernel_front.h):
// ops/view_backward.py offers, for a call it served, the result's layout and the view of the result
// the gradient goes into; later calls of that geometry make the zeros and copy the gradient into
// that view (the runtime's copy) without Python.
#pragma once

#include "kernel_front.h"

namespace torch_layouts {

// `op`: "aten::select_backward" or "aten::slice_backward"; `grad` its argument 0; the view of a new
// tensor of `out`: host `sizes`, `strides`, `offset`. With `reads` (the gradient's and that view's
// strided views of their buffers, in one refinement of the gradient's shape: ops/operands.py
// common_reads) the copy runs on them, as a CPU copy.
bool offer_view_backward(const std::string& op, const at::Tensor& grad, LayoutPtr out, std::vector<int64_t> sizes,
                         std::vector<int64_t> strides, int64_t offset,
                         std::optional<std::pair<BufferView, BufferView>> reads = std::nullopt);

}  // namespace torch_layouts
