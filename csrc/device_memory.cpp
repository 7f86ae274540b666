#include "device_memory.h"

#include "device_guard.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <vector>

namespace torch_layouts {
namespace {

constexpr int64_t kMaxDefaultCapacity = int64_t(16) << 30;
constexpr int64_t kHostCheckFrom = int64_t(64) << 20;  // allocations this large check host memory first
constexpr int64_t kHugePage = int64_t(2) << 20;

// Large blocks are backed by transparent huge pages (when the kernel allows it):
// device memory is touched once per 2 MiB instead of once per 4 KiB page.
void* host_backing(int64_t bytes) {
  void* ptr = nullptr;
  if (bytes >= kHugePage) {
    const int64_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    if (posix_memalign(&ptr, kHugePage, static_cast<size_t>(rounded)) != 0) return nullptr;
    madvise(ptr, static_cast<size_t>(rounded), MADV_HUGEPAGE);
    return ptr;
  }
  return posix_memalign(&ptr, kAlignment, static_cast<size_t>(bytes)) == 0 ? ptr : nullptr;
}

// Host memory the kernel could still hand out without swapping or the OOM killer (MemAvailable),
// less a safety margin (an eighth of it, at least 256 MiB) for the interpreter and the host copies
// ops make; -1 when /proc/meminfo cannot be read.
int64_t host_available() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof(line), f)) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  if (kib < 0) return -1;
  const int64_t available = static_cast<int64_t>(kib) * 1024;
  return std::max<int64_t>(0, available - std::max<int64_t>(available / 8, int64_t(256) << 20));
}

int64_t parse_bytes(const char* name, const char* text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string unit = s.substr(i);
  for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> units = {
      {"", 1}, {"b", 1}, {"k", 1024.0}, {"kb", 1e3}, {"kib", 1024.0}, {"m", 1048576.0},
      {"mb", 1e6}, {"mib", 1048576.0}, {"g", 1073741824.0}, {"gb", 1e9}, {"gib", 1073741824.0},
      {"t", 1099511627776.0}, {"tb", 1e12}, {"tib", 1099511627776.0}};
  auto it = units.find(unit);
  TORCH_CHECK_VALUE(i > 0 && it != units.end(), name, "='", text,
                    "' is not a size (examples: 512MiB, 16GiB, 1000000)");
  double value = std::stod(s.substr(0, i)) * it->second;
  TORCH_CHECK_VALUE(value >= 0 && value < 9.2e18, name, "='", text, "' is out of range");
  return static_cast<int64_t>(value);
}

// Freed blocks are kept and handed to the next request of their host size, like a device
// runtime's caching allocator. From kCacheFrom bytes, by size rounded up (below): steady-state
// allocations then touch no fresh pages (a 64-row index_select's result of 64 KiB, interleaved
// with the same call on CPU tensors, came from fresh heap pages for a hundred calls or so: ~30 us
// a call, then 4). Below it, by their 128-byte-rounded size, in a free list per size: a 128-byte
// aligned posix_memalign and its free cost ~1,200 instructions, a list's pop and push a few dozen
// (the demo MLP's training step allocates 17 device blocks, its attention block's 37). The cache
// stays below a quarter of the capacity (1 GiB at most) and is dropped whenever an allocation
// would otherwise not fit.
constexpr int64_t kCacheFrom = int64_t(64) << 10;
// Blocks from 1 MiB are backed by whole huge pages; smaller ones from kCacheFrom are rounded up
// to kCacheStep bytes, so that requests of nearby sizes share blocks.
constexpr int64_t kHugeFrom = int64_t(1) << 20;
constexpr int64_t kCacheStep = int64_t(16) << 10;

struct DeviceMemory {
  std::mutex mutex;
  int64_t capacity = kMaxDefaultCapacity;
  MemoryStats stats;
  std::multimap<int64_t, void*> cache;  // host size (from kCacheFrom) -> free block
  std::vector<std::vector<void*>> small = std::vector<std::vector<void*>>(kCacheFrom / kAlignment);  // by size / 128

  int64_t cache_limit() const { return std::min(capacity / 4, int64_t(1) << 30); }

  // A kept block of host size `backing` (the one freed last), or nullptr; caller holds mutex.
  void* take(int64_t backing) {
    void* ptr = nullptr;
    if (backing < kCacheFrom) {
      std::vector<void*>& list = small[backing / kAlignment];
      if (list.empty()) return nullptr;
      ptr = list.back();
      list.pop_back();
    } else {
      // The block of this size freed last (a multimap keeps equal keys in insertion order): it is
      // the one most likely still in the CPU's caches, as glibc's malloc would hand it out.
      const auto after = cache.upper_bound(backing);
      if (after == cache.begin() || std::prev(after)->first != backing) return nullptr;
      ptr = std::prev(after)->second;
      cache.erase(std::prev(after));
    }
    stats.cached -= backing;
    return ptr;
  }

  void keep(int64_t backing, void* ptr) {  // caller holds mutex
    if (backing < kCacheFrom) {
      small[backing / kAlignment].push_back(ptr);
    } else {
      cache.emplace(backing, ptr);
    }
    stats.cached += backing;
  }

  void drop_cache() {  // caller holds mutex
    for (auto& entry : cache) std::free(entry.second);
    cache.clear();
    for (auto& list : small) {
      for (void* ptr : list) std::free(ptr);
      list.clear();
    }
    stats.cached = 0;
  }
};

int64_t backing_size(int64_t reserved) {
  if (reserved >= kHugeFrom) return (reserved + kHugePage - 1) / kHugePage * kHugePage;
  return reserved >= kCacheFrom ? (reserved + kCacheStep - 1) / kCacheStep * kCacheStep : reserved;
}

struct Devices {
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  Devices() {
    int count = 1;
    if (const char* env = std::getenv("TORCH_LAYOUTS_DEVICE_COUNT")) {
      char* end = nullptr;
      long value = std::strtol(env, &end, 10);
      TORCH_CHECK_VALUE(end != env && *end == '\0' && value >= 1 && value <= 64,
                        "TORCH_LAYOUTS_DEVICE_COUNT='", env, "' must be an integer in [1, 64]");
      count = static_cast<int>(value);
    }
    int64_t capacity = kMaxDefaultCapacity;
    if (const char* env = std::getenv("TORCH_LAYOUTS_DEVICE_MEMORY")) {
      capacity = parse_bytes("TORCH_LAYOUTS_DEVICE_MEMORY", env);
    } else if (const int64_t host = host_available(); host >= 0) {
      // By default all devices together never claim more than the host can back.
      capacity = std::min(capacity, host / count / kAlignment * kAlignment);
    }
    for (int i = 0; i < count; ++i) {
      memory.push_back(std::make_unique<DeviceMemory>());
      memory.back()->capacity = capacity;
    }
  }
};

Devices& devices() {
  static Devices* instance = new Devices();  // never destroyed: blocks may be freed during exit
  return *instance;
}

DeviceMemory& memory_of(c10::DeviceIndex device) {
  check_device_index(device);
  return *devices().memory[device];
}

std::string human(int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int u = 0;
  while (value >= 1024 && u < 4) {
    value /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", value, units[u]);
  return buf;
}

void release(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  void* ptr = block->ptr;
  {
    DeviceMemory& mem = *devices().memory[block->device];
    std::lock_guard<std::mutex> lock(mem.mutex);
    auto& s = mem.stats;
    s.allocated -= block->reserved;
    s.requested -= block->nbytes;
    s.total_freed += block->reserved;
    s.blocks -= 1;
    s.num_frees += 1;
    if (ptr != nullptr && s.cached + block->backing <= mem.cache_limit() &&
        s.allocated + s.cached + block->backing <= mem.capacity) {
      mem.keep(block->backing, ptr);
      ptr = nullptr;
    }
  }
  std::free(ptr);
  delete block;
}

// A new block of `reserved` bytes (`requested` asked for) in the statistics; the caller holds
// the mutex and has added it to `allocated`.
void count_block(MemoryStats& s, int64_t requested, int64_t reserved) {
  s.requested += requested;
  s.total_allocated += reserved;
  s.blocks += 1;
  s.num_allocs += 1;
  s.peak_allocated = std::max(s.peak_allocated, s.allocated);
  s.peak_reserved = std::max(s.peak_reserved, s.allocated + s.cached);
  s.peak_requested = std::max(s.peak_requested, s.requested);
  s.peak_blocks = std::max(s.peak_blocks, s.blocks);
}

// The bytes a request of `nbytes` reserves: whole kAlignment units.
int64_t reserved_size(int64_t nbytes) { return (nbytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    auto device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
    DeviceMemory& mem = memory_of(device);
    const auto requested = static_cast<int64_t>(std::min<size_t>(nbytes, size_t(INT64_MAX)));
    const int64_t reserved = requested <= mem.capacity ? reserved_size(requested)
                                                       : requested;  // rounding only when it cannot overflow
    const int64_t backing = backing_size(reserved);
    void* ptr = nullptr;
    bool fresh = false;  // a block the host must back, counted in the statistics once it has one
    {
      std::lock_guard<std::mutex> lock(mem.mutex);
      auto& s = mem.stats;
      if (requested > mem.capacity || reserved > mem.capacity - s.allocated) {
        s.num_ooms += 1;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "spyre:", int(device), " out of memory: tried to allocate ",
                         human(requested), " (", requested, " bytes); ", human(mem.capacity - s.allocated),
                         " free of ", human(mem.capacity), " capacity (", human(s.allocated),
                         " allocated). Set TORCH_LAYOUTS_DEVICE_MEMORY to change the capacity.");
      }
      if (reserved > 0) ptr = mem.take(backing);
      if (ptr == nullptr && s.allocated + s.cached + backing > mem.capacity) mem.drop_cache();
      s.allocated += reserved;
      fresh = reserved > 0 && ptr == nullptr;
      if (!fresh) count_block(s, requested, reserved);  // nothing left to fail
    }
    // Fresh host pages are only touched later: a large block the host cannot back now would
    // summon the OOM killer then, so it is refused now, like a block the host refuses outright.
    int64_t host = -1;
    const bool host_short = fresh && reserved >= kHostCheckFrom && (host = host_available()) >= 0 && backing > host;
    if (fresh) {
      if (!host_short) ptr = host_backing(backing);
      std::lock_guard<std::mutex> lock(mem.mutex);
      if (ptr == nullptr) {
        mem.stats.allocated -= reserved;
        mem.stats.num_ooms += 1;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "spyre:", int(device), " out of memory: the host could not back ",
                         human(requested), " of simulated device memory",
                         host_short ? " (" + human(host) + " of host memory available after a safety margin)" : "",
                         ". Free tensors or set TORCH_LAYOUTS_DEVICE_MEMORY lower.");
      }
      count_block(mem.stats, requested, reserved);
    }
    auto* block = new Block{ptr, requested, reserved, backing, device, nullptr};
    return {ptr, block, &release, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

DeviceAllocator g_allocator;

namespace {

// A CPU allocation shaped as a device block of its size: backing_size bytes, from host_backing.
// ctx == ptr and the CPU allocator's deleter semantics (report to the profiler, then free), so
// that PyTorch's raw_allocate and raw_deallocate (oneDNN's scratchpads) work across either allocator.
void report_and_free(void* ptr) {
  if (ptr == nullptr) return;
  c10::profiledCPUMemoryReporter().Delete(ptr);
  std::free(ptr);
}

std::atomic<c10::DeviceIndex> g_scope_device{0};  // whose freed blocks the scopes' allocations take

class DeviceShapedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) {
      const int64_t backing = backing_size(reserved_size(static_cast<int64_t>(nbytes)));
      {  // a block the device freed, still warm: an adopted result comes back here after its use
        DeviceMemory& mem = *devices().memory[g_scope_device.load()];
        std::lock_guard<std::mutex> lock(mem.mutex);
        ptr = mem.take(backing);
      }
      if (ptr == nullptr) ptr = host_backing(backing);
      if (ptr == nullptr) {
        c10::profiledCPUMemoryReporter().OutOfMemory(nbytes);
        TORCH_CHECK_WITH(OutOfMemoryError, false, "DefaultCPUAllocator: not enough memory: you tried to allocate ",
                         nbytes, " bytes.");
      }
      c10::profiledCPUMemoryReporter().New(ptr, nbytes);
    }
    return {ptr, ptr, &report_and_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &report_and_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

DeviceShapedHostAllocator g_device_shaped_host;
std::mutex g_scope_mutex;
int g_scopes = 0;
c10::Allocator* g_host_before = nullptr;  // the CPU allocator the first scope replaced; null: none was

}  // namespace

DeviceShapedHostScope::DeviceShapedHostScope(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (g_scopes++ > 0) return;
  g_scope_device = device;
  c10::Allocator* before = c10::GetCPUAllocator();
  c10::SetCPUAllocator(&g_device_shaped_host, 0);  // (taken only where PyTorch's is in use at priority 0)
  g_host_before = c10::GetCPUAllocator() == &g_device_shaped_host ? before : nullptr;
}

DeviceShapedHostScope::~DeviceShapedHostScope() {
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (--g_scopes > 0 || g_host_before == nullptr) return;
  c10::SetCPUAllocator(g_host_before, 0);
  g_host_before = nullptr;
}

std::optional<c10::DataPtr> adopt_host_storage(const c10::Storage& host, c10::DeviceIndex device) {
  c10::StorageImpl* impl = host.unsafeGetStorageImpl();
  if (impl == nullptr || host.device_type() != c10::DeviceType::CPU || host.use_count() != 1 ||
      host.data_ptr().get_deleter() != &report_and_free || host.data_ptr().get() == nullptr) {
    return std::nullopt;
  }
  const auto nbytes = static_cast<int64_t>(host.nbytes());
  const int64_t reserved = reserved_size(nbytes), backing = backing_size(reserved);
  DeviceMemory& mem = memory_of(device);
  {
    std::lock_guard<std::mutex> lock(mem.mutex);
    auto& s = mem.stats;
    if (reserved > mem.capacity - s.allocated) return std::nullopt;  // (the copy it spares would not fit either)
    if (s.allocated + s.cached + backing > mem.capacity) mem.drop_cache();  // as for a fresh block
    s.allocated += reserved;
    count_block(s, nbytes, reserved);
  }
  c10::DataPtr data = impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)));
  impl->set_nbytes(0);
  void* ptr = data.release_context();
  c10::profiledCPUMemoryReporter().Delete(ptr);
  auto* block = new Block{ptr, nbytes, reserved, backing, device, nullptr};
  return c10::DataPtr(ptr, block, &release, c10::Device(c10::DeviceType::PrivateUse1, device));
}

int device_count() { return static_cast<int>(devices().memory.size()); }

void check_device_index(c10::DeviceIndex device) {
  TORCH_CHECK(device >= 0 && device < device_count(), "The device index is out of range. It must be in [0, ",
              device_count(), "), but got spyre:", int(device), " (there ",
              device_count() == 1 ? "is 1 spyre device" : "are " + std::to_string(device_count()) + " spyre devices",
              "; set TORCH_LAYOUTS_DEVICE_COUNT for more)");
}

c10::Device resolved_device(std::optional<c10::Device> device_opt) {
  c10::Device device = c10::device_or_default(device_opt);
  TORCH_CHECK_VALUE(device.is_privateuseone(), "expected a spyre device, got ", device);
  if (!device.has_index()) device = c10::Device(device.type(), current_device());
  check_device_index(device.index());
  return device;
}

int64_t device_capacity(c10::DeviceIndex device) { return memory_of(device).capacity; }

c10::Allocator* device_allocator() { return &g_allocator; }

Block* block_of(const c10::DataPtr& data) {
  if (data.get_deleter() != &release) return nullptr;
  return static_cast<Block*>(data.get_context());
}

int64_t device_nbytes(const c10::Storage& storage) {
  const auto nbytes = static_cast<int64_t>(storage.nbytes());
  const Block* block = block_of(storage.data_ptr());
  return block ? std::max(block->nbytes, nbytes) : nbytes;
}

MemoryStats memory_stats(c10::DeviceIndex device) {
  DeviceMemory& mem = memory_of(device);
  std::lock_guard<std::mutex> lock(mem.mutex);
  return mem.stats;
}

void reset_peak_stats(c10::DeviceIndex device) {
  DeviceMemory& mem = memory_of(device);
  std::lock_guard<std::mutex> lock(mem.mutex);
  mem.stats.peak_allocated = mem.stats.allocated;
  mem.stats.peak_reserved = mem.stats.allocated + mem.stats.cached;
  mem.stats.peak_requested = mem.stats.requested;
  mem.stats.peak_blocks = mem.stats.blocks;
}

void empty_cache(c10::DeviceIndex device) {
  DeviceMemory& mem = memory_of(device);
  std::lock_guard<std::mutex> lock(mem.mutex);
  mem.drop_cache();
}

std::map<std::string, int64_t> memory_stats_dict(c10::DeviceIndex device) {
  const MemoryStats s = memory_stats(device);
  const int64_t capacity = device_capacity(device);
  return {
      {"allocated_bytes.all.current", s.allocated},
      {"allocated_bytes.all.peak", s.peak_allocated},
      {"allocated_bytes.all.allocated", s.total_allocated},
      {"allocated_bytes.all.freed", s.total_freed},
      {"requested_bytes.all.current", s.requested},
      {"requested_bytes.all.peak", s.peak_requested},
      {"reserved_bytes.all.current", s.allocated + s.cached},
      {"reserved_bytes.all.peak", s.peak_reserved},
      {"inactive_split_bytes.all.current", s.cached},
      {"active_bytes.all.current", s.allocated},
      {"active_bytes.all.peak", s.peak_allocated},
      {"allocation.all.current", s.blocks},
      {"allocation.all.peak", s.peak_blocks},
      {"allocation.all.allocated", s.num_allocs},
      {"allocation.all.freed", s.num_frees},
      {"num_alloc_retries", 0},
      {"num_ooms", s.num_ooms},
      {"capacity_bytes", capacity},
      {"free_bytes", capacity - s.allocated - s.cached},
  };
}

}  // namespace torch_layouts

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &torch_layouts::g_allocator);
