#include "converting_copies.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "dma_executor.h"
#include "row_math.h"

namespace torch_layouts {
namespace {

// Runs per work item: about 64 KiB of float32, as the DMA executor's items.
constexpr int64_t kItemFloats = 16384;

// count runs of n elements, run c from s + c * sstep to d + c * dstep (elements of each side).
using ConvertRuns = void (*)(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n);

#if defined(__x86_64__)
// F16C's conversions (round to nearest even; NaNs as ATen's vectorized kernels convert them),
// 8 elements a step with AVX2, 16 with AVX-512.
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
void to_half_avx2(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n) {
  for (int64_t c = 0; c < count; ++c) {
    uint16_t* to = static_cast<uint16_t*>(d) + c * dstep;
    const float* from = static_cast<const float*>(s) + c * sstep;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) to[i] = _cvtss_sh(from[i], _MM_FROUND_TO_NEAREST_INT);
  }
}

void to_float_avx2(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n) {
  for (int64_t c = 0; c < count; ++c) {
    float* to = static_cast<float*>(d) + c * dstep;
    const uint16_t* from = static_cast<const uint16_t*>(s) + c * sstep;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(to + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
    }
    for (; i < n; ++i) to[i] = _cvtsh_ss(from[i]);
  }
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,f16c")
// GCC 12's AVX-512 headers fill unmasked lanes from a self-initialised "undefined" vector, which
// -Wmaybe-uninitialized reports at each use (row_math.cpp says the same).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
void to_half_avx512(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n) {
  for (int64_t c = 0; c < count; ++c) {
    uint16_t* to = static_cast<uint16_t*>(d) + c * dstep;
    const float* from = static_cast<const float*>(s) + c * sstep;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + i), _mm512_cvtps_ph(_mm512_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) to[i] = _cvtss_sh(from[i], _MM_FROUND_TO_NEAREST_INT);
  }
}

void to_float_avx512(void* d, const void* s, int64_t count, int64_t dstep, int64_t sstep, int64_t n) {
  for (int64_t c = 0; c < count; ++c) {
    float* to = static_cast<float*>(d) + c * dstep;
    const uint16_t* from = static_cast<const uint16_t*>(s) + c * sstep;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(to + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + i))));
    }
    for (; i < n; ++i) to[i] = _cvtsh_ss(from[i]);
  }
}
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

// The best conversion of runs into dst_type this CPU has, or null (no F16C).
ConvertRuns converter(bool to_half) {
#if defined(__x86_64__)
  const std::vector<std::string>& sets = row_math_sets();  // "avx512" and "avx2" include F16C
  if (std::find(sets.begin(), sets.end(), "avx512") != sets.end()) return to_half ? to_half_avx512 : to_float_avx512;
  if (std::find(sets.begin(), sets.end(), "avx2") != sets.end()) return to_half ? to_half_avx2 : to_float_avx2;
#endif
  return nullptr;
}

struct Loop {
  int64_t size, dst, src;
};

// The nest's loops but its innermost run, outermost first by destination stride (writes run on),
// and the run's length; 0 where the innermost loop is no run of at least 8 elements on both sides.
int64_t outer_loops(const Transfer& nest, std::vector<Loop>& loops) {
  for (size_t k = 0; k < nest.ranges.size(); ++k) {
    if (nest.ranges[k] != 1) loops.push_back({nest.ranges[k], nest.dst_strides[k], nest.src_strides[k]});
  }
  std::stable_sort(loops.begin(), loops.end(),
                   [](const Loop& a, const Loop& b) { return std::abs(a.dst) > std::abs(b.dst); });
  if (loops.empty()) return 0;  // one element
  const Loop run = loops.back();
  if (run.dst != 1 || run.src != 1 || run.size < 8) return 0;
  loops.pop_back();
  if (loops.empty()) loops.push_back({1, 0, 0});
  return run.size;
}

// The nest's runs: work items are a position of the other loops and a stretch of the largest
// loop of about kItemFloats elements, whose runs one call of `convert` takes (float32 sticks
// into float16 ones: the runs of one source stick column, rows in order), over the intra-op threads.
void convert_nest(char* dst, int64_t dsize, const char* src, int64_t ssize, const Transfer& nest,
                  std::vector<Loop> loops, int64_t run, ConvertRuns convert) {
  size_t largest = 0;  // the last of the largest: the innermost by destination among equals
  for (size_t k = 1; k < loops.size(); ++k) largest = loops[k].size >= loops[largest].size ? k : largest;
  const Loop inner = loops[largest];
  loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(largest));
  int64_t positions = 1;
  for (const Loop& loop : loops) positions *= loop.size;
  const int64_t stretch = std::max<int64_t>(1, kItemFloats / run), stretches = (inner.size + stretch - 1) / stretch;
  at::parallel_for(0, positions * stretches, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t first = (i % stretches) * stretch;
      int64_t d = nest.dst_offset + first * inner.dst, s = nest.src_offset + first * inner.src;
      for (size_t k = loops.size(), rest = i / stretches; k-- > 0;) {
        d += static_cast<int64_t>(rest) % loops[k].size * loops[k].dst;
        s += static_cast<int64_t>(rest) % loops[k].size * loops[k].src;
        rest /= loops[k].size;
      }
      convert(dst + d * dsize, src + s * ssize, std::min(stretch, inner.size - first), inner.dst, inner.src, run);
    }
  });
}

}  // namespace

bool run_converting_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, c10::ScalarType dst_type,
                          const void* src, int64_t src_numel, c10::ScalarType src_type) {
  const bool to_half = src_type == at::kFloat && dst_type == at::kHalf;
  if (!to_half && !(src_type == at::kHalf && dst_type == at::kFloat)) return false;
  const ConvertRuns convert = converter(to_half);
  if (convert == nullptr) return false;
  std::vector<std::vector<Loop>> loops(nests.size());
  std::vector<int64_t> runs(nests.size());
  for (size_t k = 0; k < nests.size(); ++k) {
    runs[k] = outer_loops(nests[k], loops[k]);
    if (runs[k] == 0) return false;
  }
  check_nests(nests, dst_numel, src_numel);
  const int64_t dsize = c10::elementSize(dst_type), ssize = c10::elementSize(src_type);
  for (size_t k = 0; k < nests.size(); ++k) {
    bool empty = false;
    for (int64_t r : nests[k].ranges) empty |= r == 0;
    if (!empty) {
      convert_nest(static_cast<char*>(dst), dsize, static_cast<const char*>(src), ssize, nests[k], loops[k], runs[k],
                   convert);
    }
  }
  return true;
}

}  // namespace torch_layouts
