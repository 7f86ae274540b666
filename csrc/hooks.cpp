// PrivateUse1 hooks: device queries, generators and storage resizing for the spyre device.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstring>

#include "device_guard.h"
#include "device_memory.h"
#include "generator.h"
#include "bound_layout.h"
#include "pinned_memory.h"

namespace torch_layouts {
namespace {

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

  // Storage resize keeps the leading bytes; the layout survives only if the buffer still holds it.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    c10::DeviceGuard guard(storage.device());
    c10::DataPtr fresh = device_allocator()->allocate(new_bytes);
    const size_t keep = std::min(storage.nbytes(), new_bytes);
    if (keep > 0) std::memcpy(fresh.get(), storage.data(), keep);
    Block* old_block = block_of(storage.data_ptr());
    Block* new_block = block_of(fresh);
    if (old_block && new_block && old_block->layout &&
        static_cast<size_t>(old_block->layout->storage_nbytes) <= new_bytes) {
      new_block->layout = old_block->layout;
    }
    auto* impl = storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

struct Register {
  Register() { at::RegisterPrivateUse1HooksInterface(new SpyreHooks()); }
} g_register;

}  // namespace
}  // namespace torch_layouts
