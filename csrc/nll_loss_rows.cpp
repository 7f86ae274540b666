#include "nll_loss_rows.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>

namespace torch_layouts {
namespace {

// Whether `rows` (2-D float32, at least one row) and `target` (1-D int64, an entry per row) are
// what the row kernels take, with float32 scalars `a` and `b` of one element each.
bool row_operands(const at::Tensor& rows, const at::Tensor& target, int64_t reduction, const at::Tensor& a,
                  const at::Tensor& b) {
  return rows.scalar_type() == at::kFloat && rows.dim() == 2 && rows.size(0) > 0 && target.dim() == 1 &&
         target.scalar_type() == at::kLong && target.size(0) == rows.size(0) && (reduction == 1 || reduction == 2) &&
         a.scalar_type() == at::kFloat && a.numel() == 1 && b.scalar_type() == at::kFloat && b.numel() == 1;
}

// ceil(log2(x)) for x > 2, else 1: the exponent ATen's cascade takes its level size from.
int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v != 0; v >>= 1) ++bits;
  return bits;
}

}  // namespace

bool nll_loss_rows(const at::Tensor& self, const at::Tensor& target, int64_t reduction, int64_t ignore_index,
                   const at::Tensor& output, const at::Tensor& total_weight) {
  if (!row_operands(self, target, reduction, output, total_weight)) return false;
  const int64_t rows = self.size(0), classes = self.size(1), row_step = self.stride(0), class_step = self.stride(1);
  const int64_t target_step = target.stride(0);
  const float* x = self.const_data_ptr<float>();
  const int64_t* t = target.const_data_ptr<int64_t>();
  constexpr int64_t kLevels = 8;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(rows) / kLevels);
  const int64_t level_mask = (int64_t(1) << level_power) - 1;
  std::array<float, kLevels> sums{};
  int64_t ignored = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t cls = t[b * target_step];
    if (cls == ignore_index) {
      ++ignored;
      continue;
    }
    TORCH_CHECK_INDEX(cls >= 0 && cls < classes, "Target ", cls, " is out of bounds.");
    sums[0] -= x[b * row_step + cls * class_step];
    for (int64_t j = 0; j + 1 < kLevels && (b & (level_mask << (j * level_power))) == 0; ++j) {
      sums[j + 1] += sums[j];  // a level full: carried into the next
      sums[j] = 0;
    }
  }
  const float count = static_cast<float>(rows - ignored);
  float loss = std::accumulate(sums.begin(), sums.end(), 0.0f);
  if (reduction == 1) loss /= count;
  *output.mutable_data_ptr<float>() = loss;
  *total_weight.mutable_data_ptr<float>() = count;
  return true;
}

bool nll_loss_backward_rows(const at::Tensor& grad_output, const at::Tensor& target, int64_t reduction,
                            int64_t ignore_index, const at::Tensor& total_weight, const at::Tensor& grad_input) {
  if (!row_operands(grad_input, target, reduction, grad_output, total_weight)) return false;
  const int64_t rows = grad_input.size(0), classes = grad_input.size(1);
  const int64_t row_step = grad_input.stride(0), class_step = grad_input.stride(1), target_step = target.stride(0);
  float* g = grad_input.mutable_data_ptr<float>();
  const int64_t* t = target.const_data_ptr<int64_t>();
  const float out = *grad_output.const_data_ptr<float>();
  const float grad = -(reduction == 1 ? out / *total_weight.const_data_ptr<float>() : out);
  for (int64_t b = 0; b < rows; ++b) {  // zeros first, as ATen's zero_()
    for (int64_t c = 0; c < classes; ++c) g[b * row_step + c * class_step] = 0.0f;
  }
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t cls = t[b * target_step];
    if (cls == ignore_index) continue;
    TORCH_CHECK_INDEX(cls >= 0 && cls < classes, "Target ", cls, " is out of bounds.");
    g[b * row_step + cls * class_step] = grad;
  }
  return true;
}

}  // namespace torch_layouts
