// Which kernel F.scaled_dot_product_attention runs on spyre. PyTorch asks a DispatchStub (not the
// `_fused_sdp_choice` op), so the stub forwards to the op's spyre kernel, where the choice is
// made (torch_layouts/ops/attention.py); PyTorch's math path until that kernel is registered.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>

namespace torch_layouts {
namespace {

constexpr int64_t kMath = 0;  // sdp::SDPBackend::math

int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  static const auto op = c10::Dispatcher::singleton().findOp({"aten::_fused_sdp_choice", ""});
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return kMath;
  return at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

}  // namespace
}  // namespace torch_layouts

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_layouts::sdp_choice)
}  // namespace at::native
