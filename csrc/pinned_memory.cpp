#include "pinned_memory.h"

#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>

namespace torch_layouts {
namespace {

constexpr size_t kPinnedAlignment = 64;

std::mutex g_mutex;
std::map<const char*, size_t>& blocks() {  // start -> bytes of live pinned blocks
  static auto* live = new std::map<const char*, size_t>();  // never destroyed: freed during exit
  return *live;
}

void release_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = blocks().find(static_cast<const char*>(ptr));
    if (found != blocks().end()) {
      munlock(ptr, found->second);
      blocks().erase(found);
    }
  }
  std::free(ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    const size_t bytes = std::max<size_t>(nbytes, 1);
    TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&ptr, kPinnedAlignment, bytes) == 0,
                     "could not allocate ", nbytes, " bytes of pinned host memory");
    mlock(ptr, bytes);  // best effort: RLIMIT_MEMLOCK may refuse; the block still counts as pinned
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      blocks()[static_cast<const char*>(ptr)] = bytes;
    }
    return {ptr, ptr, &release_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

PinnedAllocator g_pinned;

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned; }

bool is_pinned(const void* ptr) {
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto after = blocks().upper_bound(p);
  if (after == blocks().begin()) return false;
  --after;
  return p < after->first + after->second;
}

}  // namespace torch_layouts
