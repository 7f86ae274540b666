#include "foreach_recipe.h"

#include <ATen/ATen.h>

#include <unordered_map>

namespace torch_layouts {
namespace {

class ForeachReplay final : public Replay {
 public:
  c10::OperatorHandle op;
  std::vector<int64_t> list_args;  // argument positions of the lists; the first is written
  std::vector<std::vector<BufferView>> views;  // per list, each index's view of its buffer
  std::vector<ForeachCopy> copies;
  std::vector<int64_t> padded;

  explicit ForeachReplay(c10::OperatorHandle handle) : op(std::move(handle)) {}

  // The lists' tensors are read where the call's stack holds them (no reference taken per tensor:
  // one would incref its Python object under the GIL) and lent to the CPU op as views of their
  // buffers, borrowed for this call.
  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    std::vector<c10::IValue> stack(args.begin(), args.end());
    std::unordered_map<const c10::TensorImpl*, at::Tensor> copied;  // one copy of a tensor two lists hold
    for (size_t l = 0; l < list_args.size(); ++l) {
      const int64_t p = list_args[l];
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
      std::vector<at::Tensor> lent;
      lent.reserve(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) lent.push_back(borrowed_view_of(*read[i], views[l][i]));
      stack[p] = c10::IValue(std::move(lent));
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
                   std::vector<std::vector<BufferView>> views, std::vector<ForeachCopy> copies,
                   std::vector<int64_t> padded) {
  if (lists.empty() || views.size() != lists.size()) return false;
  const size_t n = lists.front().second.size();
  for (size_t l = 0; l < lists.size(); ++l) {
    if (lists[l].second.size() != n || views[l].size() != n) return false;
    for (size_t i = 0; i < n; ++i) {  // one shape per index across the lists, a stride per dim
      const BufferView& v = views[l][i];
      if (v.strides.size() != v.sizes.size() || v.sizes != views[0][i].sizes) return false;
    }
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
  r->views = std::move(views);
  r->copies = std::move(copies);
  r->padded = std::move(padded);
  return offer_list_replay(std::move(r), op, lists);
}

}  // namespace torch_layouts
