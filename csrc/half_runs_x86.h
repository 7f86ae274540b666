// Runs of float16 and bfloat16 to and from float32 on x86, written once per instruction set and
// inlined into the loops that use them (the converting copies, the row kernels' staging, the column
// sums). float16 by F16C's conversions (round to nearest even; NaNs as ATen's vectorized kernels
// convert them), 8 elements a step with AVX2, 16 with AVX-512; bfloat16 by widening its bits
// (exact), and float32 to bfloat16 as ATen's vectorized conversion rounds it (to nearest even, every
// NaN 0xffff; ATen's scalar conversion, used where its loop cannot vectorize, gives NaNs 0x7fc0).
// A caller compiled for the same target (or a wider one) inlines them.
#pragma once

#if defined(__x86_64__)
#include <c10/util/BFloat16.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace torch_layouts {

// One float32 as ATen's vectorized float32 -> bfloat16 conversion gives it (the tails' scalar step).
inline uint16_t bf16_bits_rounded(float f) {
  if (f != f) return 0xffff;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace avx2_half {

[[gnu::always_inline]] inline void half_to_float(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  }
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

[[gnu::always_inline]] inline void float_to_half(uint16_t* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}

[[gnu::always_inline]] inline void bf16_to_float(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) d[i] = c10::detail::f32_from_bits(s[i]);
}

[[gnu::always_inline]] inline void float_to_bf16(uint16_t* d, const float* s, int64_t n) {
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), nan = _mm256_set1_epi32(0xffff);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(s + i);
    const __m256i bits = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(bits, bias), _mm256_and_si256(_mm256_srli_epi32(bits, 16), one));
    r = _mm256_blendv_epi8(nan, _mm256_srli_epi32(r, 16), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_ORD_Q)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  for (; i < n; ++i) d[i] = bf16_bits_rounded(s[i]);
}

}  // namespace avx2_half
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,f16c")
// GCC 12's AVX-512 headers fill unmasked lanes from a self-initialised "undefined" vector, which
// -Wmaybe-uninitialized reports where these are inlined (row_math.cpp says the same).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512_half {

[[gnu::always_inline]] inline void half_to_float(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  }
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

[[gnu::always_inline]] inline void float_to_half(uint16_t* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}

[[gnu::always_inline]] inline void bf16_to_float(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) d[i] = c10::detail::f32_from_bits(s[i]);
}

[[gnu::always_inline]] inline void float_to_bf16(uint16_t* d, const float* s, int64_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), nan = _mm512_set1_epi32(0xffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(s + i);
    const __m512i bits = _mm512_castps_si512(v);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(bits, bias), _mm512_and_si512(_mm512_srli_epi32(bits, 16), one));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), nan, _mm512_srli_epi32(r, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) d[i] = bf16_bits_rounded(s[i]);
}

}  // namespace avx512_half
#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace torch_layouts

#endif
