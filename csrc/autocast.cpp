// Autocast for spyre (`torch.autocast("spyre")`): the cast policies CUDA applies, per op, on the
// AutocastPrivateUse1 key; every other op passes through uncast.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_layouts {
namespace {

using namespace at;  // the op lists spell their signatures unqualified, as inside ATen

#define SPYRE_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define SPYRE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define SPYRE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define SPYRE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(SPYRE_LOWER_PRECISION_FP)
  AT_FORALL_FP32(SPYRE_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(SPYRE_PROMOTE)
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

}  // namespace
}  // namespace torch_layouts
