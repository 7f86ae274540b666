// The fused LSTM and GRU cells as CPU ops, `torch_layouts::lstm_cell` and `gru_cell` (and their
// backward), with the arguments of ATen's `_thnn_fused_lstm_cell` and `_thnn_fused_gru_cell`
// (`_thnn_fused_lstm_cell_backward_impl`, `_thnn_fused_gru_cell_backward`), which PyTorch calls
// on accelerators and which have no CPU kernel; and their out= forms, which take the gates' runs
// of lanes where the device buffers hold them (a stick's 32 lanes). ops/rnn.py runs them
// on views of the buffers (the out= forms where the hidden size is whole sticks, the others on
// row-major copies), and the kernels' front replays them as the compute of those calls
// (kernel_front.cpp's computed_as): one pass over the gates (row_math's cells, a run of lanes at a
// time) where ATen's ops took a dozen (docs/design.md, "Recurrent cells").
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <vector>

#include "row_math.h"

namespace torch_layouts {
namespace {

// A cell operand as runs of lanes: gates and workspaces [B, G, J, L] (G runs a row: the gates),
// states [B, J, L], biases [G, J, L] (as [1, G, J, L]), the lanes contiguous. The functional ops
// take dense 2-D operands ([B, G * H]: J = 1, L = H); their out= forms take the views
// ops/rnn.py reads device buffers through (a stick's lanes: L = 32).
struct Lanes {
  float* data = nullptr;  // null: an absent operand
  int64_t sb = 0, sk = 0, sj = 0;
  float* at(int64_t b, int64_t k, int64_t j) const { return data + b * sb + k * sk + j * sj; }
  // Row b's run at stick j (a state's); null where the operand is absent.
  float* run(int64_t b, int64_t j) const { return data ? at(b, 0, j) : nullptr; }
  // Row b's G runs at stick j into p, and p; null where the operand is absent (the row math's
  // "no bias").
  template <typename T>
  T* const* runs(int64_t b, int64_t j, int64_t G, T** p) const {
    if (!data) return nullptr;
    for (int64_t k = 0; k < G; ++k) p[k] = at(b, k, j);
    return p;
  }
  // Zeros in its G x J runs of L lanes (a bias gradient, summed over the rows into it).
  void zero(int64_t G, int64_t J, int64_t L) const {
    for (int64_t k = 0; data && k < G; ++k) {
      for (int64_t j = 0; j < J; ++j) std::fill_n(at(0, k, j), L, 0.0f);
    }
  }
};

// The B of a bias: it has no rows (an empty batch has B = 0).
constexpr int64_t kNoRows = -1;

// `t` (absent: undefined) checked against sizes {B, G, J, L} (G = 0: a state's [B, J, L];
// B = kNoRows: a bias's [G, J, L]), viewed so; a dense 2-D or 1-D operand of the same elements
// reads as J = 1.
Lanes lanes(const at::Tensor& t, int64_t B, int64_t G, int64_t J, int64_t L, const char* name) {
  if (!t.defined()) return {};
  TORCH_CHECK_VALUE(t.scalar_type() == at::kFloat && t.device().is_cpu(), "fused cell: ", name,
                    " must be a float32 CPU tensor, got ", t.scalar_type(), " on ", t.device());
  const bool has_rows = B != kNoRows;
  const int64_t rows = has_rows ? B : 1, runs = G == 0 ? 1 : G;
  std::vector<int64_t> sizes;
  if (has_rows) sizes.push_back(B);
  if (G) sizes.push_back(G);
  sizes.insert(sizes.end(), {J, L});
  if (t.dim() <= 2 && J == 1) {  // dense: [B, G * L], [B, L] or [G * L]
    TORCH_CHECK_VALUE(t.is_contiguous() && t.numel() == rows * runs * L, "fused cell: ", name, " has ", t.numel(),
                      " elements, expected ", rows * runs * L);
    return {const_cast<float*>(t.const_data_ptr<float>()), runs * L, L, 0};
  }
  TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(sizes) && t.stride(-1) == 1, "fused cell: ", name, " must be a ",
                    at::IntArrayRef(sizes), " view with contiguous lanes, got ", t.sizes(), " strides ", t.strides());
  return {const_cast<float*>(t.const_data_ptr<float>()), has_rows ? t.stride(0) : 0,
          G ? t.stride(has_rows ? 1 : 0) : 0, t.stride(t.dim() - 2)};
}

Lanes lanes(const std::optional<at::Tensor>& t, int64_t B, int64_t G, int64_t J, int64_t L, const char* name) {
  return t ? lanes(*t, B, G, J, L, name) : Lanes{};
}

// (B, J, L) of a cell from its state operand: [B, H] (J = 1) or [B, J, L].
std::array<int64_t, 3> cell_shape(const at::Tensor& state, const char* name) {
  TORCH_CHECK_VALUE(state.dim() == 2 || state.dim() == 3, "fused cell: ", name, " must be [batch, hidden] or ",
                    "[batch, runs, lanes], got ", state.dim(), " dims");
  if (state.dim() == 2) return {state.size(0), 1, state.size(1)};
  return {state.size(0), state.size(1), state.size(2)};
}

// Each run of lanes of the cell, with its operands' pointers.
template <typename F>
void each_run(int64_t B, int64_t J, F f) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < J; ++j) f(b, j);
  }
}

void run_lstm(const at::Tensor& ig_t, const at::Tensor& hg_t, const at::Tensor& cx_t,
              const std::optional<at::Tensor>& ib_t, const std::optional<at::Tensor>& hb_t, const at::Tensor& hy_t,
              const at::Tensor& cy_t, const at::Tensor& ws_t) {
  const auto [B, J, L] = cell_shape(cx_t, "cx");
  const Lanes ig = lanes(ig_t, B, 4, J, L, "input_gates"), hg = lanes(hg_t, B, 4, J, L, "hidden_gates");
  const Lanes cx = lanes(cx_t, B, 0, J, L, "cx"), hy = lanes(hy_t, B, 0, J, L, "hy"), cy = lanes(cy_t, B, 0, J, L, "cy");
  const Lanes ib = lanes(ib_t, kNoRows, 4, J, L, "input_bias"), hb = lanes(hb_t, kNoRows, 4, J, L, "hidden_bias");
  const Lanes ws = lanes(ws_t, B, 4, J, L, "workspace");
  const RowMath& m = rows_math();
  each_run(B, J, [&](int64_t b, int64_t j) {
    const float* igp[4]; const float* hgp[4]; const float* ibp[4]; const float* hbp[4]; float* wsp[4];
    m.lstm_cell(L, ig.runs(b, j, 4, igp), hg.runs(b, j, 4, hgp), ib.runs(0, j, 4, ibp), hb.runs(0, j, 4, hbp),
                cx.run(b, j), hy.run(b, j), cy.run(b, j), ws.runs(b, j, 4, wsp));
  });
}

void run_lstm_backward(const std::optional<at::Tensor>& ghy_t, const std::optional<at::Tensor>& gcy_t,
                       const at::Tensor& cx_t, const at::Tensor& cy_t, const at::Tensor& ws_t, const at::Tensor& gg_t,
                       const at::Tensor& gcx_t, const at::Tensor& gb_t) {
  const auto [B, J, L] = cell_shape(cx_t, "cx");
  const Lanes ghy = lanes(ghy_t, B, 0, J, L, "grad_hy"), gcy = lanes(gcy_t, B, 0, J, L, "grad_cy");
  const Lanes cx = lanes(cx_t, B, 0, J, L, "cx"), cy = lanes(cy_t, B, 0, J, L, "cy");
  const Lanes ws = lanes(ws_t, B, 4, J, L, "workspace"), gg = lanes(gg_t, B, 4, J, L, "grad_gates");
  const Lanes gcx = lanes(gcx_t, B, 0, J, L, "grad_cx"), gb = lanes(gb_t, kNoRows, 4, J, L, "grad_bias");
  gb.zero(4, J, L);
  const RowMath& m = rows_math();
  each_run(B, J, [&](int64_t b, int64_t j) {
    const float* wsp[4]; float* ggp[4]; float* gbp[4];
    m.lstm_cell_backward(L, ghy.run(b, j), gcy.run(b, j), cx.run(b, j), cy.run(b, j), ws.runs(b, j, 4, wsp),
                         gg.runs(b, j, 4, ggp), gcx.run(b, j), gb.runs(0, j, 4, gbp));
  });
}

void run_gru(const at::Tensor& ig_t, const at::Tensor& hg_t, const at::Tensor& hx_t,
             const std::optional<at::Tensor>& ib_t, const std::optional<at::Tensor>& hb_t, const at::Tensor& hy_t,
             const at::Tensor& ws_t) {
  const auto [B, J, L] = cell_shape(hx_t, "hx");
  const Lanes ig = lanes(ig_t, B, 3, J, L, "input_gates"), hg = lanes(hg_t, B, 3, J, L, "hidden_gates");
  const Lanes hx = lanes(hx_t, B, 0, J, L, "hx"), hy = lanes(hy_t, B, 0, J, L, "hy");
  const Lanes ib = lanes(ib_t, kNoRows, 3, J, L, "input_bias"), hb = lanes(hb_t, kNoRows, 3, J, L, "hidden_bias");
  const Lanes ws = lanes(ws_t, B, 5, J, L, "workspace");
  const RowMath& m = rows_math();
  each_run(B, J, [&](int64_t b, int64_t j) {
    const float* igp[3]; const float* hgp[3]; const float* ibp[3]; const float* hbp[3]; float* wsp[5];
    m.gru_cell(L, ig.runs(b, j, 3, igp), hg.runs(b, j, 3, hgp), ib.runs(0, j, 3, ibp), hb.runs(0, j, 3, hbp),
               hx.run(b, j), hy.run(b, j), ws.runs(b, j, 5, wsp));
  });
}

void run_gru_backward(const at::Tensor& ghy_t, const at::Tensor& ws_t, const at::Tensor& gi_t, const at::Tensor& gh_t,
                      const at::Tensor& ghx_t, const at::Tensor& gbi_t, const at::Tensor& gbh_t) {
  const auto [B, J, L] = cell_shape(ghy_t, "grad_hy");
  const Lanes ghy = lanes(ghy_t, B, 0, J, L, "grad_hy"), ws = lanes(ws_t, B, 5, J, L, "workspace");
  const Lanes gi = lanes(gi_t, B, 3, J, L, "grad_input_gates"), gh = lanes(gh_t, B, 3, J, L, "grad_hidden_gates");
  const Lanes ghx = lanes(ghx_t, B, 0, J, L, "grad_hx");
  const Lanes gbi = lanes(gbi_t, kNoRows, 3, J, L, "grad_input_bias");
  const Lanes gbh = lanes(gbh_t, kNoRows, 3, J, L, "grad_hidden_bias");
  gbi.zero(3, J, L);
  gbh.zero(3, J, L);
  const RowMath& m = rows_math();
  each_run(B, J, [&](int64_t b, int64_t j) {
    const float* wsp[5]; float* gip[3]; float* ghp[3]; float* gbip[3]; float* gbhp[3];
    m.gru_cell_backward(L, ghy.run(b, j), ws.runs(b, j, 5, wsp), gi.runs(b, j, 3, gip), gh.runs(b, j, 3, ghp),
                        ghx.run(b, j), gbi.runs(0, j, 3, gbip), gbh.runs(0, j, 3, gbhp));
  });
}

at::TensorOptions f32() { return at::TensorOptions().dtype(at::kFloat); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  const auto [B, J, L] = cell_shape(cx, "cx");
  at::Tensor hy = at::empty({B, J * L}, f32()), cy = at::empty_like(hy), ws = at::empty({B, 4 * J * L}, f32());
  run_lstm(input_gates, hidden_gates, cx, input_bias, hidden_bias, hy, cy, ws);
  return {hy, cy, ws};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lstm_cell_out(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias, at::Tensor& hy,
    at::Tensor& cy, at::Tensor& workspace) {
  run_lstm(input_gates, hidden_gates, cx, input_bias, hidden_bias, hy, cy, workspace);
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  const auto [B, J, L] = cell_shape(cx, "cx");
  at::Tensor grad_gates = at::empty({B, 4 * J * L}, f32()), grad_cx = at::empty({B, J * L}, f32());
  at::Tensor grad_bias = has_bias ? at::empty({4 * J * L}, f32()) : at::Tensor();
  run_lstm_backward(grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx, grad_bias);
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lstm_cell_backward_out(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias, at::Tensor& grad_gates, at::Tensor& grad_cx,
    at::Tensor& grad_bias) {
  TORCH_CHECK_VALUE(has_bias, "lstm_cell_backward.out writes a bias gradient: has_bias must be True");
  run_lstm_backward(grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx, grad_bias);
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  const auto [B, J, L] = cell_shape(hx, "hx");
  at::Tensor hy = at::empty({B, J * L}, f32()), ws = at::empty({B, 5 * J * L}, f32());
  run_gru(input_gates, hidden_gates, hx, input_bias, hidden_bias, hy, ws);
  return {hy, ws};
}

std::tuple<at::Tensor&, at::Tensor&> gru_cell_out(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias, at::Tensor& hy,
                                                  at::Tensor& workspace) {
  run_gru(input_gates, hidden_gates, hx, input_bias, hidden_bias, hy, workspace);
  return {hy, workspace};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> gru_cell_backward_out(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias, at::Tensor& grad_input_gates,
    at::Tensor& grad_hidden_gates, at::Tensor& grad_hx, at::Tensor& grad_input_bias, at::Tensor& grad_hidden_bias) {
  TORCH_CHECK_VALUE(has_bias, "gru_cell_backward.out writes bias gradients: has_bias must be True");
  run_gru_backward(grad_hy, workspace, grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
                   grad_hidden_bias);
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto [B, J, L] = cell_shape(grad_hy, "grad_hy");
  at::Tensor gi = at::empty({B, 3 * J * L}, f32()), gh = at::empty_like(gi), ghx = at::empty({B, J * L}, f32());
  at::Tensor gbi = has_bias ? at::empty({3 * J * L}, f32()) : at::Tensor();
  at::Tensor gbh = has_bias ? at::empty({3 * J * L}, f32()) : at::Tensor();
  run_gru_backward(grad_hy, workspace, gi, gh, ghx, gbi, gbh);
  return {gi, gh, ghx, gbi, gbh};
}

}  // namespace

TORCH_LIBRARY(torch_layouts, m) {
  m.def(
      "lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "lstm_cell.out(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None, *, Tensor(a!) hy, Tensor(b!) cy, Tensor(c!) workspace) -> "
      "(Tensor(a!), Tensor(b!), Tensor(c!))");
  m.def(
      "lstm_cell_backward(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, bool has_bias) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "lstm_cell_backward.out(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, "
      "bool has_bias, *, Tensor(a!) grad_gates, Tensor(b!) grad_cx, Tensor(c!) grad_bias) -> "
      "(Tensor(a!), Tensor(b!), Tensor(c!))");
  m.def(
      "gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None) -> (Tensor, Tensor)");
  m.def(
      "gru_cell.out(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, "
      "Tensor? hidden_bias=None, *, Tensor(a!) hy, Tensor(b!) workspace) -> (Tensor(a!), Tensor(b!))");
  m.def("gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "gru_cell_backward.out(Tensor grad_hy, Tensor workspace, bool has_bias, *, Tensor(a!) grad_input_gates, "
      "Tensor(b!) grad_hidden_gates, Tensor(c!) grad_hx, Tensor(d!) grad_input_bias, Tensor(e!) grad_hidden_bias) -> "
      "(Tensor(a!), Tensor(b!), Tensor(c!), Tensor(d!), Tensor(e!))");
}

TORCH_LIBRARY_IMPL(torch_layouts, CPU, m) {
  m.impl("lstm_cell", lstm_cell);
  m.impl("lstm_cell.out", lstm_cell_out);
  m.impl("lstm_cell_backward", lstm_cell_backward);
  m.impl("lstm_cell_backward.out", lstm_cell_backward_out);
  m.impl("gru_cell", gru_cell);
  m.impl("gru_cell.out", gru_cell_out);
  m.impl("gru_cell_backward", gru_cell_backward);
  m.impl("gru_cell_backward.out", gru_cell_backward_out);
}

}  // namespace torch_layouts
