// Pinned (page-locked) host memory for spyre transfers: what `Tensor.pin_memory()` returns.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_layouts {

// Host allocator whose blocks are locked into RAM (mlock, best effort) and remembered as pinned.
c10::Allocator* pinned_allocator();

// True when `ptr` lies inside a live block of the pinned allocator.
bool is_pinned(const void* ptr);

}  // namespace torch_layouts
