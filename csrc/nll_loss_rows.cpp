#include "nll_loss_rows.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <optional>

#include "value_fill.h"

namespace torch_layouts {
namespace {

// How class c of a row lies in a view of classes (nll_loss_rows.h): the row dims' sizes and
// strides (elements), and the real classes.
struct Classes {
  c10::SmallVector<int64_t, 4> sizes, strides;
  int64_t count = 0;

  // Element offset of class c (c < count) from its row's start.
  int64_t offset(int64_t c) const {
    int64_t off = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      off += (c % sizes[d]) * strides[d];
      c /= sizes[d];
    }
    return off;
  }
};

// The classes of `rows` (float32, at least one row, a row's dims after the first) given `target`
// (1-D int64, an entry per row), `reduction` and float32 scalars `a` and `b` of one element each,
// or none where the row kernels do not take them. `classes` (-1: every element of a row) must
// be at least 1 and at most a row's elements.
std::optional<Classes> row_classes(const at::Tensor& rows, const at::Tensor& target, int64_t reduction,
                                   const at::Tensor& a, const at::Tensor& b, int64_t classes) {
  if (!(rows.scalar_type() == at::kFloat && rows.dim() >= 2 && rows.size(0) > 0 && target.dim() == 1 &&
        target.scalar_type() == at::kLong && target.size(0) == rows.size(0) && (reduction == 1 || reduction == 2) &&
        a.scalar_type() == at::kFloat && a.numel() == 1 && b.scalar_type() == at::kFloat && b.numel() == 1)) {
    return std::nullopt;
  }
  Classes c;
  for (int64_t d = 1; d < rows.dim(); ++d) {
    c.sizes.push_back(rows.size(d));
    c.strides.push_back(rows.stride(d));
  }
  const int64_t elements = c10::multiply_integers(c.sizes);
  c.count = classes < 0 ? elements : classes;
  if (c.count < 1 || c.count > elements) return std::nullopt;
  return c;
}

// ceil(log2(x)) for x > 2, else 1: the exponent ATen's cascade takes its level size from.
int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v != 0; v >>= 1) ++bits;
  return bits;
}

// Elements a thread zeroes at least: fewer run on the calling thread (PyTorch's grain for copies).
constexpr int64_t kParallelElements = 32768;

// Zeros the first `c.count` classes of rows [begin, end) of `g` (rows `row_step` elements apart),
// in the buffer's order where a row's classes lie in runs of its last dim (a stick column's rows
// together: adjacent rows' sticks are adjacent), else class by class.
void zero_rows(float* g, int64_t begin, int64_t end, int64_t row_step, const Classes& c) {
  const size_t last = c.sizes.size() - 1;
  if (c.strides[last] != 1) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t k = 0; k < c.count; ++k) g[b * row_step + c.offset(k)] = 0.0f;
    }
    return;
  }
  const int64_t run = c.sizes[last];
  for (int64_t first = 0; first < c.count; first += run) {  // a run of classes of every row
    fill_rows(g + c.offset(first), begin, end, row_step, std::min(run, c.count - first), 0.0f);
  }
}

// zero_rows over every row, split by rows over the intra-op threads as the row kernels split
// them (each thread then zeroes the rows that it reads in the next row kernel, log_softmax's
// backward): the backward of 1024x1000 float32, 2 threads, 44 -> 30 us (the CPU's 36-55).
void zero_classes(float* g, int64_t rows, int64_t row_step, const Classes& c) {
  const int64_t grain = std::max<int64_t>(1, kParallelElements / c.count);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { zero_rows(g, begin, end, row_step, c); });
}

}  // namespace

bool nll_loss_rows(const at::Tensor& self, const at::Tensor& target, int64_t reduction, int64_t ignore_index,
                   const at::Tensor& output, const at::Tensor& total_weight, int64_t classes) {
  const std::optional<Classes> c = row_classes(self, target, reduction, output, total_weight, classes);
  if (!c) return false;
  const int64_t rows = self.size(0), row_step = self.stride(0), target_step = target.stride(0);
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
    TORCH_CHECK_INDEX(cls >= 0 && cls < c->count, "Target ", cls, " is out of bounds.");
    sums[0] -= x[b * row_step + c->offset(cls)];
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
                            int64_t ignore_index, const at::Tensor& total_weight, const at::Tensor& grad_input,
                            int64_t classes) {
  const std::optional<Classes> c = row_classes(grad_input, target, reduction, grad_output, total_weight, classes);
  if (!c) return false;
  const int64_t rows = grad_input.size(0), row_step = grad_input.stride(0), target_step = target.stride(0);
  const int64_t* t = target.const_data_ptr<int64_t>();
  for (int64_t b = 0; b < rows; ++b) {  // every target checked before anything is written
    const int64_t cls = t[b * target_step];
    TORCH_CHECK_INDEX(cls == ignore_index || (cls >= 0 && cls < c->count), "Target ", cls, " is out of bounds.");
  }
  float* g = grad_input.mutable_data_ptr<float>();
  const float out = *grad_output.const_data_ptr<float>();
  const float grad = -(reduction == 1 ? out / *total_weight.const_data_ptr<float>() : out);
  zero_classes(g, rows, row_step, *c);  // zeros first, as ATen's zero_()
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t cls = t[b * target_step];
    if (cls != ignore_index) g[b * row_step + c->offset(cls)] = grad;
  }
  return true;
}

}  // namespace torch_layouts
