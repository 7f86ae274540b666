// View kernels: every alias of a device tensor shares its buffer and keeps its layout.
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "tensor_impl.h"

namespace torch_layouts {
namespace {

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  const int64_t offset = storage_offset ? storage_offset->expect_int() : self.storage_offset();
  return make_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  const auto shape = at::infer_size_dv(C10_AS_INTARRAYREF_SLOW(size), self.numel());
  const auto stride = at::detail::computeStride(self.sizes(), self.strides(), shape);
  TORCH_CHECK(stride.has_value(),
              "view size is not compatible with input tensor's size and stride (at least one dimension spans "
              "across two contiguous subspaces). Use .reshape(...) instead.");
  return make_alias(self, shape, *stride, self.storage_offset());
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return make_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), self.storage_offset());
}

at::Tensor alias(const at::Tensor& self) {
  return make_alias(self, self.sizes(), self.strides(), self.storage_offset());
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  const int64_t d = c10::maybe_wrap_dim(dimension, self.dim(), /*wrap_scalar=*/true);
  const int64_t max_size = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK_VALUE(size <= max_size, "maximum size for tensor at dimension ", d, " is ", max_size,
                    " but size is ", size);
  TORCH_CHECK_VALUE(step > 0, "step is ", step, " but must be > 0");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
  sizes.push_back(size);
  strides.push_back(self.dim() == 0 ? 1 : self.stride(d));
  if (self.dim() > 0) {
    sizes[d] = (self.size(d) - size) / step + 1;
    strides[d] = step * self.stride(d);
  }
  return make_alias(self, sizes, strides, self.storage_offset());
}

// PyTorch's dtype view (same bytes, sizes rescaled: ATen's checks and geometry), made as the
// runtime's own view of the elements (make_alias), and checked at once: a view whose elements the
// buffer's layout cannot address is refused here rather than read wrongly later. ATen's own view
// (a plain TensorImpl) of 4 float16 as 8 uint8 spanned the storage's bytes exactly and was read
// as the raw storage, in device order.
at::Tensor view_dtype(const at::Tensor& self, c10::ScalarType dtype) {
  const at::Tensor geometry = at::native::view_dtype(self, dtype);
  at::Tensor out = make_alias(self, geometry.sizes(), geometry.strides(), geometry.storage_offset(), geometry.dtype());
  if (out.element_size() != self.element_size()) element_layout_of(out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_unsafe_view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("alias", alias);
  m.impl("unfold", unfold);
  m.impl("view.dtype", view_dtype);
}

}  // namespace torch_layouts
