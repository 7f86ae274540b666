#include "view_copies.h"

#include <map>
#include <mutex>
#include <utility>

#include "dma_executor.h"
#include "device_memory.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

// A copy's geometry: both tensors' geometry keys; empty when either has no layout.
std::vector<int64_t> geometry(const at::Tensor& dst, const at::Tensor& src) {
  std::vector<int64_t> key = geometry_key(dst), second = geometry_key(src);
  if (key.empty() || second.empty()) return {};
  key.insert(key.end(), second.begin(), second.end());
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
  std::vector<int64_t> key = geometry(dst, src);
  TORCH_CHECK_VALUE(!key.empty(), "a kept view copy needs two device tensors with layouts");
  auto kept = std::make_shared<Kept>();
  kept->layouts = {layout_of(dst), layout_of(src)};
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
  const std::vector<int64_t> key = geometry(dst, src);
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
