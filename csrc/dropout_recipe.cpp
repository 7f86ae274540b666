#include "dropout_recipe.h"

#include <ATen/ATen.h>

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
    const at::Tensor o = view_of(result, out_view), a = view_of(grad, grad_view),
                     b = view_of(args[1].toTensor(), mask_view);
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

}  // namespace

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
