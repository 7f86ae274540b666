#include "embedding_rows.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "value_fill.h"

namespace torch_layouts {
namespace {

// The element offsets of t's positions over dims [begin, end), in row-major order.
std::vector<int64_t> offsets(const at::Tensor& t, int64_t begin, int64_t end) {
  std::vector<int64_t> out{0};
  for (int64_t d = begin; d < end; ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(t.size(d)));
    for (int64_t o : out) {
      for (int64_t i = 0; i < t.size(d); ++i) next.push_back(o + i * t.stride(d));
    }
    out = std::move(next);
  }
  return out;
}

// Weight rows per work item: ATen's grain for this kernel.
constexpr int64_t kRowsPerItem = 1000;

}  // namespace

void embedding_backward_rows(const at::Tensor& grad, const at::Tensor& indices, int64_t padding_idx,
                             const at::Tensor& grad_weight) {
  TORCH_CHECK_VALUE(grad_weight.scalar_type() == at::kFloat && grad_weight.dim() >= 2 &&
                        grad_weight.stride(-1) == 1,
                    "grad_weight must be a float32 view of rows contiguous along its last dim, got ",
                    grad_weight.scalar_type(), " of ", grad_weight.sizes(), " strides ", grad_weight.strides());
  const int64_t lead = grad.dim() - (grad_weight.dim() - 1);
  TORCH_CHECK_VALUE(grad.scalar_type() == at::kFloat && lead >= 0 && grad.stride(-1) == 1 &&
                        grad.sizes().slice(static_cast<size_t>(lead)) == grad_weight.sizes().slice(1),
                    "grad must be a float32 view of the tokens' rows ", grad_weight.sizes().slice(1),
                    " contiguous along its last dim, got ", grad.scalar_type(), " of ", grad.sizes());
  TORCH_CHECK_VALUE(indices.device().is_cpu() && indices.scalar_type() == at::kLong && indices.is_contiguous() &&
                        indices.sizes() == grad.sizes().slice(0, static_cast<size_t>(lead)),
                    "indices must be a contiguous int64 CPU tensor of the tokens' shape ",
                    grad.sizes().slice(0, static_cast<size_t>(lead)), ", got ", indices.scalar_type(), " of ",
                    indices.sizes(), " on ", indices.device());
  const int64_t rows = grad_weight.size(0), run = grad_weight.size(-1), row_step = grad_weight.stride(0);
  const std::vector<int64_t> weight_runs = offsets(grad_weight, 1, grad_weight.dim() - 1);
  const std::vector<int64_t> grad_runs = offsets(grad, lead, grad.dim() - 1);
  const std::vector<int64_t> tokens = offsets(grad, 0, lead);
  const int64_t* index = indices.const_data_ptr<int64_t>();
  const float* g = grad.const_data_ptr<float>();
  float* w = grad_weight.mutable_data_ptr<float>();
  // Each thread zeroes its rows (a run of every row at once where the rows' runs are adjacent: a
  // stick column of Spyre's layout), then adds every token of its rows in index order.
  at::parallel_for(0, rows, kRowsPerItem, [&](int64_t begin, int64_t end) {
    for (int64_t r : weight_runs) fill_rows(w + r, begin, end, row_step, run, 0.0f);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t k = index[i];
      if (k == padding_idx || k < begin || k >= end) continue;
      for (size_t q = 0; q < weight_runs.size(); ++q) {
        float* to = w + k * row_step + weight_runs[q];
        const float* from = g + tokens[i] + grad_runs[q];
        for (int64_t e = 0; e < run; ++e) to[e] += from[e];
      }
    }
  });
}

}  // namespace torch_layouts
