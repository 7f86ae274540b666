#include "dtype_views.h"

#include <c10/util/Exception.h>

namespace torch_layouts {
namespace {

std::shared_ptr<BoundLayout> derived(const BoundLayout& from, c10::ScalarType dtype) {
  auto info = std::make_shared<BoundLayout>();
  info->layout = from.layout;
  info->dtype = dtype;
  info->storage_nbytes = from.storage_nbytes;
  info->pad_value = from.pad_value;
  info->dtype_view = true;  // copies gather/scatter by address; no DMA nests, never allocated
  return info;
}

// Each buffer element holds r narrower elements side by side: an extra host dim of size r.
std::shared_ptr<const BoundLayout> split(const BoundLayout& from, c10::ScalarType dtype, int64_t r) {
  auto info = derived(from, dtype);
  const auto part = static_cast<int64_t>(from.base_size.size());
  info->base_size = from.base_size;
  info->base_size.push_back(r);
  for (const int64_t s : from.base_stride) info->base_stride.push_back(s * r);
  info->base_stride.push_back(1);
  info->device_numel = from.device_numel * r;
  AddressTable& a = info->address;
  for (const auto& [dim, stride] : from.address.host_order) a.host_order.emplace_back(dim, stride * r);
  a.host_order.emplace_back(part, 1);
  for (AddressGroup group : from.address.groups) {
    for (auto& digit : group.digits) digit.second *= r;
    a.groups.push_back(std::move(group));
  }
  a.groups.push_back(AddressGroup{{part}, {{1, 1}}});
  for (const auto& [size, stride] : from.address.copies) a.copies.emplace_back(size, stride * r);
  return info;
}

// r buffer elements make one wider element: possible when the host dim of stride 1 is the
// innermost digit of its group, laid out with device stride 1 in runs of a multiple of r, and
// every other stride is a multiple of r (so the r parts are adjacent and aligned).
std::shared_ptr<const BoundLayout> merge(const BoundLayout& from, c10::ScalarType dtype, int64_t r) {
  const AddressTable& t = from.address;
  if (t.host_order.empty() || from.device_numel % r != 0) return nullptr;
  const int64_t last = t.host_order.back().first;
  if (t.host_order.back().second != 1 || from.base_size[last] % r != 0) return nullptr;
  auto info = derived(from, dtype);
  info->base_size = from.base_size;
  info->base_size[last] /= r;
  info->base_stride = from.base_stride;
  for (size_t d = 0; d < info->base_stride.size(); ++d) {
    if (static_cast<int64_t>(d) == last) continue;
    if (from.base_size[d] > 1 && from.base_stride[d] % r != 0) return nullptr;
    info->base_stride[d] /= r;
  }
  info->device_numel = from.device_numel / r;
  AddressTable& a = info->address;
  for (const auto& [dim, stride] : t.host_order) a.host_order.emplace_back(dim, dim == last ? 1 : stride / r);
  for (const AddressGroup& group : t.groups) {
    AddressGroup out{group.host_dims, {}};
    const bool owns_last = !group.host_dims.empty() && group.host_dims.back() == last;
    for (size_t i = 0; i < group.digits.size(); ++i) {
      const auto [step, stride] = group.digits[i];
      const bool finest = owns_last && i + 1 == group.digits.size();
      if (finest) {
        if (step != 1 || stride != 1) return nullptr;
        out.digits.emplace_back(1, 1);
      } else {  // only the group holding the stride-1 dim counts in parts of r
        if ((owns_last && step % r != 0) || stride % r != 0) return nullptr;
        out.digits.emplace_back(owns_last ? step / r : step, stride / r);
      }
    }
    if (owns_last && group.digits.empty()) return nullptr;
    a.groups.push_back(std::move(out));
  }
  for (const auto& [size, stride] : t.copies) {
    if (stride % r != 0) return nullptr;
    a.copies.emplace_back(size, stride / r);
  }
  return info;
}

}  // namespace

std::shared_ptr<const BoundLayout> dtype_view_layout(const BoundLayout& buffer, c10::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(buffer.dtype_views_mutex);
  auto found = buffer.dtype_views.find(dtype);
  if (found != buffer.dtype_views.end()) return found->second;
  const auto from = static_cast<int64_t>(c10::elementSize(buffer.dtype));
  const auto to = static_cast<int64_t>(c10::elementSize(dtype));
  std::shared_ptr<const BoundLayout> info;
  if (from % to == 0) {
    info = split(buffer, dtype, from / to);
  } else if (to % from == 0) {
    info = merge(buffer, dtype, to / from);
  }
  buffer.dtype_views.emplace(dtype, info);
  return info;
}

}  // namespace torch_layouts
