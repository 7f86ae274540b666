// The fused LSTM and GRU cells as CPU ops, `torch_layouts::lstm_cell` and `gru_cell` (and their
// backward), with the arguments of ATen's `_thnn_fused_lstm_cell` and `_thnn_fused_gru_cell`
// (`_thnn_fused_lstm_cell_backward_impl`, `_thnn_fused_gru_cell_backward`), which PyTorch calls
// on accelerators and which have no CPU kernel. ops/rnn.py runs it on row-major
// views of the device buffers, and the kernels' front replays it as the compute of those calls
// (kernel_front.cpp's computed_as): one pass over the gates (row_math's lstm_cell) where ATen's
// ops took a dozen (docs/design.md, "Recurrent cells").
#include <ATen/ATen.h>
#include <torch/library.h>

#include "row_math.h"

namespace torch_layouts {
namespace {

// A float32 operand as a contiguous tensor of `numel` elements (null pointer: absent).
const float* dense(const at::Tensor& t, int64_t numel, const char* name, at::Tensor& keep) {
  if (!t.defined()) return nullptr;
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat, "lstm_cell: ", name, " must be float32, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.numel() == numel, "lstm_cell: ", name, " has ", t.numel(), " elements, expected ", numel);
  keep = t.contiguous();
  return keep.const_data_ptr<float>();
}

const float* dense(const std::optional<at::Tensor>& t, int64_t numel, const char* name, at::Tensor& keep) {
  return t ? dense(*t, numel, name, keep) : nullptr;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK_VALUE(cx.dim() == 2, "lstm_cell: cx must be 2-D (batch, hidden), got ", cx.dim(), " dims");
  const int64_t rows = cx.size(0), hidden = cx.size(1);
  at::Tensor keep[5];
  const float* ig = dense(input_gates, rows * 4 * hidden, "input_gates", keep[0]);
  const float* hg = dense(hidden_gates, rows * 4 * hidden, "hidden_gates", keep[1]);
  const float* c = dense(cx, rows * hidden, "cx", keep[2]);
  const float* ib = dense(input_bias, 4 * hidden, "input_bias", keep[3]);
  const float* hb = dense(hidden_bias, 4 * hidden, "hidden_bias", keep[4]);
  at::Tensor hy = at::empty({rows, hidden}, cx.options()), cy = at::empty_like(hy);
  at::Tensor workspace = at::empty({rows, 4 * hidden}, cx.options());
  rows_math().lstm_cell(rows, hidden, ig, hg, ib, hb, c, hy.data_ptr<float>(), cy.data_ptr<float>(),
                        workspace.data_ptr<float>());
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK_VALUE(cx.dim() == 2, "lstm_cell_backward: cx must be 2-D (batch, hidden), got ", cx.dim(), " dims");
  const int64_t rows = cx.size(0), hidden = cx.size(1);
  at::Tensor keep[5];
  const float* ghy = dense(grad_hy, rows * hidden, "grad_hy", keep[0]);
  const float* gcy = dense(grad_cy, rows * hidden, "grad_cy", keep[1]);
  const float* c = dense(cx, rows * hidden, "cx", keep[2]);
  const float* cyp = dense(cy, rows * hidden, "cy", keep[3]);
  const float* ws = dense(workspace, rows * 4 * hidden, "workspace", keep[4]);
  at::Tensor grad_gates = at::empty({rows, 4 * hidden}, cx.options()), grad_cx = at::empty({rows, hidden}, cx.options());
  at::Tensor grad_bias = has_bias ? at::zeros({4 * hidden}, cx.options()) : at::Tensor();
  rows_math().lstm_cell_backward(rows, hidden, ghy, gcy, c, cyp, ws, grad_gates.data_ptr<float>(),
                                 grad_cx.data_ptr<float>(), has_bias ? grad_bias.data_ptr<float>() : nullptr);
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK_VALUE(hx.dim() == 2, "gru_cell: hx must be 2-D (batch, hidden), got ", hx.dim(), " dims");
  const int64_t rows = hx.size(0), hidden = hx.size(1);
  at::Tensor keep[5];
  const float* ig = dense(input_gates, rows * 3 * hidden, "input_gates", keep[0]);
  const float* hg = dense(hidden_gates, rows * 3 * hidden, "hidden_gates", keep[1]);
  const float* h = dense(hx, rows * hidden, "hx", keep[2]);
  const float* ib = dense(input_bias, 3 * hidden, "input_bias", keep[3]);
  const float* hb = dense(hidden_bias, 3 * hidden, "hidden_bias", keep[4]);
  at::Tensor hy = at::empty({rows, hidden}, hx.options()), workspace = at::empty({rows, 5 * hidden}, hx.options());
  rows_math().gru_cell(rows, hidden, ig, hg, ib, hb, h, hy.data_ptr<float>(), workspace.data_ptr<float>());
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  TORCH_CHECK_VALUE(grad_hy.dim() == 2, "gru_cell_backward: grad_hy must be 2-D (batch, hidden), got ",
                    grad_hy.dim(), " dims");
  const int64_t rows = grad_hy.size(0), hidden = grad_hy.size(1);
  at::Tensor keep[2];
  const float* g = dense(grad_hy, rows * hidden, "grad_hy", keep[0]);
  const float* ws = dense(workspace, rows * 5 * hidden, "workspace", keep[1]);
  const auto options = grad_hy.options();
  at::Tensor grad_input = at::empty({rows, 3 * hidden}, options), grad_hidden = at::empty_like(grad_input);
  at::Tensor grad_hx = at::empty({rows, hidden}, options);
  at::Tensor bias_input = has_bias ? at::zeros({3 * hidden}, options) : at::Tensor();
  at::Tensor bias_hidden = has_bias ? at::zeros({3 * hidden}, options) : at::Tensor();
  rows_math().gru_cell_backward(rows, hidden, g, ws, grad_input.data_ptr<float>(), grad_hidden.data_ptr<float>(),
                                grad_hx.data_ptr<float>(), has_bias ? bias_input.data_ptr<float>() : nullptr,
                                has_bias ? bias_hidden.data_ptr<float>() : nullptr);
  return {grad_input, grad_hidden, grad_hx, bias_input, bias_hidden};
}

}  // namespace

TORCH_LIBRARY(torch_layouts, m) {
  m.def(
      "lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "lstm_cell_backward(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, bool has_bias) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None) -> (Tensor, Tensor)");
  m.def("gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_layouts, CPU, m) {
  m.impl("lstm_cell", lstm_cell);
  m.impl("lstm_cell_backward", lstm_cell_backward);
  m.impl("gru_cell", gru_cell);
  m.impl("gru_cell_backward", gru_cell_backward);
}

}  // namespace torch_layouts
