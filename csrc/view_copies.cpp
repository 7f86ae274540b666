#include "view_copies.h"

#include <map>
#include <mutex>
#include <utility>

#include "bound_layout.h"
#include "dma_executor.h"
#include "device_memory.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

// A copy's geometry as ints: per tensor its device, dtype, sizes, strides, offset, layout object
// and base tensor (what ops/operands.geometry_key holds); empty when a tensor has no layout.
std::vector<int64_t> geometry(const at::Tensor& dst, const at::Tensor& src, std::vector<LayoutPtr>* layouts) {
  std::vector<int64_t> key;
  for (const at::Tensor* t : {&dst, &src}) {
    LayoutPtr layout = t->is_privateuseone() ? layout_of(*t) : nullptr;
    if (!layout) return {};
    key.push_back(t->device().index());
    key.push_back(static_cast<int64_t>(t->scalar_type()));
    key.push_back(t->dim());
    key.insert(key.end(), t->sizes().begin(), t->sizes().end());
    key.insert(key.end(), t->strides().begin(), t->strides().end());
    key.push_back(t->storage_offset());
    key.push_back(reinterpret_cast<intptr_t>(layout->layout->get()));
    key.push_back(static_cast<int64_t>(layout->base_size.size()));
    key.insert(key.end(), layout->base_size.begin(), layout->base_size.end());
    key.insert(key.end(), layout->base_stride.begin(), layout->base_stride.end());
    if (layouts) layouts->push_back(std::move(layout));
  }
  return key;
}

struct Kept {
  std::vector<ViewCopyBox> boxes;
  std::vector<LayoutPtr> layouts;  // the layout objects whose addresses are in the key stay theirs
};

std::mutex g_mutex;
std::map<std::vector<int64_t>, std::shared_ptr<const Kept>> g_kept;

}  // namespace

void keep_view_copy(const at::Tensor& dst, const at::Tensor& src, std::vector<ViewCopyBox> boxes) {
  auto kept = std::make_shared<Kept>();
  std::vector<int64_t> key = geometry(dst, src, &kept->layouts);
  TORCH_CHECK_VALUE(!key.empty(), "a kept view copy needs two device tensors with layouts");
  for (const ViewCopyBox& box : boxes) {
    TORCH_CHECK_VALUE(box.dst_strides.size() == box.sizes.size() && box.src_strides.size() == box.sizes.size(),
                      "a view copy box needs one stride per size on each side");
  }
  kept->boxes = std::move(boxes);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_kept.size() >= kMaxViewCopies) g_kept.clear();
  g_kept[std::move(key)] = std::move(kept);
}

bool replay_view_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.storage().data() == src.storage().data()) return false;
  const std::vector<int64_t> key = geometry(dst, src, nullptr);
  if (key.empty()) return false;
  std::shared_ptr<const Kept> kept;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_kept.find(key);
    if (it == g_kept.end()) return false;
    kept = it->second;
  }
  const int64_t esize = dst.element_size();
  for (const ViewCopyBox& box : kept->boxes) {
    if (box.executor) {
      run_nests({Transfer{box.sizes, box.dst_strides, box.src_strides, box.dst_offset, box.src_offset}},
                dst.storage().mutable_data(), device_nbytes(dst.storage()) / esize, src.storage().data(),
                device_nbytes(src.storage()) / esize, esize);
    } else {
      raw_view(dst, box.sizes, box.dst_strides, box.dst_offset)
          .copy_(raw_view(src, box.sizes, box.src_strides, box.src_offset));
    }
  }
  return true;
}

int64_t kept_view_copies() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_kept.size());
}

void forget_view_copies() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_kept.clear();
}

}  // namespace torch_layouts
