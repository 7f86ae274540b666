#include "runtime_stats.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>
#include <set>

namespace torch_layouts {
namespace {

constexpr std::array<const char*, 9> kNames = {"h2d_bytes",      "d2h_bytes",    "d2d_bytes",
                                               "relayouts",      "relayout_bytes", "host_bounces",
                                               "view_gathers",   "view_scatters",  "adopted_bytes"};
std::array<std::atomic<int64_t>, kNames.size()> g_counters{};
std::mutex g_mutex;
std::map<std::string, int64_t> g_fallbacks;
std::set<std::string> g_warned;
std::atomic<bool> g_warn{false};
std::function<void(const std::string&)> g_warner;

}  // namespace

void count(Counter counter, int64_t amount) { g_counters[static_cast<size_t>(counter)] += amount; }

void count_fallback(const std::string& op) {
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_fallbacks[op] += 1;
    warn = g_warn && g_warned.insert(op).second;
  }
  if (warn) {
    const std::string message = "spyre: " + op +
                                " has no device kernel; it runs on the CPU fallback (inputs copied to the host "
                                "and results back).";
    std::function<void(const std::string&)> warner;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      warner = g_warner;
    }
    if (warner) {
      warner(message);
    } else {
      TORCH_WARN(message);
    }
  }
}

void set_fallback_warner(std::function<void(const std::string& message)> warner) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_warner = std::move(warner);
}

void set_fallback_warning(bool enabled) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_warn = enabled;
  g_warned.clear();
}

std::map<std::string, int64_t> counters() {
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < kNames.size(); ++i) out[kNames[i]] = g_counters[i];
  return out;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fallbacks;
}

void reset_stats() {
  for (auto& c : g_counters) c = 0;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallbacks.clear();
  g_warned.clear();
}

}  // namespace torch_layouts
