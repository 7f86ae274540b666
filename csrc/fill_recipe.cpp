#include "fill_recipe.h"

#include <ATen/ATen.h>

namespace torch_layouts {
namespace {

class FillReplay final : public Replay {
 public:
  std::vector<BufferView> boxes;
  bool restore_padding = false;
  bool zero = false;  // zero_: no value argument

  bool accepts(c10::ArrayRef<c10::IValue> args) const override { return zero || !args[1].isTensor(); }

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    const c10::Scalar value = zero ? c10::Scalar(0) : args[1].toScalar();
    for (const BufferView& box : boxes) borrowed_view_of(x, box).fill_(value);
    if (restore_padding) fill_padding(x, *layout_of(x));
    (void)results;  // in place: the front returns x
  }
};

}  // namespace

bool offer_fill(const std::string& op, const at::Tensor& x, std::vector<BufferView> boxes, bool restore_padding) {
  if (op != "aten::fill_" && op != "aten::zero_") return false;
  for (const BufferView& b : boxes) {
    if (b.sizes.size() != b.strides.size()) return false;
  }
  auto r = std::make_shared<FillReplay>();
  r->boxes = std::move(boxes);
  r->restore_padding = restore_padding;
  r->zero = op == "aten::zero_";
  return offer_replay(std::move(r), op, {{0, x}}, /*writes_self=*/true);
}

}  // namespace torch_layouts
