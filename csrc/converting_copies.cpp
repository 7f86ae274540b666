#include "converting_copies.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "dma_executor.h"
#include "half_runs_x86.h"
#include "row_math.h"
#include "run_stretches.h"

namespace torch_layouts {
namespace {

// count x parts runs of n elements, run (c, q) from s + c * sstep + q * part.strides[1] to
// d + c * dstep + q * part.strides[0] (elements of each side).
using ConvertRuns = void (*)(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n,
                             const StridedLoop<2>& part);

// Each run of a work item converted by convert(to, from): count x part.size runs.
template <typename To, typename From, typename Convert>
[[gnu::always_inline]] inline void each_run(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep,
                                            const StridedLoop<2>& part, const Convert& convert) {
  // the part's loop in locals: the stores could alias it, so its fields would be read again per run
  const int64_t parts = part.size, part_dstep = part.strides[0], part_sstep = part.strides[1];
  To* to = static_cast<To*>(d);
  const From* from = static_cast<const From*>(s);
  for (int64_t c = 0; c < count; ++c, to += dstep, from += sstep) {
    for (int64_t q = 0; q < parts; ++q) convert(to + q * part_dstep, from + q * part_sstep);
  }
}

#if defined(__x86_64__)
// half_runs_x86.h's conversions, each compiled for its instruction set.
#define TORCH_LAYOUTS_CONVERTER(name, isa, To, From, convert)                                          \
  void name##_##isa(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n,      \
                    const StridedLoop<2>& part) {                                                      \
    each_run<To, From>(d, s, count, dstep, sstep, part,                                                \
                       [n](To* to, const From* from) { isa##_half::convert(to, from, n); });           \
  }
#define TORCH_LAYOUTS_CONVERTERS(isa)                                           \
  TORCH_LAYOUTS_CONVERTER(to_half, isa, uint16_t, float, float_to_half)         \
  TORCH_LAYOUTS_CONVERTER(to_float, isa, float, uint16_t, half_to_float)        \
  TORCH_LAYOUTS_CONVERTER(to_bf16, isa, uint16_t, float, float_to_bf16)         \
  TORCH_LAYOUTS_CONVERTER(bf16_to_float, isa, float, uint16_t, bf16_to_float)
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
TORCH_LAYOUTS_CONVERTERS(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,f16c")
TORCH_LAYOUTS_CONVERTERS(avx512)
#pragma GCC pop_options
#undef TORCH_LAYOUTS_CONVERTERS
#undef TORCH_LAYOUTS_CONVERTER
#endif

// The conversion of runs of src_type into dst_type in the row kernels' instruction set, or null
// (a pair other than float32 <-> float16 or bfloat16, or the portable set: no AVX2 and F16C).
ConvertRuns converter(c10::ScalarType src_type, c10::ScalarType dst_type) {
#if defined(__x86_64__)
  const std::string_view set = rows_math().set;  // "avx512" and "avx2" include F16C
  if (set != "avx512" && set != "avx2") return nullptr;
  const bool avx512 = set == "avx512";
  const std::pair<c10::ScalarType, c10::ScalarType> pair{src_type, dst_type};
  if (pair == std::pair{at::kFloat, at::kHalf}) return avx512 ? to_half_avx512 : to_half_avx2;
  if (pair == std::pair{at::kHalf, at::kFloat}) return avx512 ? to_float_avx512 : to_float_avx2;
  if (pair == std::pair{at::kFloat, at::kBFloat16}) return avx512 ? to_bf16_avx512 : to_bf16_avx2;
  if (pair == std::pair{at::kBFloat16, at::kFloat}) return avx512 ? bf16_to_float_avx512 : bf16_to_float_avx2;
#endif
  return nullptr;
}

// The nest's loops but its innermost run (destination, source strides), and the run's length; 0
// where the innermost loop (by destination stride) is no run of at least 8 elements on both sides.
int64_t outer_loops(const Transfer& nest, std::vector<StridedLoop<2>>& loops) {
  for (size_t k = 0; k < nest.ranges.size(); ++k) {
    if (nest.ranges[k] != 1) loops.push_back({nest.ranges[k], {nest.dst_strides[k], nest.src_strides[k]}});
  }
  if (loops.empty()) return 0;  // one element
  const auto run = std::min_element(loops.begin(), loops.end(), [](const auto& a, const auto& b) {
    return std::abs(a.strides[0]) < std::abs(b.strides[0]);
  });
  if (run->strides[0] != 1 || run->strides[1] != 1 || run->size < 8) return 0;
  const int64_t length = run->size;
  loops.erase(run);
  return length;
}

// The longest a loop's runs together may be, on the side where they continue each other, to be
// taken as one call's parts (adjacent_runs): a stick or two, not a whole column of rows.
constexpr int64_t kPartBytes = 256;

// The loop (taken out of `loops`) whose runs continue each other on the destination (the two
// float32 sticks of one float16 stick), or failing that on the source (a float16 stick into two
// float32 ones), within kPartBytes there: its runs go together in each call, each destination
// stick written whole (or each source stick read whole) instead of one half in one pass and the
// other in the next. 1024x256 float32 -> float16 in Spyre's default layout, 2 threads, in one
// process: 11.7 -> 10.3 us a call in a loop (CPU 8.4), 15.8 -> 13.6 in the benchmark's interleaved
// calls (CPU 11.8); float16 -> float32 17.5 -> 15.9 interleaved (CPU 17.4), as fast in a loop. A
// loop of size 1 where there is none.
StridedLoop<2> adjacent_runs(std::vector<StridedLoop<2>>& loops, int64_t run, const std::array<int64_t, 2>& esize) {
  for (int side = 0; side < 2; ++side) {
    for (auto l = loops.begin(); l != loops.end(); ++l) {
      if (l->strides[side] != run || l->size * run * esize[side] > kPartBytes) continue;
      const StridedLoop<2> part = *l;
      loops.erase(l);
      return part;
    }
  }
  return {1, {0, 0}};
}

}  // namespace

bool run_converting_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, c10::ScalarType dst_type,
                          const void* src, int64_t src_numel, c10::ScalarType src_type) {
  const ConvertRuns convert = converter(src_type, dst_type);
  if (convert == nullptr) return false;
  std::vector<std::vector<StridedLoop<2>>> loops(nests.size());
  std::vector<int64_t> runs(nests.size());
  std::vector<StridedLoop<2>> parts(nests.size());
  const int64_t dsize = c10::elementSize(dst_type), ssize = c10::elementSize(src_type);
  for (size_t k = 0; k < nests.size(); ++k) {
    runs[k] = outer_loops(nests[k], loops[k]);
    if (runs[k] == 0) return false;
    parts[k] = adjacent_runs(loops[k], runs[k], {dsize, ssize});
  }
  check_nests(nests, dst_numel, src_numel);
  for (size_t k = 0; k < nests.size(); ++k) {
    bool empty = false;
    for (int64_t r : nests[k].ranges) empty |= r == 0;
    if (empty) continue;
    // a stretch of the largest loop's runs per call, each with its parts (float32 sticks into
    // float16 ones: a float16 stick column's rows in order, each from its two float32 sticks)
    const StridedLoop<2>& part = parts[k];
    for_stretches<2>(loops[k], {nests[k].dst_offset, nests[k].src_offset}, runs[k] * part.size,
                     std::max(dsize, ssize),
                     [&](const std::array<int64_t, 2>& at, int64_t count, const StridedLoop<2>& inner) {
                       convert(static_cast<char*>(dst) + at[0] * dsize, static_cast<const char*>(src) + at[1] * ssize,
                               count, inner.strides[0], inner.strides[1], runs[k], part);
                     });
  }
  return true;
}

}  // namespace torch_layouts
