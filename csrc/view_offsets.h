// Device offsets of the elements of a view of a device tensor's base (for view copies).
#pragma once

#include <ATen/core/Tensor.h>

#include "bound_layout.h"

namespace torch_layouts {

// An int64 CPU tensor of `sizes`: the device element offset of each element of the view.
// Throws IndexError if an element of the view is not an element of the base tensor.
at::Tensor view_offsets(const BoundLayout& layout, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                        int64_t storage_offset);

// Offsets of every broadcast copy of an element, relative to its first copy (a 1-D int64
// tensor; just {0} for layouts without broadcast dims).
at::Tensor copy_offsets(const BoundLayout& layout);

}  // namespace torch_layouts
