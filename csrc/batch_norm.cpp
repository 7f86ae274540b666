// Batch norm on strided views: torch_layouts::batch_norm.out, ATen's native_batch_norm bit for
// bit on CPU tensors of any strides (ops/convolution.py passes views of the device buffers; the
// runtime's front replays it as native_batch_norm's compute). ATen's CPU kernel gives its
// contiguous path's bits only to contiguous operands (its strided path sums in another order), so
// the device used to relayout the input row-major and copy the output back: 16x32x32x32 float32
// in Spyre's default layout (N beside the stick), 2 MiB each way. Float32 inputs with planes of
// more than one element take ATen's contiguous path's arithmetic here, on the views: per channel,
// the sum in double one element at a time in (batch, row, column) order, the mean, the sum of the
// squares of (x - mean) in float likewise, ATen's statistics update, then y = x * alpha + beta
// (alpha = invstd * weight, beta = bias - mean * alpha, each product and sum fused where ATen's
// vectorized kernels are, aten_fuses_scaled_add). Eight channels are summed at once, each its own
// sequence of additions (ATen sums one channel at a time, so its sums are latency-bound). Other
// inputs run ATen's kernel on contiguous copies.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "isa_tables.h"

namespace torch_layouts {
namespace {

constexpr int kGroup = 8;  // channels summed at once

struct BatchNormRows {
  void (*sums)(const float* x, const int64_t* offsets, int64_t n, int64_t sn, int64_t h, int64_t sh, int64_t w,
               int64_t sw, const float* mean, double* out);
  void (*affine)(const float* x, float* y, int64_t n, float a, float b, bool fused);
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

// A 3-D (N, C, L) or 4-D (N, C, H, W) operand as (batch, channels, rows, columns) with strides.
struct Planes {
  int64_t n, c, h, w, sn, sc, sh, sw;
  explicit Planes(const at::Tensor& t)
      : n(t.size(0)), c(t.size(1)), h(t.dim() == 4 ? t.size(2) : 1), w(t.size(-1)), sn(t.stride(0)),
        sc(t.stride(1)), sh(t.dim() == 4 ? t.stride(2) : 0), sw(t.stride(-1)) {}
};

bool is_float_vector(const std::optional<at::Tensor>& t, int64_t channels) {
  return !t.has_value() || !t->defined() ||
         (t->scalar_type() == at::kFloat && t->dim() == 1 && t->size(0) == channels);
}

const at::Tensor* defined(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined() ? &*t : nullptr; }

// ATen's kernel on contiguous copies (its contiguous path's bits), the results copied out.
void by_aten(const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
             const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
             bool training, double momentum, double eps, at::Tensor& out, at::Tensor& save_mean,
             at::Tensor& save_invstd) {
  auto dense = [](const std::optional<at::Tensor>& t) {
    return defined(t) ? std::optional<at::Tensor>(t->contiguous()) : std::optional<at::Tensor>();
  };
  std::optional<at::Tensor> mean = dense(running_mean), var = dense(running_var);
  auto [y, m, s] = at::native_batch_norm(input.contiguous(), dense(weight), dense(bias), mean, var, training, momentum,
                                         eps);
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
  auto at_ = [](const at::Tensor* t, int64_t c) -> float& { return t->mutable_data_ptr<float>()[c * t->stride(0)]; };
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
      at_(&save_mean, c) = mean[i];
      at_(&save_invstd, c) = saved;
      invstd[i] = saved;
      if (const at::Tensor* r = defined(running_mean)) at_(r, c) = m * mean[i] + (1 - m) * at_(r, c);
      if (const at::Tensor* r = defined(running_var)) {
        const double unbiased = static_cast<double>(var_sum / static_cast<float>(count - 1));
        at_(r, c) = static_cast<float>(static_cast<double>(m) * unbiased + static_cast<double>((1 - m) * at_(r, c)));
      }
    }
  } else {
    for (int64_t c = 0; c < channels; ++c) {
      mean[static_cast<size_t>(c)] = at_(defined(running_mean), c);
      invstd[static_cast<size_t>(c)] = 1 / std::sqrt(at_(defined(running_var), c) + static_cast<float>(eps));
    }
  }
  // ATen's linear and constant terms, then y = x * alpha + beta
  std::vector<float> alpha(static_cast<size_t>(channels)), beta(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const auto i = static_cast<size_t>(c);
    const float w = defined(weight) ? at_(defined(weight), c) : 1.0f, b = defined(bias) ? at_(defined(bias), c) : 0.0f;
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

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_layouts, m) {
  m.def(
      "batch_norm.out(Tensor input, Tensor? weight, Tensor? bias, Tensor(d!)? running_mean, "
      "Tensor(e!)? running_var, bool training, float momentum, float eps, *, Tensor(a!) out, Tensor(b!) save_mean, "
      "Tensor(c!) save_invstd) -> (Tensor(a!), Tensor(b!), Tensor(c!))");
}

TORCH_LIBRARY_IMPL(torch_layouts, CPU, m) { m.impl("batch_norm.out", batch_norm_out); }

}  // namespace torch_layouts
