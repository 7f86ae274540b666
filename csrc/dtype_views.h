// Layouts seen through dtype views: a buffer laid out for one element size, read with another.
#pragma once

#include <memory>

#include "bound_layout.h"

namespace torch_layouts {

// The layout of `buffer` (laid out for buffer.dtype) read as elements of `dtype`; nullptr when
// that element size cannot address the buffer (a wider element whose bytes are not adjacent and
// aligned on the device). Narrower elements always can: each buffer element splits into
// adjacent parts, an extra innermost host dim. Results are cached on `buffer`.
std::shared_ptr<const BoundLayout> dtype_view_layout(const BoundLayout& buffer, c10::ScalarType dtype);

}  // namespace torch_layouts
