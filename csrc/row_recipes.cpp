#include "row_recipes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "row_kernels.h"

namespace torch_layouts {
namespace {

// A view's values as a contiguous float32 vector (ops/rows.Rows.per_row / per_column), its first
// `length` (-1: all; a padded row's real elements).
at::Tensor values_of(const at::Tensor& t, const BufferView& v, int64_t length = -1) {
  at::Tensor flat = borrowed_view_of(t, v).reshape(-1);
  if (length >= 0) flat = flat.narrow(0, 0, length);
  return flat.to(at::kFloat).contiguous();
}

std::optional<at::Tensor> values_of(const c10::IValue& arg, const std::optional<BufferView>& v, int64_t length) {
  if (!v) return std::nullopt;
  return values_of(arg.toTensor(), *v, length);
}

// Fills p.elements for a float32 layout whose pieces hold at most 1 Mi elements and do not overlap.
void index_placed(Placed& p) {
  if (p.layout->dtype != at::kFloat) return;
  std::vector<std::pair<int64_t, int64_t>> at;
  for (const auto& [target, source] : p.pieces) {
    const int64_t n = c10::multiply_integers(target.sizes);
    if (source.sizes != target.sizes || static_cast<int64_t>(at.size()) + n > (int64_t(1) << 20)) return;
    std::vector<int64_t> idx(target.sizes.size(), 0);
    for (int64_t k = 0; k < n; ++k) {
      int64_t t = target.offset, s = source.offset;
      for (size_t d = 0; d < idx.size(); ++d) {
        t += idx[d] * target.strides[d];
        s += idx[d] * source.strides[d];
      }
      at.emplace_back(t, s);
      for (size_t d = idx.size(); d-- > 0 && ++idx[d] == target.sizes[d];) idx[d] = 0;
    }
  }
  std::sort(at.begin(), at.end());
  const int64_t numel = p.layout->storage_nbytes / static_cast<int64_t>(sizeof(float));
  for (size_t k = 0; k < at.size(); ++k) {
    const auto [t, s] = at[k];
    if (t < 0 || t >= numel || s < 0 || (k > 0 && at[k - 1].first == t)) return;  // pieces overlap: copy_ them
    p.values = std::max(p.values, s + 1);
  }
  p.elements = std::move(at);
}

// A new tensor holding `flat` where `p` places it (ops/reductions.write_placed). A float32
// placement's values are stored one by one at the elements index_placed listed, not copied in by
// a strided copy_ per piece (its set-up cost most of its 4 us for layer norm's mean or rstd of
// 8x128x256 float32; the forward's replay: 895 -> 882 K instructions).
at::Tensor placed(const Placed& p, const at::Tensor& flat, c10::Device device) {
  if (!p.elements.empty()) {
    // the source views index flat's storage, as as_strided does
    const int64_t held = static_cast<int64_t>(flat.storage().nbytes() / sizeof(float));
    TORCH_CHECK_VALUE(flat.scalar_type() == at::kFloat && held >= p.values, "placed values must be float32 with at least ",
                      p.values, " elements in their storage, got ", flat.scalar_type(), " with ", held);
    at::Tensor out = new_device_tensor(p.layout, device);
    float* buffer = static_cast<float*>(out.storage().mutable_data());
    const float* values = static_cast<const float*>(flat.storage().data());
    for (const auto& [at, from] : p.elements) buffer[at] = values[from];
    return out;
  }
  at::Tensor out = new_device_tensor(p.layout, device);
  for (const auto& [target, source] : p.pieces) {
    borrowed_view_of(out, target).copy_(flat.as_strided(source.sizes, source.strides, source.offset));
  }
  return out;
}

// _softmax / _log_softmax / _safe_softmax: the input's row view, the result's layout and row view.
class Softmax final : public Replay {
 public:
  BufferView input_rows, out_rows;
  LayoutPtr out;
  int64_t width = 0, length = -1;
  bool log = false, safe = false;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, x.device());
    rows_softmax(borrowed_view_of(x, input_rows), borrowed_view_of(result, out_rows), width, log, safe, length);
    results.emplace_back(std::move(result));
  }
};

// _softmax_backward_data / _log_softmax_backward_data: grad's and output's row views.
class SoftmaxBackward final : public Replay {
 public:
  BufferView grad_rows, output_rows, out_rows;
  LayoutPtr out;
  int64_t width = 0, length = -1;
  bool log = false;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& grad = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, grad.device());
    rows_softmax_backward(borrowed_view_of(grad, grad_rows), borrowed_view_of(args[1].toTensor(), output_rows),
                          borrowed_view_of(result, out_rows), width, log, length);
    results.emplace_back(std::move(result));
  }
};

// cumsum(input, dim, dtype=None) along rows of the input's buffer: its row view, the result's
// layout and row view.
class Cumsum final : public Replay {
 public:
  BufferView input_rows, out_rows;
  LayoutPtr out;
  int64_t width = 0, length = -1;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, x.device());
    rows_cumsum(borrowed_view_of(x, input_rows), borrowed_view_of(result, out_rows), width, length);
    results.emplace_back(std::move(result));
  }
};

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd), or with
// `rms` _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (out, rstd).
class LayerNorm final : public Replay {
 public:
  BufferView input_rows, out_rows;
  std::optional<BufferView> weight_cols, bias_cols;
  LayoutPtr out;
  int64_t rows = 0, width = 0, length = -1;
  Placed stats;
  bool rms = false;
  double default_eps = 0;  // rms: the eps of a call that passes None

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, x.device());
    at::Tensor mean = at::empty({rows}, at::kFloat), rstd = at::empty({rows}, at::kFloat);
    const c10::IValue& eps = args[rms ? 3 : 4];
    rows_layer_norm(borrowed_view_of(x, input_rows), borrowed_view_of(result, out_rows),
                    values_of(args[2], weight_cols, length), rms ? std::nullopt : values_of(args[3], bias_cols, length),
                    eps.isNone() ? default_eps : eps.toDouble(), mean, rstd, width, length, rms);
    results.emplace_back(std::move(result));
    if (!rms) results.emplace_back(placed(stats, mean, x.device()));
    results.emplace_back(placed(stats, rstd, x.device()));
  }
};

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> 3 gradients, or with `rms` (no mean view) _fused_rms_norm_backward(grad_out,
// input, normalized_shape, rstd, weight?, output_mask) -> (grad_input, grad_weight).
class LayerNormBackward final : public Replay {
 public:
  BufferView grad_rows, input_rows, rstd_values;
  std::optional<BufferView> mean_values, weight_cols, grad_input_rows;
  LayoutPtr grad_input;
  std::optional<Placed> grad_weight, grad_bias;
  int64_t length = 0, width = 0;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const bool rms = !mean_values;
    const at::Tensor& grad = args[0].toTensor();
    const at::Tensor& x = args[1].toTensor();
    at::Tensor dx = grad_input ? new_device_tensor(grad_input, x.device()) : at::Tensor();
    std::optional<at::Tensor> dgamma, dbeta;
    if (grad_weight) dgamma = at::empty({length}, at::kFloat);
    if (grad_bias) dbeta = at::empty({length}, at::kFloat);
    const std::optional<at::Tensor> dx_rows =
        dx.defined() ? std::optional<at::Tensor>(borrowed_view_of(dx, *grad_input_rows)) : std::nullopt;
    // mean and rstd read where they lie, as row views of grad's rows (one value a row): no copy of
    // a Spyre sparse result's values (layer norm backward of 8x128x256 float32: 57 -> 46-50 us)
    const auto row_view = [&](const at::Tensor& t, const BufferView& values) {
      if (t.scalar_type() != at::kFloat) return values_of(t, values);  // a float16 forward's, converted
      BufferView v = values;
      v.sizes = grad_rows.sizes;
      v.strides.resize(grad_rows.sizes.size(), 0);
      return borrowed_view_of(t, v);
    };
    const at::Tensor rstd = row_view(args[rms ? 3 : 4].toTensor(), rstd_values);
    rows_layer_norm_backward(borrowed_view_of(grad, grad_rows), borrowed_view_of(x, input_rows),
                             rms ? rstd : row_view(args[3].toTensor(), *mean_values), rstd,
                             values_of(args[rms ? 4 : 5], weight_cols, length), dx_rows, dgamma, dbeta, width, length,
                             rms);
    results.emplace_back(std::move(dx));
    results.emplace_back(grad_weight ? placed(*grad_weight, *dgamma, x.device()) : at::Tensor());
    if (!rms) results.emplace_back(grad_bias ? placed(*grad_bias, *dbeta, x.device()) : at::Tensor());
  }
};

}  // namespace

bool offer_softmax(const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own,
                   std::vector<BufferView> rows, LayoutPtr out, int64_t width, int64_t length, bool log, bool safe) {
  const bool backward = own.size() == 2;
  if (!out || own.empty() || own.size() > 2 || rows.size() != own.size() + 1) return false;
  if (backward) {
    auto r = std::make_shared<SoftmaxBackward>();
    r->grad_rows = std::move(rows[0]);
    r->output_rows = std::move(rows[1]);
    r->out_rows = std::move(rows[2]);
    r->out = std::move(out);
    r->width = width;
    r->length = length;
    r->log = log;
    return offer_replay(std::move(r), op, own);
  }
  auto r = std::make_shared<Softmax>();
  r->input_rows = std::move(rows[0]);
  r->out_rows = std::move(rows[1]);
  r->out = std::move(out);
  r->width = width;
  r->length = length;
  r->log = log;
  r->safe = safe;
  return offer_replay(std::move(r), op, own);
}

bool offer_cumsum(const at::Tensor& input, BufferView input_rows, LayoutPtr out, BufferView out_rows, int64_t width,
                  int64_t length) {
  if (!out) return false;
  auto r = std::make_shared<Cumsum>();
  r->input_rows = std::move(input_rows);
  r->out_rows = std::move(out_rows);
  r->out = std::move(out);
  r->width = width;
  r->length = length;
  return offer_replay(std::move(r), "aten::cumsum", {{0, input}});
}

bool offer_layer_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, BufferView input_rows, std::optional<BufferView> weight_cols,
                      std::optional<BufferView> bias_cols, LayoutPtr out, BufferView out_rows, int64_t rows,
                      int64_t width, int64_t length, Placed stats, std::optional<double> rms_eps) {
  if (!out || !stats.layout || weight.has_value() != weight_cols.has_value() || bias.has_value() != bias_cols.has_value() ||
      (rms_eps && bias)) {
    return false;
  }
  auto r = std::make_shared<LayerNorm>();
  r->input_rows = std::move(input_rows);
  r->out_rows = std::move(out_rows);
  r->weight_cols = std::move(weight_cols);
  r->bias_cols = std::move(bias_cols);
  r->out = std::move(out);
  r->rows = rows;
  r->width = width;
  r->length = length;
  r->stats = std::move(stats);
  index_placed(r->stats);
  r->rms = rms_eps.has_value();
  r->default_eps = rms_eps.value_or(0);
  std::vector<std::pair<int64_t, at::Tensor>> own{{0, input}};
  if (weight) own.emplace_back(2, *weight);
  if (bias) own.emplace_back(3, *bias);
  const char* op = r->rms ? "aten::_fused_rms_norm" : "aten::native_layer_norm";
  return offer_replay(std::move(r), op, own);
}

bool offer_layer_norm_backward(const std::vector<std::pair<int64_t, at::Tensor>>& own, BufferView grad_rows,
                               BufferView input_rows, std::optional<BufferView> mean_values, BufferView rstd_values,
                               std::optional<BufferView> weight_cols, LayoutPtr grad_input,
                               std::optional<BufferView> grad_input_rows, std::optional<Placed> grad_weight,
                               std::optional<Placed> grad_bias, int64_t length, int64_t width) {
  if (static_cast<bool>(grad_input) != grad_input_rows.has_value() || (!mean_values && grad_bias)) return false;
  auto r = std::make_shared<LayerNormBackward>();
  r->grad_rows = std::move(grad_rows);
  r->input_rows = std::move(input_rows);
  r->mean_values = std::move(mean_values);
  r->rstd_values = std::move(rstd_values);
  r->weight_cols = std::move(weight_cols);
  r->grad_input = std::move(grad_input);
  r->grad_input_rows = std::move(grad_input_rows);
  r->grad_weight = std::move(grad_weight);
  r->grad_bias = std::move(grad_bias);
  for (std::optional<Placed>* p : {&r->grad_weight, &r->grad_bias}) {
    if (*p) index_placed(**p);
  }
  r->length = length;
  r->width = width;
  const bool rms = !r->mean_values;
  return offer_replay(std::move(r), rms ? "aten::_fused_rms_norm_backward" : "aten::native_layer_norm_backward", own);
}

}  // namespace torch_layouts
