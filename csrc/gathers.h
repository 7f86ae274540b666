// Gathers of whole slices (index_select's replay in the runtime's front: its views, strided views
// of device buffers), copied run by run.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// out.select(dim, i) := self.select(dim, index[i]) for every i, where self and out are views of one
// dtype with the same sizes but along dim, index a 1-D (or 0-dim) int64 or int32 view of
// out.size(dim) entries, each in [0, self.size(dim)), and the slices' innermost contiguous stretch
// (the dims but dim, merged where both views lay them out as one) runs at least 32 bytes: true, the
// rows ATen's index_select gives; else false, having written nothing (ATen's index_select then
// runs, with its errors).
bool gather_slices(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& out);

}  // namespace torch_layouts
