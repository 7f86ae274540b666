// Fused row kernels on strided CPU views of device buffers: softmax, layer norm, their
// backward, row sums and extremes, each one sweep over the tiles with no dense copy of the tensor.
//
// Every view has the same shape (outer dims..., row dims...): the last `width` dims make a row,
// in whatever strides the layout gives them (a stick dim's tiles, a dim_order, HTP chunks).
// `length` (-1: the whole row) is a row's real elements, its first ones in row order: the rest
// is padding (a padded stick's), neither read nor written, and the per-column vectors have that
// many elements.
// Blocks of rows are gathered into float32 in cache (float16/bfloat16 converted), computed
// there (row_math.h) and scattered into the output views, over all threads
// (docs/design.md, "Row kernels"). Per-row results (mean, rstd, sums) are contiguous float32
// (rows,) tensors and per-column ones (weight/bias gradients) contiguous float32 (length,).
#pragma once

#include <string>

#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_layouts {

void rows_softmax(const at::Tensor& x, const at::Tensor& out, int64_t width, bool log, bool safe, int64_t length);
void rows_softmax_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& out, int64_t width,
                           bool log, int64_t length);
// rms: RMS norm (no mean: `mean` gets zeros; rstd from the mean of the squares; no bias).
void rows_layer_norm(const at::Tensor& x, const at::Tensor& out, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps, const at::Tensor& mean,
                     const at::Tensor& rstd, int64_t width, int64_t length, bool rms = false);
// The backward's mean and rstd are (rows,) vectors or row views of grad's shape (one float32 value
// per row, stride 0 along the row dims: where the forward's results lie, read in place); with rms
// the mean is not read (0).
void rows_layer_norm_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean,
                              const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& grad_input,
                              const std::optional<at::Tensor>& grad_weight,
                              const std::optional<at::Tensor>& grad_bias, int64_t width, int64_t length,
                              bool rms = false);
// A float32 buffer that holds one value per row and padding everywhere else (Spyre's sparse result
// of a reduction over the sticks): row i's value at offset + i * step, `pad` at every other element.
struct SparseRows {
  float* buffer;
  int64_t numel, offset, step;
  float pad;
};

// Each row's sum into out, float32, divided by `divisor` (a mean's count: the bits of ATen's sum
// and then its division in float32). With `sparse`, into that buffer instead (out unused): every
// element of it written, each thread its rows' part. `length`: a row's real elements, its first
// ones (-1: the whole row), as rows_cumsum's.
void rows_sum(const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t divisor = 1,
              const SparseRows* sparse = nullptr, int64_t length = -1);
// Each row's maximum (max false: minimum) into out, float32 (exact for float16 and bfloat16 rows);
// NaN where the row holds one, as ATen's amax and amin. `sparse` and `length` as rows_sum's.
void rows_extreme(const at::Tensor& x, const at::Tensor& out, int64_t width, bool max,
                  const SparseRows* sparse = nullptr, int64_t length = -1);

// indices := each row's index of its maximum (max false: minimum), the first among ties, or of
// its first NaN, as ATen's argmax and argmin; values (may be absent) := that element, float32 (max
// and min over a dim). int64 and float32 contiguous CPU tensors of one element a row, in the
// rows' order. `length` as rows_cumsum's.
void rows_arg_extreme(const at::Tensor& x, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                      int64_t width, int64_t length, bool max);

// out := each row's running sums (ATen's cumsum along the row: float32 accumulated in double,
// float16 and bfloat16 in float32, each sum rounded to the dtype); out may be x.
void rows_cumsum(const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t length = -1);

// Runs the row math in one of row_math_sets() (tests run each); returns the old set's name.
std::string rows_set_math(const std::string& set);

}  // namespace torch_layouts
