#include "dropout_recipe.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/strides.h>

#include <mutex>

#include "generator.h"
#include "pointwise.h"

namespace torch_layouts {
namespace {

class DropoutBackward final : public Replay {
 public:
  BufferView grad_view, mask_view, out_view;
  LayoutPtr out;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& grad = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, grad.device());
    const at::Tensor o = borrowed_view_of(result, out_view), a = borrowed_view_of(grad, grad_view),
                     b = borrowed_view_of(args[1].toTensor(), mask_view);
    const double scale = args[2].toDouble();
    if (o.scalar_type() == at::kFloat && a.scalar_type() == at::kFloat &&
        (b.scalar_type() == at::kFloat || b.scalar_type() == at::kBool)) {
      scaled_product(o, a, b, scale);
    } else {  // ops/dropout._scaled's other dtypes: the scale as Python passes it, a wrapped number
      at::Tensor factor = at::scalar_to_tensor(scale);
      factor.unsafeGetTensorImpl()->set_wrapped_number(true);
      at::mul_out(const_cast<at::Tensor&>(o), a, b).mul_(factor);
    }
    results.emplace_back(std::move(result));
  }
};

// native_dropout(x, p, train) of a float32, float16 or bfloat16 x: the keep draws as ops/dropout.draw_keep
// makes them (a CPU generator seeded from the spyre generator's (seed, offset), bernoulli_ over a
// tensor of `draws_sizes`/`draws_strides`, the offset moved past them), moved into a new tensor
// of the coordinates by the runtime's copy, then the product and the mask in one pass; the draws,
// the result and the mask are new tensors whose buffers are dense in the coordinates' shape. With
// `boxes` (the coordinates' real positions: (begin, count) per dim), one pass per box: the padding
// keeps the pad values the new tensors got.
class DropoutForward final : public Replay {
 public:
  BufferView x_view, dense_view;
  std::vector<int64_t> draws_sizes, draws_strides;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> boxes;
  LayoutPtr values, mask;

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    const double keep = 1.0 - args[1].toDouble();
    at::Generator gen = default_generator(x.device().index());  // a handle: its mutex is taken
    uint64_t seed;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      auto* impl = gen.get<SpyreGeneratorImpl>();
      seed = impl->host_seed();
      impl->advance(x.numel());
    }
    at::Generator host = at::make_generator<at::CPUGeneratorImpl>(seed);
    at::Tensor drawn = at::empty({x.numel()}, x.options().device(at::kCPU)).as_strided(draws_sizes, draws_strides);
    drawn.bernoulli_(keep, host);
    at::Tensor dense = new_device_tensor(values, x.device());
    dense.copy_(drawn);
    at::Tensor result = new_device_tensor(values, x.device()), flags = new_device_tensor(mask, x.device());
    const at::Tensor o = borrowed_view_of(result, dense_view), k = borrowed_view_of(flags, dense_view),
                     xv = borrowed_view_of(x, x_view), d = borrowed_view_of(dense, dense_view);
    const double scale = keep == 0 ? 0.0 : 1.0 / keep;
    if (boxes.empty()) dropout_apply(o, k, xv, d, scale);
    for (const auto& box : boxes) {
      auto narrow = [&box](at::Tensor t) {
        for (size_t dim = 0; dim < box.size(); ++dim) t = t.narrow(static_cast<int64_t>(dim), box[dim].first, box[dim].second);
        return t;
      };
      dropout_apply(narrow(o), narrow(k), narrow(xv), narrow(d), scale);
    }
    results.emplace_back(std::move(result));
    results.emplace_back(std::move(flags));
  }
};

}  // namespace

bool offer_dropout(const at::Tensor& x, BufferView x_view, std::vector<int64_t> draws_sizes,
                   std::vector<int64_t> draws_strides, LayoutPtr values, LayoutPtr mask,
                   std::vector<std::vector<std::pair<int64_t, int64_t>>> boxes) {
  const at::ScalarType dtype = x.scalar_type();
  if (!values || !mask || draws_sizes.size() != draws_strides.size() ||
      (dtype != at::kFloat && dtype != at::kHalf && dtype != at::kBFloat16) ||
      x_view.sizes.size() != x_view.strides.size()) {
    return false;
  }
  for (const auto& box : boxes) {  // each within the views
    if (box.size() != x_view.sizes.size()) return false;
    for (size_t d = 0; d < box.size(); ++d) {
      if (box[d].first < 0 || box[d].second < 0 || box[d].first + box[d].second > x_view.sizes[d]) return false;
    }
  }
  auto r = std::make_shared<DropoutForward>();
  const c10::DimVector dense = c10::contiguous_strides(x_view.sizes);
  r->dense_view = BufferView{x_view.sizes, {dense.begin(), dense.end()}, 0};
  r->x_view = std::move(x_view);
  r->draws_sizes = std::move(draws_sizes);
  r->draws_strides = std::move(draws_strides);
  r->boxes = std::move(boxes);
  r->values = std::move(values);
  r->mask = std::move(mask);
  return offer_replay(std::move(r), "aten::native_dropout", {{0, x}});
}

bool offer_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, BufferView grad_view, BufferView mask_view,
                            LayoutPtr out, BufferView out_view) {
  if (!out) return false;
  auto r = std::make_shared<DropoutBackward>();
  r->grad_view = std::move(grad_view);
  r->mask_view = std::move(mask_view);
  r->out_view = std::move(out_view);
  r->out = std::move(out);
  return offer_replay(std::move(r), "aten::native_dropout_backward", {{0, grad}, {1, mask}});
}

}  // namespace torch_layouts
