#include "isa_tables.h"

#include <ATen/Version.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>

namespace torch_layouts {
namespace {

const char* const kSets[] = {"portable", "avx2", "avx512"};  // by level

int cpu_level() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return 2;
  }
  return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
  return 0;
#endif
}

std::atomic<int> g_level{cpu_level()};

}  // namespace

const std::vector<std::string>& isa_table_sets() {
  static const std::vector<std::string> sets = [] {
    std::vector<std::string> out;
    for (int level = cpu_level(); level >= 0; --level) out.emplace_back(kSets[level]);
    return out;
  }();
  return sets;
}

std::string set_isa_tables(const std::string& set) {
  const std::vector<std::string>& sets = isa_table_sets();
  const auto at = std::find(sets.begin(), sets.end(), set);
  TORCH_CHECK_VALUE(at != sets.end(), "no instruction set '", set, "' on this CPU; it runs ", c10::Join(", ", sets));
  const int level = static_cast<int>(std::find(std::begin(kSets), std::end(kSets), set) - std::begin(kSets));
  return kSets[g_level.exchange(level)];
}

int isa_level() { return g_level.load(std::memory_order_relaxed); }

bool aten_fuses_scaled_add() {
  static const bool fused = [] {
    const std::string capability = at::get_cpu_capability();
    return capability == "AVX2" || capability == "AVX512";
  }();
  return fused;
}

}  // namespace torch_layouts
