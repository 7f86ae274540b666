#include "view_backward_recipe.h"

#include <ATen/ATen.h>

namespace torch_layouts {
namespace {

class ViewBackward final : public Replay {
 public:
  LayoutPtr out;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  std::optional<std::pair<BufferView, BufferView>> reads;  // the gradient's, the view's

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& grad = args[0].toTensor();
    at::Tensor result = new_device_tensor(out, grad.device());
    raw_buffer(result, out->dtype).zero_();  // zeros at the real positions; the padding gets its value back
    fill_padding(result, *out);
    if (grad.numel() != 0) {
      if (reads) {
        borrowed_view_of(result, reads->second).copy_(borrowed_view_of(grad, reads->first));
      } else {
        result.as_strided(sizes, strides, offset).copy_(grad);
      }
    }
    results.emplace_back(std::move(result));
  }
};

}  // namespace

bool offer_view_backward(const std::string& op, const at::Tensor& grad, LayoutPtr out, std::vector<int64_t> sizes,
                         std::vector<int64_t> strides, int64_t offset,
                         std::optional<std::pair<BufferView, BufferView>> reads) {
  if (!out || sizes.size() != strides.size() || offset < 0 || (reads && !copy_views_fit(*reads, grad.numel()))) {
    return false;
  }
  auto r = std::make_shared<ViewBackward>();
  r->out = std::move(out);
  r->sizes = std::move(sizes);
  r->strides = std::move(strides);
  r->offset = offset;
  r->reads = std::move(reads);
  return offer_replay(std::move(r), op, {{0, grad}});
}

}  // namespace torch_layouts
