#include "foreach_recipe.h"

#include <ATen/ATen.h>

#include <unordered_map>

namespace torch_layouts {
namespace {

class ForeachReplay final : public Replay {
 public:
  c10::OperatorHandle op;
  std::vector<int64_t> list_args;  // argument positions of the lists; the first is written
  std::vector<int64_t> numels;
  std::vector<ForeachCopy> copies;
  std::vector<int64_t> padded;

  explicit ForeachReplay(c10::OperatorHandle handle) : op(std::move(handle)) {}

  // The lists' tensors are read where the call's stack holds them (no reference taken per tensor:
  // one would incref its Python object under the GIL) and lent to the CPU op as flat views of
  // their buffers, borrowed for this call.
  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    std::vector<c10::IValue> stack(args.begin(), args.end());
    std::unordered_map<const c10::TensorImpl*, at::Tensor> copied;  // one copy of a tensor two lists hold
    for (int64_t p : list_args) {
      const c10::ArrayRef<c10::IValue> tensors = args[p].toListRef();
      std::vector<const at::Tensor*> read(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) read[i] = &tensors[i].toTensor();
      for (const ForeachCopy& c : copies) {
        if (c.arg != p) continue;
        const at::Tensor& t = *read[c.index];
        auto [it, fresh] = copied.try_emplace(t.unsafeGetTensorImpl());
        if (fresh) it->second = new_device_tensor(c.layout, t.device()).copy_(t);
        read[c.index] = &it->second;
      }
      std::vector<at::Tensor> flat;
      flat.reserve(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        flat.push_back(raw_view(*read[i], {numels[i]}, {1}, 0, /*owning=*/false));
      }
      stack[p] = c10::IValue(std::move(flat));
    }
    op.callBoxed(stack);
    if (!padded.empty()) {
      const c10::ArrayRef<c10::IValue> written = args[list_args.front()].toListRef();
      for (int64_t i : padded) {
        const at::Tensor& t = written[i].toTensor();
        fill_padding(t, *layout_of(t));
      }
    }
    (void)results;  // in place: the op returns nothing
  }
};

}  // namespace

bool offer_foreach(const std::string& op, const std::vector<std::pair<int64_t, std::vector<at::Tensor>>>& lists,
                   std::vector<int64_t> numels, std::vector<ForeachCopy> copies, std::vector<int64_t> padded) {
  if (lists.empty()) return false;
  const size_t n = lists.front().second.size();
  if (numels.size() != n) return false;
  for (const auto& [p, tensors] : lists) {
    if (tensors.size() != n) return false;
  }
  for (const ForeachCopy& c : copies) {
    if (!c.layout || c.index < 0 || static_cast<size_t>(c.index) >= n) return false;
  }
  for (int64_t i : padded) {
    if (i < 0 || static_cast<size_t>(i) >= n) return false;
  }
  auto handle = find_op(op);
  if (!handle) return false;
  auto r = std::make_shared<ForeachReplay>(*handle);
  for (const auto& [p, tensors] : lists) r->list_args.push_back(p);
  r->numels = std::move(numels);
  r->copies = std::move(copies);
  r->padded = std::move(padded);
  return offer_list_replay(std::move(r), op, lists);
}

}  // namespace torch_layouts
