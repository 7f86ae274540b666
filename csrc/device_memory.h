// Simulated device memory: per-device capacity, 128-byte aligned blocks, CUDA-like stats.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace torch_layouts {

struct BoundLayout;

constexpr int64_t kAlignment = 128;

// One live block of device memory. Its layout (set once the tensor that owns the
// buffer is created) lets any alias of the storage find how the bytes are laid out.
struct Block {
  void* ptr = nullptr;
  int64_t nbytes = 0;      // bytes requested
  int64_t reserved = 0;    // bytes counted against the capacity (rounded up to 128)
  int64_t backing = 0;     // host bytes behind it (from 1 MiB: whole 2 MiB pages; from 64 KiB: 16 KiB steps)
  c10::DeviceIndex device = 0;
  std::shared_ptr<const BoundLayout> layout;
};

struct MemoryStats {
  int64_t allocated = 0, peak_allocated = 0, total_allocated = 0, total_freed = 0;
  int64_t cached = 0, peak_reserved = 0;  // free blocks kept for reuse; peak of allocated + cached
  int64_t requested = 0, peak_requested = 0;
  int64_t blocks = 0, peak_blocks = 0, num_allocs = 0, num_frees = 0, num_ooms = 0;
};

int device_count();
int64_t device_capacity(c10::DeviceIndex device);
void check_device_index(c10::DeviceIndex device);
// The spyre device `device` names (the default device where absent), with the current device's
// index where it names none; its index checked.
c10::Device resolved_device(std::optional<c10::Device> device);

// The PrivateUse1 allocator: blocks come from the current device's memory.
c10::Allocator* device_allocator();

// The block behind a storage's data pointer, or nullptr if it is not device memory.
Block* block_of(const c10::DataPtr& data);

// Device bytes behind a storage: its block's, which exceed its nbytes() when a laid-out storage
// was resized to its tensor's logical bytes and keeps the whole padded buffer (hooks.cpp).
int64_t device_nbytes(const c10::Storage& storage);

// While one is alive (on any thread), PyTorch's CPU allocator is replaced by one whose blocks are
// shaped as `device`'s blocks (128-byte aligned, sized as its pool sizes them; a block it freed
// is taken first), so that a CPU kernel's result can become device memory without a copy
// (adopt_host_storage). Nested and concurrent scopes share one replacement (the first one's
// device); none is made where another CPU allocator was set at a higher priority.
class DeviceShapedHostScope {
 public:
  explicit DeviceShapedHostScope(c10::DeviceIndex device);
  ~DeviceShapedHostScope();
  DeviceShapedHostScope(const DeviceShapedHostScope&) = delete;
  DeviceShapedHostScope& operator=(const DeviceShapedHostScope&) = delete;
};

// A device data pointer to `host`'s bytes, counted in `device`'s memory, where `host` is a CPU
// storage allocated in a DeviceShapedHostScope that nothing else holds; the storage is left empty.
// Nullopt, nothing changed, for any other storage or when the device has no room for it.
std::optional<c10::DataPtr> adopt_host_storage(const c10::Storage& host, c10::DeviceIndex device);

MemoryStats memory_stats(c10::DeviceIndex device);
void empty_cache(c10::DeviceIndex device);
void reset_peak_stats(c10::DeviceIndex device);
std::map<std::string, int64_t> memory_stats_dict(c10::DeviceIndex device);

}  // namespace torch_layouts
