// PrivateUse1 hooks: device queries, generators and storage resizing for the spyre device.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "device_guard.h"
#include "device_memory.h"
#include "dma_executor.h"
#include "generator.h"
#include "bound_layout.h"
#include "pinned_memory.h"
#include "tensor_impl.h"

namespace torch_layouts {
namespace {

// The device bytes a storage laid out as `layout` keeps when resized to `new_bytes` with its layout:
// 0 (the record stays with the empty block while FSDP has the parameter freed), or, from the bytes
// of the host tensor it holds (numel * itemsize, what FSDP re-allocates) up, at least the whole
// padded buffer; nullopt below those bytes (the layout no longer fits: the storage becomes raw bytes).
std::optional<int64_t> laid_out_bytes(const BoundLayout& layout, size_t new_bytes) {
  if (new_bytes == 0) return 0;
  const auto logical = static_cast<size_t>(c10::multiply_integers(layout.base_size)) * c10::elementSize(layout.dtype);
  if (new_bytes < logical) return std::nullopt;
  return std::max(static_cast<int64_t>(new_bytes), layout.storage_nbytes);
}

// Sets a freshly allocated buffer's padding to the layout's pad value, as new_device_tensor does.
void fill_padding(const BoundLayout& layout, void* data) {
  if (layout.padding.empty()) return;
  const int64_t numel = layout.storage_nbytes / static_cast<int64_t>(c10::elementSize(layout.dtype));
  run_fills(layout.padding, data, numel, layout.dtype, layout.pad_value);
}

struct SpyreHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override { return exchange_device(device); }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return device >= 0 && device < device_count() ? exchange_device(device) : current_device();
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override { return new_generator(device); }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return {c10::DeviceType::PrivateUse1, current_device()};
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  void init() const override {}  // the simulated devices need no initialisation

  // Storage resize keeps the leading bytes, and the layout where laid_out_bytes allows: then
  // nbytes() reports the bytes asked for, as on the CPU, and the block behind is the padded buffer.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    c10::DeviceGuard guard(storage.device());
    Block* old_block = block_of(storage.data_ptr());
    const LayoutPtr layout = old_block ? old_block->layout : nullptr;
    const std::optional<int64_t> laid = layout ? laid_out_bytes(*layout, new_bytes) : std::nullopt;
    auto* impl = storage.unsafeGetStorageImpl();
    if (laid && old_block->nbytes == *laid) {  // the block already is the buffer the layout needs
      impl->set_nbytes(new_bytes);
      return;
    }
    const auto bytes = laid ? static_cast<size_t>(*laid) : new_bytes;
    c10::DataPtr fresh = device_allocator()->allocate(bytes);
    const size_t keep = std::min(static_cast<size_t>(device_nbytes(storage)), bytes);
    if (keep > 0) std::memcpy(fresh.get(), storage.data(), keep);
    if (laid) {
      block_of(fresh)->layout = layout;
      if (bytes > 0 && keep < static_cast<size_t>(layout->storage_nbytes)) fill_padding(*layout, fresh.get());
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

struct Register {
  Register() { at::RegisterPrivateUse1HooksInterface(new SpyreHooks()); }
} g_register;

}  // namespace
}  // namespace torch_layouts
