#include "row_math.h"

#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace torch_layouts {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- portable loops ---------------------------------------------------------------------------

// f(j, i, k) for element i of run j, k its index in the row.
template <typename F>
inline void each(RowShape s, F f) {
  for (int64_t j = 0; j < s.runs; ++j)
    for (int64_t i = 0; i < s.run; ++i) f(j, i, j * s.run + i);
}

inline float& at(Row x, int64_t j, int64_t i) { return x.base[x.off[j] + i]; }

void softmax_row(RowShape s, Row x, Row out, bool log, bool safe) {
  float m = -kInf;
  each(s, [&](int64_t j, int64_t i, int64_t) { m = std::max(m, at(x, j, i)); });
  if (safe && m == -kInf) {
    each(s, [&](int64_t j, int64_t i, int64_t) { at(out, j, i) = 0.0f; });
    return;
  }
  double sum = 0;
  if (log) {
    each(s, [&](int64_t j, int64_t i, int64_t) { sum += std::exp(at(x, j, i) - m); });
    const float ls = std::log(static_cast<float>(sum));
    each(s, [&](int64_t j, int64_t i, int64_t) { at(out, j, i) = (at(x, j, i) - m) - ls; });
    return;
  }
  each(s, [&](int64_t j, int64_t i, int64_t) { sum += (at(out, j, i) = std::exp(at(x, j, i) - m)); });
  const float inv = 1.0f / static_cast<float>(sum);
  each(s, [&](int64_t j, int64_t i, int64_t) { at(out, j, i) *= inv; });
}

void softmax_backward_row(RowShape s, Row g, Row y, Row out, bool log) {
  double sum = 0;
  if (log) {
    each(s, [&](int64_t j, int64_t i, int64_t) { sum += at(g, j, i); });
    const float sf = static_cast<float>(sum);
    each(s, [&](int64_t j, int64_t i, int64_t) { at(out, j, i) = at(g, j, i) - std::exp(at(y, j, i)) * sf; });
    return;
  }
  each(s, [&](int64_t j, int64_t i, int64_t) { sum += at(g, j, i) * at(y, j, i); });
  const float dot = static_cast<float>(sum);
  each(s, [&](int64_t j, int64_t i, int64_t) { at(out, j, i) = at(y, j, i) * (at(g, j, i) - dot); });
}

void layer_norm_row(RowShape s, Row x, Row out, const float* w, const float* b, float eps, float* mean,
                         float* rstd) {
  const int64_t n = s.runs * s.run;
  double sum = 0;
  each(s, [&](int64_t j, int64_t i, int64_t) { sum += at(x, j, i); });
  const float mu = static_cast<float>(sum / n);
  double v = 0;
  each(s, [&](int64_t j, int64_t i, int64_t) { v += (at(x, j, i) - mu) * (at(x, j, i) - mu); });
  const float r = 1.0f / std::sqrt(std::max(static_cast<float>(v / n), 0.0f) + eps);
  each(s, [&](int64_t j, int64_t i, int64_t k) {
    float y = (at(x, j, i) - mu) * r;
    if (w) y *= w[k];
    if (b) y += b[k];
    at(out, j, i) = y;
  });
  *mean = mu;
  *rstd = r;
}

void layer_norm_backward_row(RowShape s, Row g, Row x, Row out, float mean, float rstd, const float* w,
                                  float* dgamma, float* dbeta) {
  const int64_t n = s.runs * s.run;
  double a = 0, b = 0;
  each(s, [&](int64_t j, int64_t i, int64_t k) {
    const float gv = at(g, j, i), xhat = (at(x, j, i) - mean) * rstd, gw = w ? gv * w[k] : gv;
    if (dgamma) dgamma[k] += gv * xhat;
    if (dbeta) dbeta[k] += gv;
    a += gw;
    b += gw * xhat;
  });
  if (!out.base) return;
  const float ca = static_cast<float>(a / n), cb = static_cast<float>(b / n);
  each(s, [&](int64_t j, int64_t i, int64_t k) {
    const float gv = at(g, j, i), xhat = (at(x, j, i) - mean) * rstd, gw = w ? gv * w[k] : gv;
    at(out, j, i) = rstd * (gw - ca - xhat * cb);
  });
}

void softmax_portable(RowShape s, int64_t count, const Row* x, const Row* out, bool log, bool safe) {
  for (int64_t r = 0; r < count; ++r) softmax_row(s, x[r], out[r], log, safe);
}

void softmax_backward_portable(RowShape s, int64_t count, const Row* g, const Row* y, const Row* out, bool log) {
  for (int64_t r = 0; r < count; ++r) softmax_backward_row(s, g[r], y[r], out[r], log);
}

void layer_norm_portable(RowShape s, int64_t count, const Row* x, const Row* out, const float* w, const float* b,
                         float eps, float* mean, float* rstd) {
  for (int64_t r = 0; r < count; ++r) layer_norm_row(s, x[r], out[r], w, b, eps, mean + r, rstd + r);
}

void layer_norm_backward_portable(RowShape s, int64_t count, const Row* g, const Row* x, const Row* out,
                                  const float* mean, const float* rstd, const float* w, float* dgamma,
                                  float* dbeta) {
  for (int64_t r = 0; r < count; ++r) {
    layer_norm_backward_row(s, g[r], x[r], out ? out[r] : Row{nullptr, nullptr}, mean[r], rstd[r], w, dgamma, dbeta);
  }
}

float sum_portable(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return static_cast<float>(s);
}

void add_run_sums_portable(float* sums, const char* const* runs, int64_t count, int64_t n, bool half) {
  for (int64_t r = 0; r < count; ++r) {
    double s = 0;
    if (half) {
      const uint16_t* x = reinterpret_cast<const uint16_t*>(runs[r]);
      for (int64_t i = 0; i < n; ++i) s += c10::detail::fp16_ieee_to_fp32_value(x[i]);
    } else {
      const float* x = reinterpret_cast<const float*>(runs[r]);
      for (int64_t i = 0; i < n; ++i) s += x[i];
    }
    sums[r] += static_cast<float>(s);
  }
}

void load_half_portable(float* d, const uint16_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c10::detail::fp16_ieee_to_fp32_value(s[i]);
}

void store_half_portable(uint16_t* d, const float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c10::detail::fp16_ieee_from_fp32_value(s[i]);
}

const RowMath kPortable{softmax_portable,      softmax_backward_portable, layer_norm_portable,
                        layer_norm_backward_portable, sum_portable,   add_run_sums_portable, load_half_portable,
                        store_half_portable};

}  // namespace

const RowMath& portable_row_math() { return kPortable; }

#if defined(__x86_64__)
// ---- AVX2 / FMA / F16C ------------------------------------------------------------------------
// Compiled for those extensions and called only where the CPU reports all three. Nothing below
// instantiates a template shared with other files (the linker could pick this AVX2 copy).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace {

using V = __m256;

inline V splat(float a) { return _mm256_set1_ps(a); }

inline __m256i lanes_below(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Eight floats from p (r < 8: the first r, the other lanes `fill`).
inline V ld(const float* p, int64_t r, float fill) {
  if (r == 8) return _mm256_loadu_ps(p);
  const __m256i m = lanes_below(r);
  return _mm256_blendv_ps(splat(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

inline void st(float* p, int64_t r, V v) {
  if (r == 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, lanes_below(r), v);
  }
}

// body(i, r) over chunks of 8 elements, the last one of r < 8.
template <typename Body>
inline void chunks(int64_t n, Body body) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) body(i, 8);
  if (i < n) body(i, n - i);
}

inline float hsum(V v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(V v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x within 2 ulp (Cephes' polynomial for e^r, |r| <= ln2/2, scaled by 2^n in two halves so
// that results down to the subnormals are exact in range); -inf gives 0, +inf inf, NaN NaN.
inline V exp8(V x) {
  const V nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const V c = _mm256_min_ps(_mm256_max_ps(x, splat(-104.0f)), splat(88.7228394f));
  const V fx = _mm256_floor_ps(_mm256_fmadd_ps(c, splat(1.44269504088896341f), splat(0.5f)));
  V r = _mm256_fnmadd_ps(fx, splat(0.693359375f), c);
  r = _mm256_fnmadd_ps(fx, splat(-2.12194440e-4f), r);
  V p = splat(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, splat(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, splat(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, splat(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, splat(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, splat(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, splat(1.0f)));
  const __m256i n = _mm256_cvttps_epi32(fx);
  const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_blendv_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), x, nan);
}

// f(k, j) for run j of every row k of the block, run by run, so that rows adjacent within a tile
// are visited in storage order. Accumulators live in registers within a run and in per-row
// arrays between runs.
template <typename F>
inline void each_run(RowShape s, int64_t count, F f) {
  for (int64_t j = 0; j < s.runs; ++j)
    for (int64_t k = 0; k < count; ++k) f(k, j);
}

inline float* ptr(Row x, int64_t j) { return x.base + x.off[j]; }

inline V zeros() { return _mm256_setzero_ps(); }

void softmax_avx2(RowShape s, int64_t count, const Row* x, const Row* out, bool log, bool safe) {
  V acc[kMaxBlockRows];
  float m[kMaxBlockRows];
  bool zero[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = splat(-kInf);
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x[k], j);
    V a = acc[k];
    chunks(s.run, [&](int64_t i, int64_t r) { a = _mm256_max_ps(a, ld(xp + i, r, -kInf)); });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) {
    m[k] = hmax(acc[k]);
    zero[k] = safe && m[k] == -kInf;
    acc[k] = zeros();
  }
  if (log) {
    each_run(s, count, [&](int64_t k, int64_t j) {
      const float* xp = ptr(x[k], j);
      const V mk = splat(m[k]);
      V a = acc[k];
      chunks(s.run, [&](int64_t i, int64_t r) { a = _mm256_add_ps(a, exp8(_mm256_sub_ps(ld(xp + i, r, -kInf), mk))); });
      acc[k] = a;
    });
    float ls[kMaxBlockRows];
    for (int64_t k = 0; k < count; ++k) ls[k] = std::log(hsum(acc[k]));
    each_run(s, count, [&](int64_t k, int64_t j) {  // (x - max) - log(sum): exact where x is near max
      const float* xp = ptr(x[k], j);
      float* op = ptr(out[k], j);
      const V mk = splat(m[k]), lk = splat(ls[k]);
      const bool z = zero[k];
      chunks(s.run, [&](int64_t i, int64_t r) {
        st(op + i, r, z ? zeros() : _mm256_sub_ps(_mm256_sub_ps(ld(xp + i, r, 0), mk), lk));
      });
    });
    return;
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x[k], j);
    float* op = ptr(out[k], j);
    const V mk = splat(m[k]);
    V a = acc[k];
    chunks(s.run, [&](int64_t i, int64_t r) {
      const V e = exp8(_mm256_sub_ps(ld(xp + i, r, -kInf), mk));
      st(op + i, r, e);
      a = _mm256_add_ps(a, r == 8 ? e : _mm256_and_ps(e, _mm256_castsi256_ps(lanes_below(r))));
    });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) m[k] = zero[k] ? 0.0f : 1.0f / hsum(acc[k]);
  each_run(s, count, [&](int64_t k, int64_t j) {
    float* op = ptr(out[k], j);
    const V scale = splat(m[k]);
    const bool z = zero[k];
    chunks(s.run, [&](int64_t i, int64_t r) { st(op + i, r, z ? zeros() : _mm256_mul_ps(ld(op + i, r, 0), scale)); });
  });
}

void softmax_backward_avx2(RowShape s, int64_t count, const Row* g, const Row* y, const Row* out, bool log) {
  V acc[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = zeros();
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g[k], j), *yp = ptr(y[k], j);
    V a = acc[k];
    if (log) {
      chunks(s.run, [&](int64_t i, int64_t r) { a = _mm256_add_ps(a, ld(gp + i, r, 0)); });
    } else {
      chunks(s.run, [&](int64_t i, int64_t r) { a = _mm256_fmadd_ps(ld(gp + i, r, 0), ld(yp + i, r, 0), a); });
    }
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) acc[k] = splat(hsum(acc[k]));
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g[k], j), *yp = ptr(y[k], j);
    float* op = ptr(out[k], j);
    const V a = acc[k];
    if (log) {  // g - exp(y) * sum(g)
      chunks(s.run, [&](int64_t i, int64_t r) {
        st(op + i, r, _mm256_fnmadd_ps(exp8(ld(yp + i, r, 0)), a, ld(gp + i, r, 0)));
      });
    } else {  // y * (g - sum(g * y))
      chunks(s.run, [&](int64_t i, int64_t r) {
        st(op + i, r, _mm256_mul_ps(ld(yp + i, r, 0), _mm256_sub_ps(ld(gp + i, r, 0), a)));
      });
    }
  });
}

void layer_norm_avx2(RowShape s, int64_t count, const Row* x, const Row* out, const float* w, const float* b,
                     float eps, float* mean, float* rstd) {
  const float n = static_cast<float>(s.runs * s.run);
  V acc[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) acc[k] = zeros();
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x[k], j);
    V a = acc[k];
    chunks(s.run, [&](int64_t i, int64_t r) { a = _mm256_add_ps(a, ld(xp + i, r, 0)); });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) {
    mean[k] = hsum(acc[k]) / n;
    acc[k] = zeros();
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x[k], j);
    const V mk = splat(mean[k]);
    V a = acc[k];
    chunks(s.run, [&](int64_t i, int64_t r) {
      const V d = _mm256_sub_ps(ld(xp + i, r, mean[k]), mk);
      a = _mm256_fmadd_ps(d, d, a);
    });
    acc[k] = a;
  });
  for (int64_t k = 0; k < count; ++k) {
    const float var = hsum(acc[k]) / n;
    rstd[k] = 1.0f / std::sqrt((var > 0.0f ? var : 0.0f) + eps);
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float* xp = ptr(x[k], j);
    float* op = ptr(out[k], j);
    const float *wj = w ? w + j * s.run : nullptr, *bj = b ? b + j * s.run : nullptr;
    const V mk = splat(mean[k]), rk = splat(rstd[k]);
    chunks(s.run, [&](int64_t i, int64_t r) {
      V v = _mm256_mul_ps(_mm256_sub_ps(ld(xp + i, r, 0), mk), rk);
      if (wj) v = _mm256_mul_ps(v, ld(wj + i, r, 0));
      if (bj) v = _mm256_add_ps(v, ld(bj + i, r, 0));
      st(op + i, r, v);
    });
  });
}

void layer_norm_backward_avx2(RowShape s, int64_t count, const Row* g, const Row* x, const Row* out,
                              const float* mean, const float* rstd, const float* w, float* dgamma, float* dbeta) {
  const float n = static_cast<float>(s.runs * s.run);
  V sa[kMaxBlockRows], sb[kMaxBlockRows];
  for (int64_t k = 0; k < count; ++k) sa[k] = sb[k] = zeros();
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g[k], j), *xp = ptr(x[k], j), *wj = w ? w + j * s.run : nullptr;
    float *dg = dgamma ? dgamma + j * s.run : nullptr, *db = dbeta ? dbeta + j * s.run : nullptr;
    const V mk = splat(mean[k]), rk = splat(rstd[k]);
    V a = sa[k], c = sb[k];
    chunks(s.run, [&](int64_t i, int64_t r) {
      const V gv = ld(gp + i, r, 0), xhat = _mm256_mul_ps(_mm256_sub_ps(ld(xp + i, r, 0), mk), rk);
      if (dg) st(dg + i, r, _mm256_fmadd_ps(gv, xhat, ld(dg + i, r, 0)));
      if (db) st(db + i, r, _mm256_add_ps(gv, ld(db + i, r, 0)));
      const V gw = wj ? _mm256_mul_ps(gv, ld(wj + i, r, 0)) : gv;
      a = _mm256_add_ps(a, gw);
      c = _mm256_fmadd_ps(gw, xhat, c);
    });
    sa[k] = a;
    sb[k] = c;
  });
  if (!out) return;
  for (int64_t k = 0; k < count; ++k) {
    sa[k] = splat(hsum(sa[k]) / n);
    sb[k] = splat(hsum(sb[k]) / n);
  }
  each_run(s, count, [&](int64_t k, int64_t j) {
    const float *gp = ptr(g[k], j), *xp = ptr(x[k], j), *wj = w ? w + j * s.run : nullptr;
    float* op = ptr(out[k], j);
    const V mk = splat(mean[k]), rk = splat(rstd[k]), a = sa[k], c = sb[k];
    chunks(s.run, [&](int64_t i, int64_t r) {
      const V gv = ld(gp + i, r, 0), xhat = _mm256_mul_ps(_mm256_sub_ps(ld(xp + i, r, 0), mk), rk);
      const V gw = wj ? _mm256_mul_ps(gv, ld(wj + i, r, 0)) : gv;
      st(op + i, r, _mm256_mul_ps(rk, _mm256_fnmadd_ps(xhat, c, _mm256_sub_ps(gw, a))));
    });
  });
}

float sum_avx2(const float* x, int64_t n) {
  V s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + i + 8));
  }
  chunks(n - i, [&](int64_t k, int64_t r) { s0 = _mm256_add_ps(s0, ld(x + i + k, r, 0)); });
  return hsum(_mm256_add_ps(s0, s1));
}

// A run's sum as 8 partial lanes.
inline V run_lanes(const char* p, int64_t n, bool half) {
  V s0 = zeros(), s1 = zeros();
  int64_t i = 0;
  if (half) {
    const uint16_t* x = reinterpret_cast<const uint16_t*>(p);
    for (; i + 16 <= n; i += 16) {
      s0 = _mm256_add_ps(s0, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
      s1 = _mm256_add_ps(s1, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8))));
    }
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
  chunks(n - i, [&](int64_t k, int64_t r) { s0 = _mm256_add_ps(s0, ld(x + i + k, r, 0)); });
  return _mm256_add_ps(s0, s1);
}

// Eight rows at a time: their lanes reduce to one vector of eight sums (a transposing hadd tree).
void add_run_sums_avx2(float* sums, const char* const* runs, int64_t count, int64_t n, bool half) {
  int64_t r = 0;
  for (; r + 8 <= count; r += 8) {
    V v[8];
    for (int q = 0; q < 8; ++q) v[q] = run_lanes(runs[r + q], n, half);
    const V b0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const V b1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    const V total = _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
    _mm256_storeu_ps(sums + r, _mm256_add_ps(_mm256_loadu_ps(sums + r), total));
  }
  for (; r < count; ++r) sums[r] += hsum(run_lanes(runs[r], n, half));
}

void load_half_avx2(float* d, const uint16_t* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  }
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

void store_half_avx2(uint16_t* d, const float* s, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}

const RowMath kAvx2{softmax_avx2,      softmax_backward_avx2, layer_norm_avx2, layer_norm_backward_avx2,
                    sum_avx2,          add_run_sums_avx2,     load_half_avx2,  store_half_avx2};

}  // namespace
#pragma GCC pop_options

const RowMath& row_math() {
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  }();
  return avx2 ? kAvx2 : kPortable;
}
#else
const RowMath& row_math() { return kPortable; }
#endif

}  // namespace torch_layouts
