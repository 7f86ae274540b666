// Counters of what the runtime did: DMA bytes each way, relayouts, fallback ops.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace torch_layouts {

enum class Counter { H2DBytes, D2HBytes, D2DBytes, Relayouts, RelayoutBytes, HostBounces, ViewGathers, ViewScatters };

void count(Counter counter, int64_t amount = 1);
void count_fallback(const std::string& op);  // also warns once per op when enabled
void set_fallback_warning(bool enabled);
std::map<std::string, int64_t> counters();
std::map<std::string, int64_t> fallback_counts();
void reset_stats();

}  // namespace torch_layouts
