// `_has_compatible_shallow_copy_type`: CPU and spyre dense tensors can swap impls like CPU and
// CUDA ones (so `param.data = t.to("spyre")` works and `Module.to("spyre")` keeps its Parameters).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace torch_layouts {
namespace {

bool dense_cpu_or_spyre(const at::Tensor& t) {
  const auto keys = t.key_set();
  return t.layout() == c10::kStrided && !t.is_quantized() &&
         (keys.has(c10::DispatchKey::PrivateUse1) || keys.has(c10::DispatchKey::CPU));
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense_cpu_or_spyre(self) && dense_cpu_or_spyre(from));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace torch_layouts
