#include "foreach_recipe.h"

#include <ATen/ATen.h>

#include <optional>
#include <unordered_map>

#include "arithmetic_runs.h"
#include "device_memory.h"
#include "run_stretches.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

// Whether a view's elements all lie within the `numel` elements of its buffer.
bool within(const BufferView& v, int64_t numel) {
  int64_t last = v.offset;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] < 0 || v.strides[d] < 0) return false;
    if (v.sizes[d] == 0) return true;
    last += (v.sizes[d] - 1) * v.strides[d];
  }
  return v.offset >= 0 && last < numel;
}

// a's view += alpha * b's view (one shape) as a nest of strided loops over both buffers
// (run_stretches.h: dims that continue each other merged, stretches over the intra-op threads),
// each stretch one call along its loop: a whole buffer is one contiguous loop, a gradient laid
// out by the reduction that made it runs along its innermost dims.
void add_views(StridedScaledAdd add, float* a, const BufferView& va, const float* b, const BufferView& vb, float alpha) {
  std::vector<StridedLoop<2>> loops;
  for (size_t d = 0; d < va.sizes.size(); ++d) {
    if (va.sizes[d] == 0) return;
    if (va.sizes[d] != 1) push_merged<2>(loops, {va.sizes[d], {va.strides[d], vb.strides[d]}});
  }
  for_stretches<2>(std::move(loops), {va.offset, vb.offset}, 1, sizeof(float),
                   [&](const std::array<int64_t, 2>& at, int64_t count, const StridedLoop<2>& inner) {
                     add(a + at[0], inner.strides[0], b + at[1], inner.strides[1], alpha, count);
                   });
}

class ForeachReplay final : public Replay {
 public:
  c10::OperatorHandle op;
  bool add_list = false;  // _foreach_add_.List: float32 runs added in place here (run_add_list)
  std::vector<int64_t> list_args;  // argument positions of the lists; the first is written
  std::vector<std::vector<BufferView>> views;  // per list, each index's view of its buffer
  std::vector<ForeachCopy> copies;
  std::vector<int64_t> padded;
  // An out-of-place unary op (offer_foreach_unary): each result's layout and the per-tensor out= op.
  std::vector<LayoutPtr> results;
  std::optional<c10::OperatorHandle> out_op;

  explicit ForeachReplay(c10::OperatorHandle handle) : op(std::move(handle)) {}

  // The lists' tensors are read where the call's stack holds them (no reference taken per tensor:
  // one would incref its Python object under the GIL) and lent to the CPU op as views of their
  // buffers, borrowed for this call.
  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& returned) const override {
    if (out_op) {
      returned.emplace_back(run_unary(args));
      return;
    }
    if (add_list && run_add_list(args)) return restore_padding(args);
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
    restore_padding(args);
  }

 private:
  void restore_padding(c10::ArrayRef<c10::IValue> args) const {
    if (padded.empty()) return;
    const c10::ArrayRef<c10::IValue> written = args[list_args.front()].toListRef();
    for (int64_t i : padded) {
      const at::Tensor& t = written[i].toTensor();
      fill_padding(t, *layout_of(t));
    }
  }

  // Each input's view through the per-tensor out= op into a new result's same view (ops/foreach.py's
  // own loop), the padded results' padding restored.
  c10::List<at::Tensor> run_unary(c10::ArrayRef<c10::IValue> args) const {
    const c10::ArrayRef<c10::IValue> tensors = args[list_args.front()].toListRef();
    c10::List<at::Tensor> outs;
    outs.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i].toTensor();
      at::Tensor out = new_device_tensor(results[i], t.device());
      std::vector<c10::IValue> stack{borrowed_view_of(t, views[0][i]), borrowed_view_of(out, views[0][i])};
      out_op->callBoxed(stack);
      outs.push_back(std::move(out));
    }
    for (int64_t i : padded) fill_padding(outs.get(i), *results[i]);
    return outs;
  }

  // self[i] += alpha * other[i] where each index's two views are float32 views of their buffers
  // (the raw buffers of one layout, or a strided view of a gradient laid out by the reduction that
  // made it) and no tensor is copied first, instead of lending views to the CPU's _foreach_add_,
  // which sets up a TensorIterator per tensor: the demo's MLP and attention SGD steps 3-10 us
  // shorter (builds alternated). ATen's bits (strided_scaled_add_kernel). False, having written
  // nothing, otherwise.
  bool run_add_list(c10::ArrayRef<c10::IValue> args) const {
    const StridedScaledAdd add = strided_scaled_add_kernel();
    if (!add || !copies.empty() || list_args.size() != 2 || args.size() != 3) return false;
    const c10::ArrayRef<c10::IValue> selfs = args[list_args[0]].toListRef(), others = args[list_args[1]].toListRef();
    for (size_t i = 0; i < selfs.size(); ++i) {
      const at::Tensor &a = selfs[i].toTensor(), &b = others[i].toTensor();
      const BufferView &va = views[0][i], &vb = views[1][i];
      if (a.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat ||
          !copy_views_fit({va, vb}, c10::multiply_integers(va.sizes)) ||
          !within(va, device_nbytes(a.storage()) / 4) || !within(vb, device_nbytes(b.storage()) / 4) ||
          (a.storage().is_alias_of(b.storage()) && (va.offset != vb.offset || va.strides != vb.strides))) {
        return false;  // in place only element by element
      }
    }
    const float alpha = args[2].toScalar().to<float>();
    for (size_t i = 0; i < selfs.size(); ++i) {
      add_views(add, static_cast<float*>(selfs[i].toTensor().storage().mutable_data()), views[0][i],
                static_cast<const float*>(others[i].toTensor().storage().data()), views[1][i], alpha);
    }
    return true;
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
  r->add_list = op == "aten::_foreach_add_.List";
  for (const auto& [p, tensors] : lists) r->list_args.push_back(p);
  r->views = std::move(views);
  r->copies = std::move(copies);
  r->padded = std::move(padded);
  return offer_list_replay(std::move(r), op, lists);
}

bool offer_foreach_unary(const std::string& op, const std::vector<at::Tensor>& tensors, std::vector<BufferView> views,
                         std::vector<LayoutPtr> results, const std::string& out_op, std::vector<int64_t> padded) {
  const size_t n = tensors.size();
  if (views.size() != n || results.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (!results[i] || views[i].strides.size() != views[i].sizes.size()) return false;
  }
  for (int64_t i : padded) {
    if (i < 0 || static_cast<size_t>(i) >= n) return false;
  }
  auto handle = find_op(op);
  auto out_handle = find_op(out_op);
  if (!handle || !out_handle) return false;
  auto r = std::make_shared<ForeachReplay>(*handle);
  r->list_args = {0};
  r->views = {std::move(views)};
  r->results = std::move(results);
  r->out_op = *out_handle;
  r->padded = std::move(padded);
  return offer_list_replay(std::move(r), op, {{0, tensors}});
}

}  // namespace torch_layouts
