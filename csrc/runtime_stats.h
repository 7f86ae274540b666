// Counters of what the runtime did: DMA bytes each way, relayouts, fallback ops.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace torch_layouts {

enum class Counter {
  H2DBytes, D2HBytes, D2DBytes, Relayouts, RelayoutBytes, HostBounces, ViewGathers, ViewScatters,
  AdoptedBytes  // a CPU kernel's results that became device buffers where they lay (kernel_front.cpp)
};

void count(Counter counter, int64_t amount = 1);
void count_fallback(const std::string& op);  // also warns once per op when enabled
void set_fallback_warning(bool enabled);
// Where fallback warnings go (the Python FallbackWarning category); unset: TORCH_WARN.
void set_fallback_warner(std::function<void(const std::string& message)> warner);
std::map<std::string, int64_t> counters();
std::map<std::string, int64_t> fallback_counts();
void reset_stats();

}  // namespace torch_layouts
