// Copies between host and device memory and within the device, through DMA programs.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_to_copy_native.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "converting_copies.h"
#include "device_memory.h"
#include "dma_executor.h"
#include "int64_format.h"
#include "layout_records.h"
#include "runtime_stats.h"
#include "tensor_impl.h"
#include "view_copies.h"
#include "view_offsets.h"

namespace torch_layouts {
namespace {

bool downcast_warning_from_env() {
  const char* value = std::getenv("TORCH_SPYRE_DOWNCAST_WARN");
  if (value == nullptr) return true;
  std::string text(value);
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return !(text == "0" || text == "false" || text == "off");
}

std::atomic<bool> g_downcast_warning{downcast_warning_from_env()};

c10::ScalarType bits_type(int64_t element_size) {
  switch (element_size) {
    case 1: return at::kByte;
    case 2: return at::kShort;
    case 4: return at::kInt;
    case 8: return at::kLong;
    default: TORCH_CHECK(false, "unsupported element size ", element_size);
  }
}

bool has_strides(const at::Tensor& t, c10::IntArrayRef strides) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) != strides[d]) return false;
  }
  return true;
}

// Whether no two of t's elements share an address. ATen proves it only for dense tensors; a view
// into part of a larger buffer (rows cut or padded, every other column) is proven by its strides:
// taken from the smallest, each must reach past everything the dims inside it span.
bool non_overlapping(const at::Tensor& t) {
  const at::MemOverlap found = at::has_internal_overlap(t);
  if (found != at::MemOverlap::TooHard) return found == at::MemOverlap::No;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of more than one element
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements from the first to one past the last the inner dims reach
  for (const auto& [stride, size] : dims) {
    if (stride < span) return false;
    span += stride * (size - 1);
  }
  return true;
}

// Elements addressable from a tensor's data pointer to the end of its storage.
int64_t reachable(const at::Tensor& t) {
  return static_cast<int64_t>(t.storage().nbytes()) / t.element_size() - t.storage_offset();
}

// Elements of a device buffer a copy may touch: the layout's, never past the storage.
int64_t buffer_elements(const at::Tensor& t, const BoundLayout& layout) {
  return std::min(layout.device_numel, device_nbytes(t.storage()) / t.element_size());
}

// A raw device tensor (no layout): its bytes are in host order, like CPU memory.
at::Tensor host_order_alias(const at::Tensor& t) {
  return raw_buffer(t, t.scalar_type()).as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// A device tensor that is a view of part of its buffer's base tensor.
bool part_view(const at::Tensor& t) {
  if (!t.is_privateuseone()) return false;
  LayoutPtr layout = element_layout_of(t);
  return layout && !is_whole_base(t, *layout);
}

// Copies between the host and part of a device buffer from this many elements go to the ops
// layer's planned strided copies; the element path (every element's device offset computed, then
// one take or index_copy_) costs ~20 ns an element against the call's ~30 us. Copies within the
// device go there at any size: planned once (as long as the element path), their plan is kept and
// replayed here (512 float32 elements into x[1]: 28 -> 5 us).
constexpr int64_t kPlannedViewCopy = 2048;

// Whether device tensor `t`'s layout keeps broadcast copies of its elements (a device dim of
// stride 0): a write must reach every copy, which the element path does.
bool has_copies(const at::Tensor& t) {
  LayoutPtr layout = element_layout_of(t);
  return layout && !layout->address.copies.empty();
}

// A copy into or out of part of a device buffer through the ops layer's plans: the runtime's kept
// ones, else the module (ops/view_copy.py) unless it declined this geometry before. False: the
// element path copies it (also every write into a layout with broadcast copies).
bool copy_planned(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.is_privateuseone() && has_copies(dst)) return false;
  const bool within = src.is_privateuseone() && dst.is_privateuseone();
  if (within ? replay_view_copy(dst, src) || replay_restaged_copy(dst, src) : replay_staged_copy(dst, src)) {
    return true;
  }
  if (declined_view_copy(dst, src)) return false;
  if (copy_view_planned(src, dst)) return true;
  decline_view_copy(dst, src);
  return false;
}

// Whether a copy between the host and `device`, part of a device buffer, is planned: from
// kPlannedViewCopy elements (fewer take the element path, which then costs less); never int64,
// which is stored as int32 on the device.
bool host_copy_plannable(const at::Tensor& device) {
  return device.numel() >= kPlannedViewCopy && device.scalar_type() != at::kLong;
}

// A copy between the host and part of a device buffer (of one dtype), planned where it is
// plannable; false: nothing written (the element path's to make).
bool planned_host_copy(const at::Tensor& src, const at::Tensor& dst) {
  return host_copy_plannable(dst.is_privateuseone() ? dst : src) && copy_planned(src, dst);
}

void h2d(const at::Tensor& src, const at::Tensor& dst) {
  LayoutPtr layout = element_layout_of(dst);
  if (!layout) {
    host_order_alias(dst).copy_(src);
    return;
  }
  const int64_t esize = dst.element_size();
  if (is_whole_base(dst, *layout)) {
    auto host = c10::MaybeOwned<at::Tensor>::borrowed(src);  // borrowed: see copy_from
    const std::vector<Transfer>* nests = &layout->h2d;
    CachedNests planned;
    if (!has_strides(src, layout->base_stride)) {
      planned = host_nests(layout, src.strides(), /*h2d=*/true);
      if (planned->has_value()) {
        nests = &**planned;
      } else {
        at::Tensor bounce = at::empty_strided(layout->base_size, layout->base_stride, src.options());
        bounce.copy_(src);
        host = c10::MaybeOwned<at::Tensor>::owned(std::move(bounce));
        count(Counter::HostBounces);
      }
    }
    run_nests(*nests, dst.storage().mutable_data(), buffer_elements(dst, *layout), host->const_data_ptr(),
              reachable(*host), esize);
  } else if (planned_host_copy(src, dst)) {
    return;  // (it counts its bytes)
  } else {
    at::Tensor offsets = view_offsets(*layout, dst.sizes(), dst.strides(), dst.storage_offset()).reshape({-1, 1});
    at::Tensor values = src.contiguous().view(bits_type(esize)).reshape({-1, 1});
    if (!layout->address.copies.empty()) {  // every broadcast copy of an element holds its value
      at::Tensor copies = copy_offsets(*layout).reshape({1, -1});
      offsets = offsets + copies;
      values = values.expand({-1, copies.size(1)});
    }
    raw_buffer(dst, bits_type(esize)).index_copy_(0, offsets.reshape({-1}), values.reshape({-1}));
    count(Counter::ViewScatters);
  }
  count(Counter::H2DBytes, dst.numel() * esize);
}

// Reads a device tensor into a fresh contiguous CPU tensor.
at::Tensor d2h_fresh(const at::Tensor& src);

void d2h(const at::Tensor& src, const at::Tensor& dst) {
  LayoutPtr layout = element_layout_of(src);
  if (!layout) {
    dst.copy_(host_order_alias(src));
    return;
  }
  if (dst.scalar_type() == src.scalar_type() && is_whole_base(src, *layout)) {
    const std::vector<Transfer>* nests = non_overlapping(dst) ? &layout->d2h : nullptr;
    CachedNests planned;
    if (nests && !has_strides(dst, layout->base_stride)) {
      planned = host_nests(layout, dst.strides(), /*h2d=*/false);
      nests = planned->has_value() ? &**planned : nullptr;
    }
    if (nests) {
      run_nests(*nests, dst.mutable_data_ptr(), reachable(dst), src.storage().data(), buffer_elements(src, *layout),
                src.element_size(), Split::kDestination);
      count(Counter::D2HBytes, src.numel() * src.element_size());
      return;
    }
    count(Counter::HostBounces);  // read into a fresh host tensor, then copied into dst
  }
  dst.copy_(d2h_fresh(src));
}

at::Tensor d2h_fresh(const at::Tensor& src) {
  LayoutPtr layout = element_layout_of(src);
  if (!layout) return host_order_alias(src).clone();
  const auto options = src.options().device(at::kCPU);
  if (is_whole_base(src, *layout)) {
    at::Tensor out = at::empty_strided(layout->base_size, layout->base_stride, options);
    run_nests(layout->d2h, out.mutable_data_ptr(), reachable(out), src.storage().data(), buffer_elements(src, *layout),
              src.element_size(), Split::kDestination);
    count(Counter::D2HBytes, src.numel() * src.element_size());
    return out.as_strided(src.sizes(), src.strides(), 0);
  }
  if (host_copy_plannable(src)) {  // part of a buffer: a planned copy into a new host tensor
    if (at::Tensor out = at::empty(src.sizes(), options); copy_planned(src, out)) return out;
  }
  at::Tensor offsets = view_offsets(*layout, src.sizes(), src.strides(), src.storage_offset());
  const auto bits = bits_type(src.element_size());
  at::Tensor out = raw_buffer(src, bits).take(offsets).view(src.scalar_type());
  count(Counter::ViewGathers);
  count(Counter::D2HBytes, src.numel() * src.element_size());
  return out;
}

void d2d(const at::Tensor& src, const at::Tensor& dst) {
  LayoutPtr from = element_layout_of(src), to = element_layout_of(dst);
  if (from && to && is_whole_base(src, *from) && is_whole_base(dst, *to) && from->base_size == to->base_size) {
    const CachedNests nests = from == to ? nullptr : relayout_nests(from, to);
    const std::vector<Transfer> same{Transfer{{from->device_numel}, {1}, {1}, 0, 0}};  // one layout: one run
    const std::vector<Transfer>* program = !nests ? &same : nests->has_value() ? &**nests : nullptr;
    // A dtype change (float32 <-> float16 or bfloat16) converts each run where it lies into where it
    // goes: through the host, 1024x256 float32 -> float16 took 46 us against the CPU's 13.
    bool moved = false;
    if (program && src.scalar_type() == dst.scalar_type()) {
      run_nests(*program, dst.storage().mutable_data(), buffer_elements(dst, *to), src.storage().data(),
                buffer_elements(src, *from), src.element_size());
      moved = true;
    } else if (program) {
      moved = run_converting_nests(*program, dst.storage().mutable_data(), buffer_elements(dst, *to),
                                   dst.scalar_type(), src.storage().data(), buffer_elements(src, *from),
                                   src.scalar_type());
    }
    if (moved) {
      count(Counter::D2DBytes, src.numel() * src.element_size());
      if (from != to) {
        count(Counter::Relayouts);
        count(Counter::RelayoutBytes, src.numel() * src.element_size());
      }
      return;
    }
  }
  // Views, other dtype changes, or layouts with no direct program: stage the values in a host
  // buffer (a gather for views), then run dst's program (a scatter for views).
  if (from && to && is_whole_base(src, *from) && is_whole_base(dst, *to)) count(Counter::HostBounces);
  h2d(d2h_fresh(src).to(dst.scalar_type()), dst);
}

// int64 lives on the device in Torch-Spyre's IEEE_INT32 format: a host value it cannot hold is
// refused by name, never wrapped (the simulator's 8-byte slots keep device results whole).
void check_int32_range(const at::Tensor& values) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  if (values.is_contiguous() && values.numel() <= 4096) {  // a batch's targets: a loop, not two reductions and two syncs
    const int64_t* v = values.const_data_ptr<int64_t>();
    bool inside = true;
    for (int64_t i = 0; i < values.numel(); ++i) inside &= v[i] >= kMin && v[i] <= kMax;
    if (inside) return;
  } else {
    auto [low, high] = at::aminmax(values);
    if (low.item<int64_t>() >= kMin && high.item<int64_t>() <= kMax) return;
  }
  at::Tensor flat = values.reshape({-1});
  const int64_t index = ((flat < kMin) | (flat > kMax)).nonzero().select(1, 0)[0].item<int64_t>();
  TORCH_CHECK_VALUE(false, "int64 value ", flat[index].item<int64_t>(), " (element ", index,
                    " in row-major order) does not fit the spyre device format IEEE_INT32 of int64 tensors [",
                    kMin, ", ", kMax, "]; it is refused rather than wrapped");
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking: copies are synchronous*/) {
  if (dst.numel() == 0) return dst;
  // Borrowed where no new tensor is made: a copy of a tensor Python holds, made while the GIL is
  // released, takes the GIL to keep its Python object (PyTorch's PyObject preservation).
  const auto source = self.sizes() == dst.sizes() ? c10::MaybeOwned<at::Tensor>::borrowed(self)
                                                  : c10::MaybeOwned<at::Tensor>::owned(self.expand(dst.sizes()));
  const at::Tensor& src = *source;
  const bool src_dev = src.is_privateuseone(), dst_dev = dst.is_privateuseone();
  if (src.scalar_type() == dst.scalar_type() && (part_view(src) || part_view(dst)) &&
      (src_dev && dst_dev ? dst.scalar_type() != at::kLong && copy_planned(src, dst) : planned_host_copy(src, dst))) {
    if (src_dev && dst_dev) count(Counter::D2DBytes, dst.numel() * dst.element_size());  // a host side counts its own
    return dst;
  }
  if (!src_dev && dst_dev) {
    const auto host = src.scalar_type() == dst.scalar_type()
                          ? c10::MaybeOwned<at::Tensor>::borrowed(src)
                          : c10::MaybeOwned<at::Tensor>::owned(src.to(dst.scalar_type()));
    if (dst.scalar_type() == at::kLong) {
      warn_int64_downcast();
      check_int32_range(*host);
    }
    h2d(*host, dst);
  } else if (src_dev && !dst_dev) {
    d2h(src, dst);
  } else {
    TORCH_CHECK(src_dev && dst_dev, "spyre copy between ", src.device(), " and ", dst.device());
    d2d(src, dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    if (dst.is_privateuseone()) {
      dst.resize_(self.sizes());
    } else {
      at::native::resize_(dst, self.sizes(), std::nullopt);
    }
  }
  return copy_from(self, dst, false);
}

// Same-device copies (dtype conversions) keep the buffer's dim order through the ops layer;
// moves between devices take PyTorch's own path (allocation, then a DMA copy).
at::Tensor to_copy(const at::Tensor& self, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                   std::optional<c10::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<c10::MemoryFormat> memory_format) {
  const c10::Device target = device.value_or(self.device());
  const auto format = memory_format.value_or(c10::MemoryFormat::Preserve);
  TORCH_CHECK(!target.is_privateuseone() || format == c10::MemoryFormat::Preserve ||
                  format == c10::MemoryFormat::Contiguous,
              "Spyre backend only supports contiguous memory format, got: ", format);
  const bool same_device = self.is_privateuseone() && target.is_privateuseone() &&
                           (!target.has_index() || target.index() == self.device().index());
  const bool plain = c10::layout_or_default(layout) == c10::Layout::Strided && !pin_memory.value_or(false) &&
                     memory_format.value_or(c10::MemoryFormat::Preserve) == c10::MemoryFormat::Preserve;
  if (same_device && plain) {
    if (auto converted = convert_on_device(self, dtype.value_or(self.scalar_type()))) return *converted;
  }
  // A host tensor moved in as native::_to_copy moves it: a tensor of its strides in the default
  // layout (empty_strided's), the copy into it (copy_'s, below autograd: no version bump), without
  // dispatching the two (with the move's other changes, a batch's int64 target: 11.5 -> 8.1
  // thousand instructions).
  if (plain && self.is_cpu() && target.is_privateuseone() && self.layout() == c10::kStrided && !self.is_conj() &&
      !self.is_neg() && self.is_non_overlapping_and_dense()) {
    at::Tensor out = new_device_tensor(default_layout(dtype.value_or(self.scalar_type()), self.sizes(), self.strides()),
                                       resolved_device(target));
    copy_from(self, out, non_blocking);
    return out;
  }
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(d2h_fresh(self));
}

}  // namespace

at::Tensor to_host(const at::Tensor& src) { return d2h_fresh(src).contiguous(); }

bool downcast_warning_enabled() { return g_downcast_warning.load(); }

void set_downcast_warning_enabled(bool enabled) { g_downcast_warning.store(enabled); }

void warn_int64_downcast() {
  if (!g_downcast_warning.load()) return;
  TORCH_WARN_ONCE("Backend Spyre does not support int64; int64 tensors are stored as int32 (DataFormats.IEEE_INT32) "
                  "on the device, and a value outside [-2**31, 2**31 - 1] raises when copied there. Silence this "
                  "with torch.spyre.set_downcast_warning(False) or TORCH_SPYRE_DOWNCAST_WARN=0.");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("_to_copy", to_copy);
}

}  // namespace torch_layouts
