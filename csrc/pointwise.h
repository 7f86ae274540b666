// Fused pointwise kernels on CPU views of device buffers, where ATen would take two passes or
// its slow mixed-dtype loop. Each computes exactly what the ATen ops it replaces compute.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// out = (a * b) * float(scale), as ``torch.mul(a, b, out=out).mul_(scale)`` rounds it: float32
// a and out, b float32 or bool (read as 0 or 1). Dropout's product and its backward.
void scaled_product(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double scale);

// Dropout's forward from its draws d (0 or 1, x's dtype): out = (x * d) * float(scale) as the CPU's
// ``torch.mul(x, d, out=out).mul_(scale)`` rounds it, and keep = d != 0, in one pass (float32,
// float16 or bfloat16 x, d and out; bool keep).
void dropout_apply(const at::Tensor& out, const at::Tensor& keep, const at::Tensor& x, const at::Tensor& draws,
                   double scale);

}  // namespace torch_layouts
