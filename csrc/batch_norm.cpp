// Batch norm on strided views: torch_layouts::batch_norm.out and batch_norm_backward.out, ATen's
// native_batch_norm and its backward bit for bit on CPU tensors of any strides (ops/convolution.py
// passes views of the device buffers; the runtime's front replays them as those ops' computes).
// ATen's CPU kernels give their contiguous path's bits only to contiguous operands (their strided
// path sums in another order), so the device used to relayout every operand row-major and copy
// each result back: 16x32x32x32 float32 in Spyre's default layout (N beside the stick), 2 MiB
// each way, five times a training step. Float32 operands with planes of more than one element
// take ATen's contiguous arithmetic here, on the views. Forward: per channel, the sum in double
// one element at a time in (batch, row, column) order, the mean, the sum of the squares of
// (x - mean) in float likewise, ATen's statistics update, then y = x * alpha + beta (alpha =
// invstd * weight, beta = bias - mean * alpha); eight channels are summed at once, each its own
// sequence of additions (ATen sums one channel at a time, latency-bound). Backward: per plane,
// the gradient's sum and its dot product with (x - mean) in ATen's vectors of 8 lanes and their
// butterfly, added over the batch in double, then the input's gradient. The products and sums
// are fused exactly where ATen's vectorized kernels fuse them (aten_fuses_scaled_add). Other
// operands run ATen's kernels on contiguous copies.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "isa_tables.h"

namespace torch_layouts {
namespace {

constexpr int kGroup = 8;  // channels summed at once
// ATen's vectors of floats in batch norm's backward: its AVX2 kernels run under AVX-512 too
// (REGISTER_DISPATCH registers no AVX-512 one), and its DEFAULT ones are 8 wide as well.
constexpr int kLanes = 8;

struct BatchNormRows {
  void (*sums)(const float* x, const int64_t* offsets, int64_t n, int64_t sn, int64_t h, int64_t sh, int64_t w,
               int64_t sw, const float* mean, double* out);
  void (*affine)(const float* x, float* y, int64_t n, float a, float b, bool fused);
  void (*lanes)(const float* dy, const float* x, int64_t h, int64_t sh_dy, int64_t sh_x, int64_t w, float mean,
                bool fused, float* sums, float* dots);
  void (*grad)(const float* dy, const float* x, float* out, int64_t n, float mean, float k, float grad_mean,
               float invstd, float w, bool train, bool fused);
};

namespace portable {
#include "batch_norm_rows.h"
}  // namespace portable

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#include "batch_norm_rows.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
namespace avx512 {
#include "batch_norm_rows.h"
}  // namespace avx512
#pragma GCC pop_options
#endif

const BatchNormRows& rows_table() {
  return *TORCH_LAYOUTS_BEST_ISA_TABLE(&portable::kTable, &avx2::kTable, &avx512::kTable);
}

// A 3-D (N, C, L) or 4-D (N, C, H, W) operand as (batch, rows, columns) with strides, and the
// channels' stride.
struct Planes {
  int64_t n, h, w, sn, sc, sh, sw;
  explicit Planes(const at::Tensor& t)
      : n(t.size(0)), h(t.dim() == 4 ? t.size(2) : 1), w(t.size(-1)), sn(t.stride(0)), sc(t.stride(1)),
        sh(t.dim() == 4 ? t.stride(2) : 0), sw(t.stride(-1)) {}
};

bool is_float_vector(const std::optional<at::Tensor>& t, int64_t channels) {
  return !t.has_value() || !t->defined() ||
         (t->scalar_type() == at::kFloat && t->dim() == 1 && t->size(0) == channels);
}

const at::Tensor* defined(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined() ? &*t : nullptr; }

// Channel c of a float32 vector (any stride).
float& element(const at::Tensor* t, int64_t c) { return t->mutable_data_ptr<float>()[c * t->stride(0)]; }

// A contiguous copy of an optional operand (ATen's contiguous path takes contiguous operands).
std::optional<at::Tensor> contiguous(const std::optional<at::Tensor>& t) {
  return defined(t) ? std::optional<at::Tensor>(t->contiguous()) : std::optional<at::Tensor>();
}

// ATen's kernel on contiguous copies (its contiguous path's bits), the results copied out.
void by_aten(const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
             const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
             bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
             at::Tensor& save_invstd) {
  std::optional<at::Tensor> mean = contiguous(running_mean), var = contiguous(running_var);
  auto [y, m, s] = at::native_batch_norm(input.contiguous(), contiguous(weight), contiguous(bias), mean, var, training,
                                         momentum, eps);
  out.copy_(y);
  if (save_mean.numel() == m.numel()) save_mean.copy_(m);
  if (save_invstd.numel() == s.numel()) save_invstd.copy_(s);
  if (mean && !mean->is_same(*running_mean)) running_mean->copy_(*mean);
  if (var && !var->is_same(*running_var)) running_var->copy_(*var);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_out(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps, at::Tensor& out, at::Tensor& save_mean, at::Tensor& save_invstd) {
  TORCH_CHECK_VALUE(input.dim() >= 2, "batch_norm: input must have a batch and a channel dim, got size ",
                    input.sizes());
  TORCH_CHECK_VALUE(out.sizes() == input.sizes() && out.scalar_type() == input.scalar_type(),
                    "batch_norm: out must be a ", input.scalar_type(), " tensor of size ", input.sizes(), ", got ",
                    out.scalar_type(), " of size ", out.sizes());
  const int64_t channels = input.size(1), count = input.numel() / std::max<int64_t>(1, channels);
  const bool stats_out = save_mean.scalar_type() == at::kFloat && save_invstd.scalar_type() == at::kFloat &&
                         save_mean.dim() == 1 && save_invstd.dim() == 1 && save_mean.size(0) == channels &&
                         save_invstd.size(0) == channels;
  const bool ours = input.scalar_type() == at::kFloat && (input.dim() == 3 || input.dim() == 4) &&
                    input.numel() > 0 && count / input.size(0) > 1 && is_float_vector(weight, channels) &&
                    is_float_vector(bias, channels) && is_float_vector(running_mean, channels) &&
                    is_float_vector(running_var, channels) &&
                    (training ? stats_out : defined(running_mean) && defined(running_var));
  if (!ours) {
    by_aten(input, weight, bias, running_mean, running_var, training, momentum, eps, out, save_mean, save_invstd);
    return {out, save_mean, save_invstd};
  }
  const BatchNormRows& table = rows_table();
  const bool fused = aten_fuses_scaled_add();
  const Planes x(input), y(out);
  const float* in = input.const_data_ptr<float>();
  std::vector<float> mean(static_cast<size_t>(channels)), invstd(static_cast<size_t>(channels));
  if (training) {
    // ATen's collect_stats (contiguous): per channel, the sum, the mean, the squares' sum
    std::vector<double> sums(static_cast<size_t>(channels)), squares(static_cast<size_t>(channels));
    const int64_t groups = (channels + kGroup - 1) / kGroup;
    for (const bool second : {false, true}) {
      at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
        for (int64_t g = begin; g < end; ++g) {
          int64_t offsets[kGroup];
          float means[kGroup];
          double result[kGroup];
          for (int k = 0; k < kGroup; ++k) {  // a last group's missing channels repeat its last one
            const int64_t c = std::min(g * kGroup + k, channels - 1);
            offsets[k] = c * x.sc;
            means[k] = mean[static_cast<size_t>(c)];
          }
          table.sums(in, offsets, x.n, x.sn, x.h, x.sh, x.w, x.sw, second ? means : nullptr, result);
          for (int k = 0; k < kGroup && g * kGroup + k < channels; ++k) {
            (second ? squares : sums)[static_cast<size_t>(g * kGroup + k)] = result[k];
          }
        }
      });
      if (!second) {
        for (int64_t c = 0; c < channels; ++c) {
          mean[static_cast<size_t>(c)] = static_cast<float>(sums[static_cast<size_t>(c)] / static_cast<double>(count));
        }
      }
    }
    // ATen's update_stats: the saved statistics and the running ones, in its types
    const float m = static_cast<float>(momentum);
    for (int64_t c = 0; c < channels; ++c) {
      const auto i = static_cast<size_t>(c);
      const float var_sum = static_cast<float>(squares[i]);
      const double var = static_cast<double>(var_sum / static_cast<float>(count));
      const float saved = (var != 0.0 || eps != 0.0) ? static_cast<float>(1.0 / std::sqrt(var + eps)) : 0.0f;
      element(&save_mean, c) = mean[i];
      element(&save_invstd, c) = saved;
      invstd[i] = saved;
      if (const at::Tensor* r = defined(running_mean)) element(r, c) = m * mean[i] + (1 - m) * element(r, c);
      if (const at::Tensor* r = defined(running_var)) {
        const double unbiased = static_cast<double>(var_sum / static_cast<float>(count - 1));
        element(r, c) =
            static_cast<float>(static_cast<double>(m) * unbiased + static_cast<double>((1 - m) * element(r, c)));
      }
    }
  } else {
    for (int64_t c = 0; c < channels; ++c) {
      mean[static_cast<size_t>(c)] = element(defined(running_mean), c);
      invstd[static_cast<size_t>(c)] = 1 / std::sqrt(element(defined(running_var), c) + static_cast<float>(eps));
    }
  }
  // ATen's linear and constant terms, then y = x * alpha + beta
  std::vector<float> alpha(static_cast<size_t>(channels)), beta(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const auto i = static_cast<size_t>(c);
    const float w = defined(weight) ? element(defined(weight), c) : 1.0f;
    const float b = defined(bias) ? element(defined(bias), c) : 0.0f;
    alpha[i] = invstd[i] * w;
    beta[i] = fused ? std::fma(-mean[i], alpha[i], b) : b - mean[i] * alpha[i];
  }
  float* o = out.mutable_data_ptr<float>();
  at::parallel_for(0, x.n * channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n = p / channels, c = p % channels;
      const float a = alpha[static_cast<size_t>(c)], b = beta[static_cast<size_t>(c)];
      for (int64_t r = 0; r < x.h; ++r) {
        const float* from = in + n * x.sn + c * x.sc + r * x.sh;
        float* to = o + n * y.sn + c * y.sc + r * y.sh;
        if (x.sw == 1 && y.sw == 1) {
          table.affine(from, to, x.w, a, b, fused);
        } else {
          for (int64_t j = 0; j < x.w; ++j) {
            to[j * y.sw] = fused ? std::fma(from[j * x.sw], a, b) : from[j * x.sw] * a + b;
          }
        }
      }
    }
  });
  return {out, save_mean, save_invstd};
}

// ATen's vec_reduce_all over `used` lanes of v: a butterfly where its AVX2 and AVX-512 kernels
// run (lane i plus lane i ^ s, s = lanes / 2 down to 1), else lane 0 plus each next lane in turn
// (its DEFAULT kernels, and a plane shorter than the lanes).
float reduce_lanes(float (&v)[kLanes], int64_t used, bool butterfly) {
  if (!butterfly || used < kLanes) {
    float a = v[0];
    for (int64_t i = 1; i < std::min<int64_t>(used, kLanes); ++i) a += v[i];
    return a;
  }
  for (int s = kLanes / 2; s >= 1; s /= 2) {
    float t[kLanes];
    for (int i = 0; i < kLanes; ++i) t[i] = v[i] + v[i ^ s];
    std::copy(t, t + kLanes, v);
  }
  return v[0];
}

// ATen's native_batch_norm_backward on contiguous copies, the results copied out.
void backward_by_aten(const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
                      const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
                      bool train, double eps, std::array<bool, 3> mask, at::Tensor& grad_input,
                      at::Tensor& grad_weight, at::Tensor& grad_bias) {
  auto [gi, gw, gb] = at::native_batch_norm_backward(grad_out.contiguous(), input.contiguous(), contiguous(weight),
                                                     contiguous(running_mean), contiguous(running_var),
                                                     contiguous(save_mean), contiguous(save_invstd), train, eps, mask);
  for (auto [from, to] : {std::pair<at::Tensor*, at::Tensor*>{&gi, &grad_input}, {&gw, &grad_weight}, {&gb, &grad_bias}}) {
    if (from->defined() && to->sizes() == from->sizes()) to->copy_(*from);
  }
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_backward_out(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask, at::Tensor& grad_input, at::Tensor& grad_weight, at::Tensor& grad_bias) {
  TORCH_CHECK_VALUE(input.dim() >= 2 && grad_out.sizes() == input.sizes(),
                    "batch_norm_backward: grad_out must be of the input's size ", input.sizes(), ", got ",
                    grad_out.sizes());
  const int64_t channels = input.size(1), count = input.numel() / std::max<int64_t>(1, channels);
  auto fits = [&](const at::Tensor& t, c10::IntArrayRef size) { return t.sizes() == size && t.scalar_type() == at::kFloat; };
  const bool ours = input.scalar_type() == at::kFloat && grad_out.scalar_type() == at::kFloat &&
                    (input.dim() == 3 || input.dim() == 4) && input.numel() > 0 && count / input.size(0) > 1 &&
                    input.stride(-1) == 1 && grad_out.stride(-1) == 1 && grad_input.stride(-1) == 1 &&
                    mask[0] && mask[1] && mask[2] && fits(grad_input, input.sizes()) &&
                    fits(grad_weight, {channels}) && fits(grad_bias, {channels}) && is_float_vector(weight, channels) &&
                    is_float_vector(running_mean, channels) && is_float_vector(running_var, channels) &&
                    is_float_vector(save_mean, channels) && is_float_vector(save_invstd, channels) &&
                    (train ? defined(save_mean) && defined(save_invstd) : defined(running_mean) && defined(running_var));
  if (!ours) {
    backward_by_aten(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask,
                     grad_input, grad_weight, grad_bias);
    return {grad_input, grad_weight, grad_bias};
  }
  const BatchNormRows& table = rows_table();
  const bool fused = aten_fuses_scaled_add();
  const Planes g(grad_out), x(input), o(grad_input);
  const float* dy = grad_out.const_data_ptr<float>();
  const float* in = input.const_data_ptr<float>();
  float* out = grad_input.mutable_data_ptr<float>();
  at::parallel_for(0, channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const float w = defined(weight) ? element(defined(weight), c) : 1.0f;
      const float mean = train ? element(defined(save_mean), c) : element(defined(running_mean), c);
      const float invstd = train ? element(defined(save_invstd), c)
                                 : static_cast<float>(1 / std::sqrt(element(defined(running_var), c) + eps));
      double sum = 0, dotp = 0;
      for (int64_t n = 0; n < x.n; ++n) {
        float sums[kLanes], dots[kLanes];
        table.lanes(dy + n * g.sn + c * g.sc, in + n * x.sn + c * x.sc, x.h, g.sh, x.sh, x.w, mean, fused,
                    sums, dots);
        sum += reduce_lanes(sums, x.h * x.w, fused);
        dotp += reduce_lanes(dots, x.h * x.w, fused);
      }
      const float k = static_cast<float>(dotp) * invstd * invstd / static_cast<float>(count);
      const auto grad_mean = static_cast<float>(sum / static_cast<double>(count));
      for (int64_t n = 0; n < x.n; ++n) {
        for (int64_t r = 0; r < x.h; ++r) {
          table.grad(dy + n * g.sn + c * g.sc + r * g.sh, in + n * x.sn + c * x.sc + r * x.sh,
                     out + n * o.sn + c * o.sc + r * o.sh, x.w, mean, k, grad_mean, invstd, w, train, fused);
        }
      }
      element(&grad_weight, c) = static_cast<float>(dotp * invstd);
      element(&grad_bias, c) = static_cast<float>(sum);
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_layouts, m) {
  m.def(
      "batch_norm.out(Tensor input, Tensor? weight, Tensor? bias, Tensor(d!)? running_mean, "
      "Tensor(e!)? running_var, bool training, float momentum, float eps, *, Tensor(a!) out, Tensor(b!) save_mean, "
      "Tensor(c!) save_invstd) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
  m.def(
      "batch_norm_backward.out(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, "
      "Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask, *, "
      "Tensor(a!) grad_input, Tensor(b!) grad_weight, Tensor(c!) grad_bias) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
}

TORCH_LIBRARY_IMPL(torch_layouts, CPU, m) {
  m.impl("batch_norm.out", batch_norm_out);
  m.impl("batch_norm_backward.out", batch_norm_backward_out);
}

}  // namespace torch_layouts
