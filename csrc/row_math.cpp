#include "row_math.h"

#include <c10/util/Half.h>

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "half_runs_x86.h"

namespace torch_layouts {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Cephes' e^x: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2]; the scale 2^n is applied in two
// halves so that results down to the subnormals are right; x is clamped to where e^x is 0..inf.
constexpr float kExpLow = -104.0f, kExpHigh = 88.7228394f, kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

}  // namespace

// ---- the portable row math: SSE2 lanes (x86-64's baseline), or scalar elsewhere ---------------
namespace portable_simd {
namespace {

#if defined(__SSE2__)
struct S {
  using V = __m128;
  static constexpr int64_t kLanes = 4;
  static V splat(float a) { return _mm_set1_ps(a); }
  static V zeros() { return _mm_setzero_ps(); }
  static V ld(const float* p, int64_t r, float fill) {
    if (r == 4) return _mm_loadu_ps(p);
    alignas(16) float t[4] = {fill, fill, fill, fill};
    for (int64_t k = 0; k < r; ++k) t[k] = p[k];
    return _mm_load_ps(t);
  }
  static void st(float* p, int64_t r, V v) {
    if (r == 4) return _mm_storeu_ps(p, v);
    alignas(16) float t[4];
    _mm_store_ps(t, v);
    for (int64_t k = 0; k < r; ++k) p[k] = t[k];
  }
  static V keep(V v, int64_t r) {
    if (r == 4) return v;
    return _mm_and_ps(v, _mm_castsi128_ps(_mm_cmplt_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(int(r)))));
  }
  static V add(V a, V b) { return _mm_add_ps(a, b); }
  static V sub(V a, V b) { return _mm_sub_ps(a, b); }
  static V div(V a, V b) { return _mm_div_ps(a, b); }
  static V mul(V a, V b) { return _mm_mul_ps(a, b); }
  static V max(V a, V b) { return _mm_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
  static V fnmadd(V a, V b, V c) { return _mm_sub_ps(c, _mm_mul_ps(a, b)); }
  static float hsum(V v) {
    const V s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55)));
  }
  static float hmax(V v) {
    const V s = _mm_max_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55)));
  }
  static V min(V a, V b) { return _mm_min_ps(a, b); }
  static V floor(V t) {  // SSE2 has no rounding: truncate, then step down where that rounded up
    const V f = _mm_cvtepi32_ps(_mm_cvttps_epi32(t));
    return _mm_sub_ps(f, _mm_and_ps(_mm_cmpgt_ps(f, t), splat(1.0f)));
  }
  static V scale2n(V p, V fx) {  // p * 2^fx in two halves of the exponent (subnormal results stay right)
    const __m128i n = _mm_cvttps_epi32(fx), n1 = _mm_srai_epi32(n, 1), n2 = _mm_sub_epi32(n, n1);
    const __m128i bias = _mm_set1_epi32(127);
    const V s1 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n1, bias), 23));
    const V s2 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n2, bias), 23));
    return _mm_mul_ps(_mm_mul_ps(p, s1), s2);
  }
  static V keep_nan(V x, V e) {
    const V nan = _mm_cmpunord_ps(x, x);
    return _mm_or_ps(_mm_and_ps(nan, x), _mm_andnot_ps(nan, e));
  }
};
#else
struct S {
  using V = float;
  static constexpr int64_t kLanes = 1;
  static V splat(float a) { return a; }
  static V zeros() { return 0.0f; }
  static V ld(const float* p, int64_t, float) { return *p; }
  static void st(float* p, int64_t, V v) { *p = v; }
  static V keep(V v, int64_t) { return v; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V div(V a, V b) { return a / b; }
  static V mul(V a, V b) { return a * b; }
  static V max(V a, V b) { return a > b ? a : b; }  // b where either is NaN, as SSE's maxps
  static V min(V a, V b) { return a < b ? a : b; }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V fnmadd(V a, V b, V c) { return c - a * b; }
  static float hsum(V v) { return v; }
  static float hmax(V v) { return v; }
  static V floor(V t) { return std::floor(t); }
  static V scale2n(V p, V fx) { return std::ldexp(p, static_cast<int>(fx)); }
  static V keep_nan(V x, V e) { return x != x ? x : e; }
};
#endif

#include "row_math_kernels.h"

}  // namespace
}  // namespace portable_simd

namespace {

void load_half_portable(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  // Four at a time: the half's exponent and mantissa shifted into a float's, times 2^112 (which
  // rebiases normals and normalises subnormals exactly); infinities and NaNs get the float's
  // all-ones exponent; the sign is put back last.
  const __m128i zero = _mm_setzero_si128(), low = _mm_set1_epi32(0x7fff), top = _mm_set1_epi32(0x7bff);
  const __m128 scale = _mm_castsi128_ps(_mm_set1_epi32(0x77800000));
  for (; i + 4 <= n; i += 4) {
    const __m128i h = _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + i)), zero);
    const __m128i em = _mm_and_si128(h, low), sign = _mm_slli_epi32(_mm_andnot_si128(low, h), 16);
    const __m128i shifted = _mm_slli_epi32(em, 13);
    const __m128i finite = _mm_castps_si128(_mm_mul_ps(_mm_castsi128_ps(shifted), scale));
    const __m128i special = _mm_or_si128(shifted, _mm_set1_epi32(0x7f800000));
    const __m128i big = _mm_cmpgt_epi32(em, top);
    const __m128i bits = _mm_or_si128(_mm_and_si128(big, special), _mm_andnot_si128(big, finite));
    _mm_storeu_ps(d + i, _mm_castsi128_ps(_mm_or_si128(bits, sign)));
  }
#endif
  for (; i < n; ++i) d[i] = c10::detail::fp16_ieee_to_fp32_value(s[i]);
}

// Half-precision runs summed through a float32 buffer, a piece at a time; runs[r] is run r's
// start (an array of pointers, or StridedRuns).
template <typename Runs>
void add_runs_portable(float* sums, Runs runs, int64_t count, int64_t n, bool half) {
  float piece[256];
  for (int64_t r = 0; r < count; ++r) {
    if (!half) {
      sums[r] += portable_simd::sum(reinterpret_cast<const float*>(runs[r]), n);
      continue;
    }
    const uint16_t* x = reinterpret_cast<const uint16_t*>(runs[r]);
    for (int64_t i = 0; i < n; i += 256) {
      const int64_t m = n - i < 256 ? n - i : 256;
      load_half_portable(piece, x + i, m);
      sums[r] += portable_simd::sum(piece, m);
    }
  }
}

void add_run_sums_portable(float* sums, const char* const* runs, int64_t count, int64_t n, bool half) {
  add_runs_portable(sums, runs, count, n, half);
}

void add_strided_run_sums_portable(float* sums, const char* first, int64_t step, int64_t count, int64_t n,
                                   bool half) {
  add_runs_portable(sums, StridedRuns{first, step}, count, n, half);
}

// Extremes of runs one element at a time (float16 through a float32 piece); NaN wins.
template <typename Runs>
void fold_runs_portable(float* acc, Runs runs, int64_t count, int64_t n, bool half, bool max) {
  float piece[256];
  for (int64_t r = 0; r < count; ++r) {
    float a = acc[r];
    for (int64_t i = 0; i < n && a == a; i += 256) {
      const int64_t m = n - i < 256 ? n - i : 256;
      const float* x = reinterpret_cast<const float*>(runs[r]) + i;
      if (half) {
        load_half_portable(piece, reinterpret_cast<const uint16_t*>(runs[r]) + i, m);
        x = piece;
      }
      for (int64_t k = 0; k < m && a == a; ++k) {
        if (x[k] != x[k] || (max ? x[k] > a : x[k] < a)) a = x[k];
      }
    }
    acc[r] = a;
  }
}

void fold_run_extremes_portable(float* acc, const char* const* runs, int64_t count, int64_t n, bool half, bool max) {
  fold_runs_portable(acc, runs, count, n, half, max);
}

void fold_strided_run_extremes_portable(float* acc, const char* first, int64_t step, int64_t count, int64_t n,
                                        bool half, bool max) {
  fold_runs_portable(acc, StridedRuns{first, step}, count, n, half, max);
}

void store_half_portable(uint16_t* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c10::detail::fp16_ieee_from_fp32_value(s[i]);
}

const RowMath kPortable{portable_simd::softmax,
                        portable_simd::softmax_backward,
                        portable_simd::layer_norm,
                        portable_simd::layer_norm_backward,
                        portable_simd::lstm_cell,
                        portable_simd::lstm_cell_backward,
                        portable_simd::gru_cell,
                        portable_simd::gru_cell_backward,
                        portable_simd::sum,
                        add_run_sums_portable,
                        add_strided_run_sums_portable,
                        fold_run_extremes_portable,
                        fold_strided_run_extremes_portable,
                        load_half_portable,
                        store_half_portable,
                        "portable"};

}  // namespace

#if defined(__x86_64__)
// ---- AVX2 / FMA / F16C ------------------------------------------------------------------------
// Compiled for those extensions and called only where the CPU reports all three. Nothing below
// instantiates a template shared with other files (the linker could pick this AVX2 copy).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2_simd {
namespace {

struct S {
  using V = __m256;
  static constexpr int64_t kLanes = 8;
  static __m256i lanes_below(int64_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V splat(float a) { return _mm256_set1_ps(a); }
  static V zeros() { return _mm256_setzero_ps(); }
  static V ld(const float* p, int64_t r, float fill) {
    if (r == 8) return _mm256_loadu_ps(p);
    const __m256i m = lanes_below(r);
    return _mm256_blendv_ps(splat(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void st(float* p, int64_t r, V v) {
    if (r == 8) return _mm256_storeu_ps(p, v);
    _mm256_maskstore_ps(p, lanes_below(r), v);
  }
  static V keep(V v, int64_t r) { return r == 8 ? v : _mm256_and_ps(v, _mm256_castsi256_ps(lanes_below(r))); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }
  static V floor(V t) { return _mm256_floor_ps(t); }
  static V scale2n(V p, V fx) {  // p * 2^fx in two halves of the exponent (subnormal results stay right)
    const __m256i n = _mm256_cvttps_epi32(fx), n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
  static V keep_nan(V x, V e) { return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
};

#include "row_math_kernels.h"

// A run's sum as 8 partial lanes.
[[gnu::always_inline]] inline S::V run_lanes(const char* p, int64_t n, bool half) {
  S::V s0 = S::zeros(), s1 = S::zeros();
  int64_t i = 0;
  if (half) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(p);
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_add_ps(s0, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
      s1 = _mm256_add_ps(s1, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8))));
    }
    if (i == n) return _mm256_add_ps(s0, s1);  // whole sticks: no tail
    alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = 0; i < n; ++i, ++k) {
      tail[k % 8] += _cvtsh_ss(x[i]);
    }
    return _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_load_ps(tail));
  }
  const float* x = reinterpret_cast<const float*>(p);
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
  }
  chunks(n - i, [&](int64_t k, int64_t r) { s0 = _mm256_add_ps(s0, S::ld(x + i + k, r, 0)); });
  return _mm256_add_ps(s0, s1);
}

#include "row_sums_x86.h"
#include "row_extremes_x86.h"

// A run's extreme as 8 partial lanes; two vectors a step, as AVX-512's extreme_lanes (below).
template <bool Max>
[[gnu::always_inline]] inline __m256 extreme_lanes(const char* p, int64_t n, bool half, bool& nan) {
  const float id = Max ? -kInf : kInf;
  __m256 s0 = S::splat(id), s1 = s0, unord = S::zeros();
  auto pair = [&](__m256 a, __m256 b, bool first) {
    unord = _mm256_or_ps(unord, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    s0 = first ? a : plain8<Max>(s0, a);
    s1 = first ? b : plain8<Max>(s1, b);
  };
  auto fold = [&](__m256 x) {
    s0 = plain8<Max>(s0, x);
    unord = _mm256_or_ps(unord, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  };
  int64_t i = 0;
  if (half) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(p);
    for (; i + 16 <= n; i += 16) {
      pair(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))),
           _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8))), i == 0);
    }
    for (; i < n; ++i) fold(S::splat(_cvtsh_ss(x[i])));
  } else {
    const float* x = reinterpret_cast<const float*>(p);
    for (; i + 16 <= n; i += 16) pair(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + i + 8), i == 0);
    chunks(n - i, [&](int64_t k, int64_t r) { fold(S::ld(x + i + k, r, id)); });
  }
  nan |= _mm256_movemask_ps(unord) != 0;
  return plain8<Max>(s0, s1);
}

void load_half_avx2(float* d, const uint16_t* s, int64_t n) { avx2_half::half_to_float(d, s, n); }
void store_half_avx2(uint16_t* d, const float* s, int64_t n) { avx2_half::float_to_half(d, s, n); }

const RowMath kAvx2{softmax,           softmax_backward,          layer_norm,     layer_norm_backward,
                    lstm_cell,         lstm_cell_backward,        gru_cell,       gru_cell_backward,
                    sum,               add_run_sums,              add_strided_run_sums,
                    fold_run_extremes, fold_strided_run_extremes, load_half_avx2, store_half_avx2,
                    "avx2"};

}  // namespace
}  // namespace avx2_simd
#pragma GCC pop_options

// ---- AVX-512 (F) ----------------------------------------------------------------------------
// The same math on 16 lanes: half a float32 stick (64 of its 128 bytes) a vector. Partial vectors load and
// store under lane masks; run sums add 16 elements a step. The float16 conversions stay AVX2's.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma,f16c")
// GCC 12's AVX-512 headers fill unmasked lanes from a self-initialised "undefined" vector, which
// -Wuninitialized reports at each use (dma_tiles.cpp says the same).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512_simd {
namespace {

struct S {
  using V = __m512;
  static constexpr int64_t kLanes = 16;
  static __mmask16 lanes_below(int64_t r) { return static_cast<__mmask16>((1u << r) - 1u); }
  static V splat(float a) { return _mm512_set1_ps(a); }
  static V zeros() { return _mm512_setzero_ps(); }
  static V ld(const float* p, int64_t r, float fill) {
    if (r == 16) return _mm512_loadu_ps(p);
    return _mm512_mask_loadu_ps(splat(fill), lanes_below(r), p);
  }
  static void st(float* p, int64_t r, V v) {
    if (r == 16) return _mm512_storeu_ps(p, v);
    _mm512_mask_storeu_ps(p, lanes_below(r), v);
  }
  static V keep(V v, int64_t r) { return r == 16 ? v : _mm512_maskz_mov_ps(lanes_below(r), v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static __m256 fold(V v) {  // the two 256-bit halves added
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  }
  static float hsum(V v) {  // halves added down to one lane, as AVX2's hsum does from 8
    const __m256 h = fold(v);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }
  static V floor(V t) { return _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static V scale2n(V p, V fx) {  // p * 2^fx in two halves of the exponent (subnormal results stay right)
    const __m512i n = _mm512_cvttps_epi32(fx), n1 = _mm512_srai_epi32(n, 1), n2 = _mm512_sub_epi32(n, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const V s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const V s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  }
  static V keep_nan(V x, V e) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x); }
};

#include "row_math_kernels.h"

// The first r float16 values at p (r <= 16), the other lanes 0; AVX-512F has no masked 16-bit loads.
inline __m256i halves_below(const uint16_t* p, int64_t r) {
  alignas(32) uint16_t v[16] = {};
  std::memcpy(v, p, r * sizeof(uint16_t));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
}

// A run's sum as 8 partial lanes: 16 elements a step (float16 converted 16 at a time), folded to 8.
[[gnu::always_inline]] inline __m256 run_lanes(const char* p, int64_t n, bool half) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  if (half) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(p);
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_add_ps(s0, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
      s1 = _mm512_add_ps(s1, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16))));
    }
    for (__m512* s : {&s0, &s1}) {  // the tail (under 32): its first 16 to s0, the rest to s1
      if (i < n) *s = _mm512_add_ps(*s, _mm512_cvtph_ps(halves_below(x + i, std::min<int64_t>(16, n - i))));
      i += 16;
    }
  } else {
    const float* x = reinterpret_cast<const float*>(p);
    for (; i + 32 <= n; i += 32) {
      s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
      s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
    }
    for (; i < n; i += 16) s0 = _mm512_add_ps(s0, S::ld(x + i, std::min<int64_t>(16, n - i), 0));
  }
  return S::fold(_mm512_add_ps(s0, s1));
}

#include "row_sums_x86.h"
#include "row_extremes_x86.h"

// A run's extreme as 8 partial lanes: 16 elements a step (float16 converted 16 at a time), folded to 8.
// Two vectors a step: one compare of the pair notes a NaN in either; the first pair starts the lanes.
template <bool Max>
[[gnu::always_inline]] inline __m256 extreme_lanes(const char* p, int64_t n, bool half, bool& nan) {
  const float id = Max ? -kInf : kInf;
  __m512 s0 = S::splat(id), s1 = s0;
  __mmask16 unord = 0;
  auto pair = [&](__m512 a, __m512 b, bool first) {
    unord |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
    s0 = first ? a : Max ? _mm512_max_ps(s0, a) : _mm512_min_ps(s0, a);
    s1 = first ? b : Max ? _mm512_max_ps(s1, b) : _mm512_min_ps(s1, b);
  };
  auto fold = [&](__m512 x) {
    s0 = Max ? _mm512_max_ps(s0, x) : _mm512_min_ps(s0, x);
    unord |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  };
  int64_t i = 0;
  if (half) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(p);
    for (; i + 32 <= n; i += 32) {
      pair(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))),
           _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16))), i == 0);
    }
    for (; i < n; ++i) fold(S::splat(_cvtsh_ss(x[i])));
  } else {
    const float* x = reinterpret_cast<const float*>(p);
    for (; i + 32 <= n; i += 32) pair(_mm512_loadu_ps(x + i), _mm512_loadu_ps(x + i + 16), i == 0);
    for (; i < n; i += 16) fold(S::ld(x + i, std::min<int64_t>(16, n - i), id));
  }
  nan |= unord != 0;
  const __m512 s = Max ? _mm512_max_ps(s0, s1) : _mm512_min_ps(s0, s1);
  return plain8<Max>(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
}

const RowMath kAvx512{softmax, softmax_backward, layer_norm, layer_norm_backward, lstm_cell, lstm_cell_backward,
                      gru_cell, gru_cell_backward, sum,
                      add_run_sums, add_strided_run_sums, fold_run_extremes, fold_strided_run_extremes,
                      avx2_simd::load_half_avx2, avx2_simd::store_half_avx2, "avx512"};

}  // namespace
}  // namespace avx512_simd
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace {
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
}  // namespace

const std::vector<std::string>& row_math_sets() {
  static const std::vector<std::string> sets = [] {
    std::vector<std::string> found;
    if (has_avx2() && __builtin_cpu_supports("avx512f")) found.push_back("avx512");
    if (has_avx2()) found.push_back("avx2");
    found.push_back("portable");
    return found;
  }();
  return sets;
}

const RowMath& row_math(const std::string& set) {
  const auto& sets = row_math_sets();
  TORCH_CHECK_VALUE(std::find(sets.begin(), sets.end(), set) != sets.end(), "row math set ", set,
                    " is not one this CPU runs (", c10::Join(", ", sets), ")");
  if (set == "avx512") return avx512_simd::kAvx512;
  if (set == "avx2") return avx2_simd::kAvx2;
  return kPortable;
}
#else
const std::vector<std::string>& row_math_sets() {
  static const std::vector<std::string> sets{"portable"};
  return sets;
}

const RowMath& row_math(const std::string& set) {
  TORCH_CHECK_VALUE(set == "portable", "row math set ", set, " is not one this CPU runs (portable)");
  return kPortable;
}
#endif

}  // namespace torch_layouts
