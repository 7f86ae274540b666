#include "converting_copies.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "dma_executor.h"
#include "row_math.h"
#include "run_stretches.h"

namespace torch_layouts {
namespace {

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

}  // namespace

bool run_converting_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, c10::ScalarType dst_type,
                          const void* src, int64_t src_numel, c10::ScalarType src_type) {
  const bool to_half = src_type == at::kFloat && dst_type == at::kHalf;
  if (!to_half && !(src_type == at::kHalf && dst_type == at::kFloat)) return false;
  const ConvertRuns convert = converter(to_half);
  if (convert == nullptr) return false;
  std::vector<std::vector<StridedLoop<2>>> loops(nests.size());
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
    if (empty) continue;
    // a stretch of the largest loop's runs per call (float32 sticks into float16 ones: the runs
    // of one source stick column, rows in order)
    for_stretches<2>(loops[k], {nests[k].dst_offset, nests[k].src_offset}, runs[k], std::max(dsize, ssize),
                     [&](const std::array<int64_t, 2>& at, int64_t count, const StridedLoop<2>& inner) {
                       convert(static_cast<char*>(dst) + at[0] * dsize, static_cast<const char*>(src) + at[1] * ssize,
                               count, inner.strides[0], inner.strides[1], runs[k]);
                     });
  }
  return true;
}

}  // namespace torch_layouts
