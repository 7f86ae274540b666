#include "view_copies.h"

#include <utility>

#include "bounded_table.h"
#include "dma_executor.h"
#include "device_memory.h"
#include "runtime_stats.h"
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

// A copy's geometry leaving out both storage offsets (geometry_key's offset follows the strides).
std::vector<int64_t> offsetless(const at::Tensor& dst, const at::Tensor& src) {
  std::vector<int64_t> key;
  for (const at::Tensor* t : {&dst, &src}) {
    std::vector<int64_t> g = geometry_key(*t);
    if (g.empty()) return {};
    g.erase(g.begin() + 3 + 2 * t->dim());
    key.insert(key.end(), g.begin(), g.end());
  }
  return key;
}

struct Kept {
  std::vector<ViewCopyBox> boxes;
  std::vector<LayoutPtr> layouts;  // the layout objects whose addresses are in the key stay theirs
  int64_t dst_offset = 0, src_offset = 0;  // the storage offsets it was planned at
  UntiledDims dst_untiled, src_untiled;
};

// The coordinates a host side is staged through, per geometry of the device side. Where they
// hold their elements in row-major order and nothing else, the kept plans between the staged
// tensor and the device side (each way, where kept) take a contiguous host side's own buffer in
// place of the staged one's.
struct Staging {
  LayoutPtr staged, device;  // the staging tensors' layout; the device side's (its address is in the key)
  std::shared_ptr<const Kept> into_device, out_of_device;
};

// A copy within the device that no coordinates read on both sides, per geometry of (dst, src): the
// layout the source is first copied whole into (none where it is whole), the one it then moves
// into, which reads the destination; and both sides' layouts (their addresses are in the key).
struct Restaging {
  LayoutPtr whole, readable, dst, src;
};

BoundedTable<std::shared_ptr<const Kept>> g_kept(kMaxViewCopies), g_shiftable(kMaxViewCopies);
BoundedTable<Staging> g_staging(kMaxViewCopies);
BoundedTable<Restaging> g_restaging(kMaxViewCopies);
// Geometries ops/view_copy.py found no plan for (they take the runtime's element path), with the
// layouts whose addresses are in their keys.
BoundedTable<std::pair<LayoutPtr, LayoutPtr>> g_declined(kMaxViewCopies);

// A copy's key for g_declined: both sides' geometry within the device; the device side's alone
// for a copy with the host (the module plans those from the device side only).
std::vector<int64_t> declined_key(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.is_privateuseone() && src.is_privateuseone()) return geometry(dst, src);
  std::vector<int64_t> key = geometry_key(dst.is_privateuseone() ? dst : src);
  if (!key.empty()) key.push_back(dst.is_privateuseone());
  return key;
}

// How far (device elements) every element of `t` lies from the same element of the view at
// storage offset `offset`: whole steps along an untiled dim of the base that no dim of the view
// spans (the new index within the dim) move every element by that many device strides.
std::optional<int64_t> device_shift(const at::Tensor& t, int64_t offset, const UntiledDims& untiled) {
  const int64_t delta = t.storage_offset() - offset;
  if (delta == 0) return 0;
  LayoutPtr layout = layout_of(t);
  if (!layout) return std::nullopt;
  const std::vector<int64_t>& size = layout->base_size;
  const std::vector<int64_t>& stride = layout->base_stride;
  for (const auto& [h, device_stride] : untiled) {
    if (h < 0 || h >= static_cast<int64_t>(size.size()) || size[h] <= 1 || delta % stride[h] != 0) continue;
    bool spans = false;
    for (int64_t j = 0; j < t.dim() && !spans; ++j) {
      if (t.size(j) <= 1) continue;
      bool other = false;
      for (size_t b = 0; b < size.size(); ++b) other |= static_cast<int64_t>(b) != h && size[b] > 1 && stride[b] == t.stride(j);
      spans = !other;
    }
    if (spans) continue;
    const int64_t before = offset / stride[h] % size[h], after = t.storage_offset() / stride[h] % size[h];
    if (after - before == delta / stride[h]) return (after - before) * device_stride;
  }
  return std::nullopt;
}

// One side of a kept plan: a device tensor's raw buffer, or (`host`) a contiguous CPU tensor
// standing for a staged buffer whose elements lie in row-major order with nothing else.
struct Side {
  const at::Tensor& t;
  bool host = false;

  char* data() const {
    return static_cast<char*>(host ? t.data_ptr() : t.storage().mutable_data());
  }
  int64_t numel() const { return host ? t.numel() : device_nbytes(t.storage()) / t.element_size(); }
};

// Every box on the DMA executor: in the runtime, with no Python call to amortise, it copied each
// kept box at least as fast as PyTorch's copy_, which ops/view_copy.py keeps for some boxes it
// copies itself (1 MiB x[:, :1024] <- a device tensor, 256x2048 float32: 12.0-12.4 -> 9.5-9.7 us;
// a 15-element box 3.9 -> 3.4).
void run_boxes(Side dst, Side src, const std::vector<ViewCopyBox>& boxes, int64_t dst_shift, int64_t src_shift) {
  const int64_t esize = dst.t.element_size();
  for (const ViewCopyBox& box : boxes) {
    run_nests({Transfer{box.sizes, box.dst_strides, box.src_strides, box.dst_offset + dst_shift,
                        box.src_offset + src_shift}},
              dst.data(), dst.numel(), src.data(), src.numel(), esize);
  }
}

}  // namespace

void keep_view_copy(const at::Tensor& dst, const at::Tensor& src, std::vector<ViewCopyBox> boxes,
                    std::optional<std::pair<UntiledDims, UntiledDims>> untiled) {
  std::vector<int64_t> key = geometry(dst, src);
  TORCH_CHECK_VALUE(!key.empty(), "a kept view copy needs two device tensors with layouts");
  auto kept = std::make_shared<Kept>();
  kept->layouts = {layout_of(dst), layout_of(src)};
  for (const ViewCopyBox& box : boxes) {
    TORCH_CHECK_VALUE(box.dst_strides.size() == box.sizes.size() && box.src_strides.size() == box.sizes.size(),
                      "a view copy box needs one stride per size on each side");
  }
  kept->boxes = std::move(boxes);
  kept->dst_offset = dst.storage_offset();
  kept->src_offset = src.storage_offset();
  if (untiled) {
    kept->dst_untiled = std::move(untiled->first);
    kept->src_untiled = std::move(untiled->second);
  }
  if (!kept->dst_untiled.empty() || !kept->src_untiled.empty()) g_shiftable.keep(offsetless(dst, src), kept);
  g_kept.keep(std::move(key), std::move(kept));
}

bool replay_view_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.storage().data() == src.storage().data()) return false;
  const std::vector<int64_t> key = geometry(dst, src);
  if (key.empty()) return false;
  if (const auto kept = g_kept.find(key)) {
    run_boxes({dst}, {src}, (*kept)->boxes, 0, 0);
    return true;
  }
  const std::shared_ptr<const Kept> shiftable = g_shiftable.find(offsetless(dst, src)).value_or(nullptr);
  if (!shiftable) return false;
  const std::optional<int64_t> dst_shift = device_shift(dst, shiftable->dst_offset, shiftable->dst_untiled);
  const std::optional<int64_t> src_shift = device_shift(src, shiftable->src_offset, shiftable->src_untiled);
  if (!dst_shift || !src_shift) return false;
  run_boxes({dst}, {src}, shiftable->boxes, *dst_shift, *src_shift);
  return true;
}

void keep_staging(const at::Tensor& device, const at::Tensor& staged) {
  std::vector<int64_t> key = geometry_key(device);
  LayoutPtr layout = layout_of(staged);
  TORCH_CHECK_VALUE(!key.empty() && layout && staged.sizes() == device.sizes(),
                    "a staging needs a device tensor with a layout and a staged tensor of its shape");
  Staging staging{layout, layout_of(device)};
  if (row_major_only(*layout)) {
    staging.into_device = g_kept.find(geometry(device, staged)).value_or(nullptr);
    staging.out_of_device = g_kept.find(geometry(staged, device)).value_or(nullptr);
  }
  g_staging.keep(std::move(key), std::move(staging));
}

bool replay_staged_copy(const at::Tensor& dst, const at::Tensor& src) {
  const bool to_device = dst.is_privateuseone();
  const at::Tensor& device = to_device ? dst : src;
  const std::vector<int64_t> key = geometry_key(device);
  if (key.empty()) return false;
  const std::optional<Staging> kept = g_staging.find(key);
  if (!kept) return false;
  const at::Tensor& host = to_device ? src : dst;
  const std::shared_ptr<const Kept>& direct = to_device ? kept->into_device : kept->out_of_device;
  // (a host tensor over the device buffer itself, a raw alias, is staged: the staging reads it whole first)
  const char* h = static_cast<const char*>(host.const_data_ptr());
  const char* b = static_cast<const char*>(device.storage().data());
  const bool apart = h + host.nbytes() <= b || b + device_nbytes(device.storage()) <= h;
  if (direct && apart && host.is_contiguous() && !host.is_conj() && !host.is_neg() &&
      host.scalar_type() == device.scalar_type()) {
    run_boxes({dst, !to_device}, {src, to_device}, direct->boxes, 0, 0);  // the host buffer stands for the staged one
    count(to_device ? Counter::H2DBytes : Counter::D2HBytes, host.numel() * host.element_size());
    return true;
  }
  at::Tensor staged = new_device_tensor(kept->staged, device.device());
  if (to_device) return replay_view_copy(dst, staged.copy_(src));
  if (!replay_view_copy(staged, src)) return false;
  dst.copy_(staged);
  return true;
}

void keep_restaging(const at::Tensor& dst, const at::Tensor& src, const std::optional<at::Tensor>& whole,
                    const at::Tensor& readable) {
  std::vector<int64_t> key = geometry(dst, src);
  LayoutPtr into = layout_of(readable), first = whole ? layout_of(*whole) : nullptr;
  TORCH_CHECK_VALUE(!key.empty() && into && (!whole || first) && readable.sizes() == dst.sizes(),
                    "a restaging needs device tensors with layouts, the last of the destination's shape");
  g_restaging.keep(std::move(key), Restaging{std::move(first), std::move(into), layout_of(dst), layout_of(src)});
}

bool replay_restaged_copy(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.storage().data() == src.storage().data()) return false;
  const std::vector<int64_t> key = geometry(dst, src);
  if (key.empty()) return false;
  const std::optional<Restaging> r = g_restaging.find(key);
  if (!r) return false;
  at::Tensor source = src;
  if (r->whole) {
    source = new_device_tensor(r->whole, src.device());
    if (!replay_view_copy(source, src)) return false;
  }
  return replay_view_copy(dst, new_device_tensor(r->readable, src.device()).copy_(source));
}

void decline_view_copy(const at::Tensor& dst, const at::Tensor& src) {
  std::vector<int64_t> key = declined_key(dst, src);
  if (key.empty()) return;
  g_declined.keep(std::move(key), {layout_of(dst), layout_of(src)});
}

bool declined_view_copy(const at::Tensor& dst, const at::Tensor& src) {
  const std::vector<int64_t> key = declined_key(dst, src);
  return !key.empty() && g_declined.find(key).has_value();
}

int64_t kept_view_copies() { return static_cast<int64_t>(g_kept.size()); }

void forget_view_copies() {
  g_kept.clear();
  g_shiftable.clear();
  g_staging.clear();
  g_restaging.clear();
  g_declined.clear();
}

}  // namespace torch_layouts
