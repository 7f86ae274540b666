#include "reduce_recipe.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace torch_layouts {
namespace {

enum class Kind { kSum, kAmax, kAmin, kMean, kAll, kAny };

class ReduceReplay final : public Replay {
 public:
  BufferView input, result;
  std::vector<int64_t> order;
  Kind kind = Kind::kSum;
  std::optional<c10::ScalarType> dtype;  // a sum's (a mean's sums') dtype
  int64_t count = 1;                      // a mean's reduced elements
  c10::ScalarType out_dtype = at::kFloat;  // a mean's result dtype
  LayoutPtr out;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    at::Tensor v = view_of(x, input);
    for (int64_t d : order) {
      switch (kind) {
        case Kind::kSum:
        case Kind::kMean: v = at::sum(v, {d}, true, dtype); break;
        case Kind::kAmax: v = at::amax(v, {d}, true); break;
        case Kind::kAmin: v = at::amin(v, {d}, true); break;
        case Kind::kAll: v = at::all(v, d, true); break;
        case Kind::kAny: v = at::any(v, d, true); break;
      }
    }
    if (kind == Kind::kMean) v = v.to(at::kFloat).div(count).to(out_dtype);  // as ops/reductions._values
    at::Tensor r = new_device_tensor(out, x.device());
    view_of(r, result).copy_(v);
    results.emplace_back(std::move(r));
  }
};

}  // namespace

bool offer_reduce(const std::string& kind, const at::Tensor& x, BufferView input, std::vector<int64_t> order,
                  std::optional<c10::ScalarType> dtype, LayoutPtr out, BufferView result, int64_t count,
                  std::optional<c10::ScalarType> out_dtype) {
  if (!out || (kind == "mean" && (count <= 0 || !out_dtype)) || input.sizes.size() != input.strides.size() ||
      result.sizes.size() != result.strides.size() || result.sizes.size() != input.sizes.size()) {
    return false;
  }
  auto r = std::make_shared<ReduceReplay>();
  if (kind == "sum") {
    r->kind = Kind::kSum;
  } else if (kind == "amax") {
    r->kind = Kind::kAmax;
  } else if (kind == "amin") {
    r->kind = Kind::kAmin;
  } else if (kind == "all") {
    r->kind = Kind::kAll;
  } else if (kind == "any") {
    r->kind = Kind::kAny;
  } else if (kind == "mean") {
    r->kind = Kind::kMean;
    r->count = count;
    r->out_dtype = *out_dtype;
  } else {
    return false;
  }
  for (size_t d = 0; d < input.sizes.size(); ++d) {  // the values' shape: the input's, 1 along the reduced dims
    const bool reduced = std::find(order.begin(), order.end(), static_cast<int64_t>(d)) != order.end();
    if (result.sizes[d] != (reduced ? 1 : input.sizes[d])) return false;
  }
  for (int64_t d : order) {
    if (d < 0 || static_cast<size_t>(d) >= input.sizes.size()) return false;
  }
  r->input = std::move(input);
  r->result = std::move(result);
  r->order = std::move(order);
  r->dtype = dtype;
  r->out = std::move(out);
  return offer_replay(std::move(r), "aten::" + kind, {{0, x}});
}

}  // namespace torch_layouts
