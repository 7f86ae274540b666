// Allocation kernels: every device tensor is born with its layout and padding set.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/zeros.h>
#include <c10/core/MemoryFormat.h>
#include <torch/library.h>

#include "device_memory.h"
#include "layout_records.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

void check_options(std::optional<c10::Layout> layout_opt, std::optional<bool> pin_memory_opt) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::layout_or_default(layout_opt) == c10::Layout::Strided,
                              "spyre tensors are strided; got layout ", c10::layout_or_default(layout_opt));
  TORCH_CHECK_VALUE(!c10::pinned_memory_or_default(pin_memory_opt), "pin_memory applies to CPU tensors only");
}

std::vector<int64_t> strides_for(c10::IntArrayRef size, std::optional<c10::MemoryFormat> format) {
  switch (format.value_or(c10::MemoryFormat::Contiguous)) {
    case c10::MemoryFormat::ChannelsLast:
      return c10::get_channels_last_strides_2d(size);
    case c10::MemoryFormat::ChannelsLast3d:
      return c10::get_channels_last_strides_3d(size);
    default: {
      const auto strides = c10::contiguous_strides(size);
      return {strides.begin(), strides.end()};
    }
  }
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype_opt,
                         std::optional<c10::Layout> layout_opt, std::optional<c10::Device> device_opt,
                         std::optional<bool> pin_memory_opt) {
  check_options(layout_opt, pin_memory_opt);
  const c10::Device device = resolved_device(device_opt);
  at::detail::check_size_nonnegative(size);
  return new_device_tensor(default_layout(c10::dtype_or_default(dtype_opt), size, stride), device);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype_opt,
                               std::optional<c10::Layout> layout_opt, std::optional<c10::Device> device_opt,
                               std::optional<bool> pin_memory_opt, std::optional<c10::MemoryFormat> format) {
  at::detail::check_size_nonnegative(size);
  return empty_strided(size, strides_for(size, format), dtype_opt, layout_opt, device_opt, pin_memory_opt);
}

// An explicit channels-last request is refused, as in torch.empty (Torch-Spyre); preserve keeps
// the source's strides. Kernels asking empty.memory_format for channels-last strides still get them.
at::Tensor empty_like(const at::Tensor& self, std::optional<c10::ScalarType> dtype_opt,
                      std::optional<c10::Layout> layout_opt, std::optional<c10::Device> device_opt,
                      std::optional<bool> pin_memory_opt, std::optional<c10::MemoryFormat> format) {
  const auto requested = format.value_or(c10::MemoryFormat::Preserve);
  const bool to_device = device_opt.has_value() ? device_opt->is_privateuseone() : self.is_privateuseone();
  TORCH_CHECK(!to_device || requested == c10::MemoryFormat::Preserve || requested == c10::MemoryFormat::Contiguous,
              "Spyre backend only supports contiguous memory format, got: ", requested);
  return at::native::empty_like(self, dtype_opt, layout_opt, device_opt, pin_memory_opt, format);
}

// Elements from the start of a storage to the end of a (size, stride) view at `offset`.
int64_t extent(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t offset) {
  int64_t last = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] == 0) return offset;
    last += (size[d] - 1) * stride[d];
  }
  return last + 1;
}

// The first `count` elements of a device storage in storage order (the base tensor's host
// order for a laid-out buffer, its bytes for a raw one), as a 1-D CPU tensor.
at::Tensor storage_elements(const at::Tensor& self, const LayoutPtr& layout, int64_t count) {
  if (!layout) return raw_buffer(self, self.scalar_type()).narrow(0, 0, count).clone();
  const auto cpu = self.options().device(at::kCPU);
  at::Tensor host = at::empty_strided(layout->base_size, layout->base_stride, cpu);
  host.copy_(make_alias(self, layout->base_size, layout->base_stride, 0));
  return host.as_strided({count}, {1}, 0);
}

// A buffer that must grow is re-laid: a fresh buffer in the default layout of the new shape
// (of the whole storage, 1-D, for a view that starts past its storage's first element) holding
// the old elements in storage order, put under the storage every view of it shares.
void regrow(const at::Tensor& self, int64_t needed, c10::IntArrayRef size, c10::IntArrayRef stride,
            const LayoutPtr& layout, int64_t held) {
  c10::StorageImpl* storage = self.storage().unsafeGetStorageImpl();
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  TORCH_CHECK(!layout || c10::elementSize(layout->dtype) == static_cast<size_t>(self.element_size()),
              "cannot grow a ", self.scalar_type(), " view of a spyre buffer laid out for ", layout->dtype,
              " with resize_; resize the buffer's own tensor instead");
  const bool whole = self.storage_offset() == 0;
  LayoutPtr fresh_layout = whole ? default_layout(self.scalar_type(), size, stride)
                                 : default_layout(self.scalar_type(), {needed}, {1});
  at::Tensor fresh = new_device_tensor(fresh_layout, self.device());
  const int64_t keep = std::min(held, needed);
  if (keep > 0) {
    at::Tensor flat = at::zeros({extent(fresh_layout->base_size, fresh_layout->base_stride, 0)},
                                self.options().device(at::kCPU));
    flat.narrow(0, 0, keep).copy_(storage_elements(self, layout, keep));
    fresh.copy_(flat.as_strided(fresh_layout->base_size, fresh_layout->base_stride, 0));
  }
  c10::StorageImpl* from = fresh.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(from->set_data_ptr(c10::DataPtr(nullptr, fresh.device())));
  storage->set_nbytes(from->nbytes());
  from->set_nbytes(0);
  if (auto* spyre = dynamic_cast<SpyreTensorImpl*>(self.unsafeGetTensorImpl())) spyre->set_layout(fresh_layout);
}

// As on the CPU: the storage (shared with every view) keeps its elements in storage order and
// grows only when the new shape reaches past its end; the view keeps its storage offset.
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size_sym,
                          std::optional<c10::MemoryFormat> format) {
  const auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  at::detail::check_size_nonnegative(size);
  const auto stride = strides_for(size, format);
  if (self.sizes() == size && (!format || self.strides() == c10::IntArrayRef(stride))) return self;
  const int64_t needed = extent(size, stride, self.storage_offset());
  LayoutPtr layout = layout_of(self);
  if (layout && c10::elementSize(layout->dtype) != static_cast<size_t>(self.element_size())) layout = nullptr;
  const int64_t held = layout ? extent(layout->base_size, layout->base_stride, 0)
                              : static_cast<int64_t>(self.storage().nbytes()) / self.element_size();
  if (needed > held) regrow(self, needed, size, stride, layout ? layout : layout_of(self), held);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return self;
}

void refresh_layout(const at::Tensor& self) {
  if (auto* impl = dynamic_cast<SpyreTensorImpl*>(self.unsafeGetTensorImpl())) {
    Block* block = block_of(self.storage().data_ptr());
    impl->set_layout(block ? block->layout : nullptr);
  }
}

at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  at::cpu::set_(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
  refresh_layout(self);
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes()) / static_cast<int64_t>(self.dtype().itemsize());
  at::cpu::set_(self, source, 0, {numel}, {});
  refresh_layout(self);
  return self;
}

at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (!self.is_same(source)) {
    at::cpu::set_(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
    if (auto* impl = dynamic_cast<SpyreTensorImpl*>(self.unsafeGetTensorImpl())) impl->set_layout(layout_of(source));
  }
  return self;
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  at::cpu::set_(self, storage, 0, {0}, {});
  refresh_layout(self);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("empty_like", empty_like);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset_);
  m.impl("set_.source_Storage", set_storage_);
  m.impl("set_.source_Tensor", set_tensor_);
  m.impl("set_", set_empty_);
}

}  // namespace torch_layouts
