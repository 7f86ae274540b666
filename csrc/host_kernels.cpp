// Ops that run on host copies like the boxed fallback but need more than it gives:
// convolutions (PyTorch routes backends without a kernel to *_overrideable, which has no
// CPU kernel) and batch norm (its running statistics are updated in place, which the
// schema does not declare, so the boxed fallback would not copy them back).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "runtime_stats.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

at::Tensor host(const at::Tensor& t) { return t.defined() ? to_host(t) : t; }

std::optional<at::Tensor> host(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? std::optional<at::Tensor>(to_host(*t)) : t;
}

at::Tensor device_copy(const at::Tensor& t, c10::Device device) { return t.defined() ? t.to(device) : t; }

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  count_fallback("aten::convolution_overrideable");
  return device_copy(at::convolution(host(input), host(weight), host(bias), stride, padding, dilation, transposed,
                                     output_padding, groups),
                     input.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  count_fallback("aten::convolution_backward_overrideable");
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  auto [gi, gw, gb] = at::convolution_backward(host(grad_output), host(input), host(weight),
                                               at::OptionalIntArrayRef({out_channels}), stride, padding, dilation,
                                               transposed, output_padding, groups, output_mask);
  const auto device = input.device();
  return {device_copy(gi, device), device_copy(gw, device), device_copy(gb, device)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& input,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const std::optional<at::Tensor>& running_mean,
                                                          const std::optional<at::Tensor>& running_var, bool training,
                                                          double momentum, double eps) {
  count_fallback("aten::native_batch_norm");
  std::optional<at::Tensor> mean = host(running_mean), var = host(running_var);
  auto [out, save_mean, save_invstd] =
      at::native_batch_norm(host(input), host(weight), host(bias), mean, var, training, momentum, eps);
  if (training) {
    if (running_mean && running_mean->defined()) running_mean->copy_(*mean);
    if (running_var && running_var->defined()) running_var->copy_(*var);
  }
  const auto device = input.device();
  return {device_copy(out, device), device_copy(save_mean, device), device_copy(save_invstd, device)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
  m.impl("native_batch_norm", batch_norm);
}

}  // namespace torch_layouts
