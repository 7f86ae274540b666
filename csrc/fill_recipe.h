// fill_'s and zero_'s replay in the runtime's front (csrc/kernel_front.h): ops/elementwise.fill_
// offers, for a call on a tensor that is its buffer's whole tensor, the views of the boxes of real
// positions it filled and whether it restored the padding after filling the whole buffer; later
// calls of that geometry fill those views without Python.
#pragma once

#include "kernel_front.h"

namespace torch_layouts {

// `op`: "aten::fill_" (the value is argument 1) or "aten::zero_"; `x` its argument 0.
bool offer_fill(const std::string& op, const at::Tensor& x, std::vector<BufferView> boxes, bool restore_padding);

}  // namespace torch_layouts
