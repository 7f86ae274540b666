// Softmax's and layer norm's replays in the runtime's front (csrc/kernel_front.h): ops/softmax.py
// and ops/layer_norm.py offer,
// for a call whose operands it read where they lie, the row views of its buffers and where its
// per-row and per-column results go; later calls of that geometry run the row kernels
// (row_kernels.h) on those views without Python.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernel_front.h"

namespace torch_layouts {

// A float32 vector's values placed into a new tensor of `layout`: per piece, the view of the
// tensor's buffer and the view of the vector (ops/reductions.Placement).
struct Placed {
  LayoutPtr layout;
  std::vector<std::pair<BufferView, BufferView>> pieces;
  // For a float32 layout: (buffer element, vector index) of every piece's element, in buffer
  // order, which placed() writes directly into the filled buffer (see index_placed); the vector's
  // elements it reads (the largest index + 1).
  std::vector<std::pair<int64_t, int64_t>> elements;
  int64_t values = 0;
};

// A softmax (`own`: its input) or softmax backward (`own`: grad and output) of op `op`: the row views
// of the operands, then the result's (a new tensor of `out`), the row dims, a row's real elements
// (-1: all; row_kernels.h), and the kind.
bool offer_softmax(const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own,
                   std::vector<BufferView> rows, LayoutPtr out, int64_t width, int64_t length, bool log, bool safe);

// cumsum(input, dim, dtype=None) along the rows: the input's row view, the result's layout and
// row view, the row dims and a row's real elements (-1: all).
bool offer_cumsum(const at::Tensor& input, BufferView input_rows, LayoutPtr out, BufferView out_rows, int64_t width,
                  int64_t length);

// native_layer_norm(input, normalized_shape, weight?, bias?, eps): the input's row view, the
// weight's and bias's column views (their values along a row), the result's layout and row view,
// the number of rows, the row dims and a row's real elements (-1: all), and where mean and rstd go.
// With `rms_eps` (the eps of a call passing None): _fused_rms_norm(input, normalized_shape,
// weight?, eps?), no bias, where rstd goes.
bool offer_layer_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, BufferView input_rows, std::optional<BufferView> weight_cols,
                      std::optional<BufferView> bias_cols, LayoutPtr out, BufferView out_rows, int64_t rows,
                      int64_t width, int64_t length, Placed stats, std::optional<double> rms_eps = std::nullopt);

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask): the row views of grad_out and input, mean's and rstd's row-value views, the
// weight's column view, grad_input's layout and row view (if asked for), and where the weight and
// bias gradients (per-column sums of `length`, a row's real elements) go (if asked for). No mean
// view: _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight?, output_mask).
bool offer_layer_norm_backward(const std::vector<std::pair<int64_t, at::Tensor>>& own, BufferView grad_rows,
                               BufferView input_rows, std::optional<BufferView> mean_values, BufferView rstd_values,
                               std::optional<BufferView> weight_cols, LayoutPtr grad_input,
                               std::optional<BufferView> grad_input_rows, std::optional<Placed> grad_weight,
                               std::optional<Placed> grad_bias, int64_t length, int64_t width);

}  // namespace torch_layouts
