// Giving a spyre buffer a layout: the C++ side of set_tensor_metadata (backend_meta.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "tensor_impl.h"

namespace torch_layouts {

// Records that the bytes of `tensor`'s raw device storage (no layout yet) are laid out as `layout`.
void attach_layout(const at::Tensor& tensor, LayoutPtr layout);

// Moves `fresh`'s device buffer (and so its layout) into `tensor`'s storage, which every view
// of it shares; `fresh` is left with an empty storage.
void adopt_buffer(const at::Tensor& tensor, const at::Tensor& fresh);

}  // namespace torch_layouts
