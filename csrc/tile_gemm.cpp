#include "tile_gemm.h"

#include "dma_tiles.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <immintrin.h>

#include <c10/util/StringUtil.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

namespace torch_layouts {
namespace {

constexpr int64_t kMR = 12;    // rows of C per register block (AVX2: two 6x16 halves, AVX-512: one 12x16)
constexpr int64_t kNR = 16;    // columns of C per register block (a B panel)
constexpr int64_t kKC = 256;   // depth of one pass: a B panel's kKC x 16 floats stay in L1
constexpr int64_t kMC = 144;   // rows of A packed per pass (kMC x kKC floats in L2), whole strips
static_assert(kMC % kMR == 0, "a row block is whole strips");
constexpr int64_t kMaxDirectLd = 64;  // B panels whose rows lie further apart (floats) are packed

// Element offsets of the first `count` indices of a dim group (dims of v, checked by `tables`),
// enumerated row-major.
std::vector<int64_t> group_offsets(const at::Tensor& v, const std::vector<int64_t>& dims, int64_t count,
                                   const char* name, const char* what) {
  int64_t extent = 1;
  for (int64_t d : dims) extent *= v.size(d);
  TORCH_CHECK_VALUE(count <= extent, name, ": needs ", count, " ", what, " but its view holds ", extent);
  std::vector<int64_t> off(count);
  std::vector<int64_t> index(dims.size(), 0);
  int64_t cur = 0;
  for (int64_t i = 0; i < count; ++i) {
    off[i] = cur;
    for (size_t g = dims.size(); g-- > 0;) {  // odometer step, innermost dim first
      const int64_t d = dims[g];
      cur += v.stride(d);
      if (++index[g] < v.size(d)) break;
      cur -= v.stride(d) * v.size(d);
      index[g] = 0;
    }
  }
  return off;
}

// An operand's element offsets from its view's first element: per batch entry, row and column.
struct Tables {
  std::vector<int64_t> batch, rows, cols;
};

Tables tables(const GemmOperand& op, const char* name, int64_t batch, int64_t rows, int64_t cols) {
  const at::Tensor& v = op.view;
  TORCH_CHECK_VALUE(v.device().is_cpu() && v.scalar_type() == at::kFloat, name,
                    ": expected a float32 CPU view, got ", v.scalar_type(), " on ", v.device());
  std::vector<bool> used(v.dim(), false);
  for (const auto* group : {&op.batch, &op.rows, &op.cols}) {
    for (int64_t d : *group) {
      TORCH_CHECK_VALUE(d >= 0 && d < v.dim() && !used[d], name, ": dim ", d, " is out of range or in two groups");
      used[d] = true;
    }
  }
  return {group_offsets(v, op.batch, batch, name, "batch entries"),
          group_offsets(v, op.rows, rows, name, "rows"), group_offsets(v, op.cols, cols, name, "columns")};
}

int64_t group_extent(const GemmOperand& op) {
  int64_t n = 1;
  for (int64_t d : op.batch) n *= op.view.size(d);
  return n;
}

// Whether columns [j, j + kNR) are all real and contiguous.
bool contiguous_panel(const std::vector<int64_t>& cols, int64_t j) {
  if (j + kNR > static_cast<int64_t>(cols.size())) return false;
  for (int64_t q = 1; q < kNR; ++q)
    if (cols[j + q] != cols[j] + q) return false;
  return true;
}

// Whether the n offsets are evenly spaced; *ld is their spacing (kNR for a single offset).
bool evenly_spaced(const int64_t* offsets, int64_t n, int64_t* ld) {
  *ld = n > 1 ? offsets[1] - offsets[0] : kNR;
  for (int64_t p = 1; p < n; ++p)
    if (offsets[p] - offsets[p - 1] != *ld) return false;
  return true;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")

// acc (12x16, row-major) := sum over kc of a packed A strip x B rows (16 floats, `ldb` apart),
// one 16-float register per row; the strip is [12][kKC] (kStep 1) or [kc][12] (kStep 12). The
// same sums in the same order as kernel_6x16's (one FMA per product, p ascending): the same bits.
template <int64_t kStep>
void kernel_12x16_avx512(int64_t kc, const float* a, const float* b, int64_t ldb, float* acc) {
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
         c10 = c0, c11 = c0;
  constexpr int64_t rs = kStep == 1 ? kKC : 1;  // a row's floats kKC apart: one base register
  for (int64_t p = 0; p < kc * kStep; p += kStep, b += ldb) {
    const __m512 v = _mm512_loadu_ps(b);
    const float* x = a + p;
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(x[0]), v, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(x[rs]), v, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(x[2 * rs]), v, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(x[3 * rs]), v, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(x[4 * rs]), v, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(x[5 * rs]), v, c5);
    c6 = _mm512_fmadd_ps(_mm512_set1_ps(x[6 * rs]), v, c6);
    c7 = _mm512_fmadd_ps(_mm512_set1_ps(x[7 * rs]), v, c7);
    c8 = _mm512_fmadd_ps(_mm512_set1_ps(x[8 * rs]), v, c8);
    c9 = _mm512_fmadd_ps(_mm512_set1_ps(x[9 * rs]), v, c9);
    c10 = _mm512_fmadd_ps(_mm512_set1_ps(x[10 * rs]), v, c10);
    c11 = _mm512_fmadd_ps(_mm512_set1_ps(x[11 * rs]), v, c11);
  }
  const __m512 r[12] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
  for (int q = 0; q < 12; ++q) _mm512_storeu_ps(acc + kNR * q, r[q]);
}

// Where a 12x32 block's result goes when both its panels' columns are contiguous in C: each row's
// two 16-float runs (null past m), written as write_c writes them (alpha times the sums, plus C's
// value after the first pass, plus beta times the bias row in the first), straight from the
// registers: no round trip through an accumulator buffer (1024x256 @ 256x1024: 3-4% of the time).
struct BlockOut {
  float* run[kMR][2];
  float alpha;
  bool add;
  const float* bias;  // null, or the pair's 32 bias values (the first pass adds beta times them)
  float beta;
};

// Two panels at once: acc (two 12x16 blocks, the first panel's then the second's) := the strip x
// B rows of each panel (16 floats at b0 and at b1, both `ldb` apart). Each B row's two registers
// share one broadcast of A per row: 14 loads to 24 FMAs where a 12x16 block takes 13 to 12 (a
// 1024x256 @ 256x256 product: 177 -> 200 GFLOP/s a core). The same sums in the same order as
// kernel_12x16_avx512's: the same bits. With `out`, the block goes to C from the registers instead.
template <int64_t kStep>
void kernel_12x32_avx512(int64_t kc, const float* a, const float* b0, const float* b1, int64_t ldb, float* acc,
                         const BlockOut* out = nullptr) {
  __m512 c[kMR][2];
#pragma GCC unroll 12
  for (int64_t q = 0; q < kMR; ++q) c[q][0] = c[q][1] = _mm512_setzero_ps();
  constexpr int64_t rs = kStep == 1 ? kKC : 1;  // a row's floats kKC apart: one base register
  for (int64_t p = 0; p < kc * kStep; p += kStep, b0 += ldb, b1 += ldb) {
    const __m512 v0 = _mm512_loadu_ps(b0), v1 = _mm512_loadu_ps(b1);
    const float* x = a + p;
#pragma GCC unroll 12
    for (int64_t q = 0; q < kMR; ++q) {
      const __m512 s = _mm512_set1_ps(x[q * rs]);
      c[q][0] = _mm512_fmadd_ps(s, v0, c[q][0]);
      c[q][1] = _mm512_fmadd_ps(s, v1, c[q][1]);
    }
  }
  if (out == nullptr) {
#pragma GCC unroll 12
    for (int64_t q = 0; q < kMR; ++q) {
      _mm512_storeu_ps(acc + kNR * q, c[q][0]);
      _mm512_storeu_ps(acc + kMR * kNR + kNR * q, c[q][1]);
    }
    return;
  }
  const __m512 alpha = _mm512_set1_ps(out->alpha), beta = _mm512_set1_ps(out->beta);
  __m512 bias[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  if (out->bias) {
    bias[0] = _mm512_mul_ps(beta, _mm512_loadu_ps(out->bias));
    bias[1] = _mm512_mul_ps(beta, _mm512_loadu_ps(out->bias + kNR));
  }
#pragma GCC unroll 12
  for (int64_t q = 0; q < kMR; ++q) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float* run = out->run[q][h];
      if (run == nullptr) continue;
      __m512 v = _mm512_mul_ps(alpha, c[q][h]);
      if (out->add) v = _mm512_add_ps(_mm512_loadu_ps(run), v);
      if (out->bias) v = _mm512_add_ps(bias[h], v);
      _mm512_storeu_ps(run, v);
    }
  }
}

#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// acc (6x16, row-major) := sum over kc of 6 rows of a packed A strip x B rows (16 floats, `ldb`
// apart). The rows are kKC apart (kStep 1) or adjacent, each p kStep further on (kStep kMR).
template <int64_t kStep>
inline void kernel_6x16(int64_t kc, const float* a, const float* b, int64_t ldb, float* acc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  constexpr int64_t rs = kStep == 1 ? kKC : 1;  // a row's floats kKC apart: one base register
  const float *a0 = a, *a1 = a + rs, *a2 = a + 2 * rs, *a3 = a + 3 * rs, *a4 = a + 4 * rs, *a5 = a + 5 * rs;
  for (int64_t p = 0; p < kc * kStep; p += kStep, b += ldb) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a0 + p);
    c00 = _mm256_fmadd_ps(x, b0, c00), c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a1 + p);
    c10 = _mm256_fmadd_ps(x, b0, c10), c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a2 + p);
    c20 = _mm256_fmadd_ps(x, b0, c20), c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a3 + p);
    c30 = _mm256_fmadd_ps(x, b0, c30), c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a4 + p);
    c40 = _mm256_fmadd_ps(x, b0, c40), c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a5 + p);
    c50 = _mm256_fmadd_ps(x, b0, c50), c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  const __m256 r[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int q = 0; q < 12; ++q) _mm256_storeu_ps(acc + 8 * q, r[q]);
}

// A GEMM's geometry, planned once for views of given sizes and strides (`prepare`).
struct Problem {
  Tables c, a, b;
  int64_t batch, m, n, k;
  int64_t panels;                  // 16-column panels of B and C
  std::vector<int64_t> b_panel;    // per panel: offset of B's row 0 (direct) or -1 (packed)
  int64_t ldb = 0;
  std::vector<int64_t> to_pack;    // the panels that are not direct
  std::vector<char> c_direct;      // per panel: C's columns contiguous
  std::vector<int64_t> a_run;      // per column p of A: how many columns from p are contiguous
  bool a_strips_by_row = true;     // A packed [12][kc] per strip (else [kc][12]), see pack_a
};

// One call's operands (each view's first element) and scalars.
struct Call {
  float* c;
  const float* a;
  const float* b;
  float alpha;
  bool accumulate;
  const float* bias;  // null, or n floats: C(i, j) starts from beta * bias[j]
  float beta;
  bool avx512 = false;             // kernel_12x16_avx512 (else two kernel_6x16 halves)
  float* packed_b = nullptr;       // [batch][panel][k][16] for panels that are not direct ...
  bool pack_b_in_task = false;     // ... unless each task packs its own (one row block per batch entry)
};

// dst[0, n) = src[0, n) inline: the packing copies runs of a stick or less, for which a
// memmove call costs more than the copy (bmm 32x128x128 @ 32x128x64: 60% of the time in memmove).
inline void copy_floats(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  if (i + 4 <= n) _mm_storeu_ps(dst + i, _mm_loadu_ps(src + i)), i += 4;  // a strip's last 4 of 12
  for (; i < n; ++i) dst[i] = src[i];
}

// The rows a pack copies lie far apart (a tile's rows, or a batch dim between them), which the
// hardware prefetchers do not follow: each copy first asks for the row kPrefetchAhead further on.
constexpr int64_t kPrefetchAhead = 8;
constexpr int64_t kNearBytes = int64_t(32) << 10;  // a block this small is not prefetched (pack_a)
inline void prefetch_floats(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

// Rows [p0, p0 + kc) of B's panel jp as [kc][16] (columns past n are zero).
void pack_b(const Problem& P, const Call& X, int64_t bi, int64_t jp, int64_t p0, int64_t kc, float* dst) {
  const float* base = X.b + P.b.batch[bi];
  const int64_t j0 = jp * kNR, nr = std::min(kNR, P.n - j0);
  int64_t col_step = 1;
  const bool even = nr == 1 || evenly_spaced(P.b.cols.data() + j0, nr, &col_step);
  if (even && col_step == 1) {  // rows of nr contiguous columns (16 but in the last panel), far apart
    for (int64_t p = p0; p < p0 + kc; ++p, dst += kNR) {
      if (p + kPrefetchAhead < p0 + kc) prefetch_floats(base + P.b.rows[p + kPrefetchAhead] + P.b.cols[j0], nr);
      copy_floats(base + P.b.rows[p] + P.b.cols[j0], nr, dst);
      std::fill(dst + nr, dst + kNR, 0.f);
    }
    return;
  }
  if (even) {
    // B sticked on its rows (a transposed operand): each run of contiguous rows and the panel's
    // evenly spaced columns are one block transpose (dma_tiles' copy_tile), not an element at a time.
    for (int64_t p = p0; p < p0 + kc;) {
      int64_t run = 1;
      while (p + run < p0 + kc && P.b.rows[p + run] == P.b.rows[p] + run) ++run;
      float* out = dst + (p - p0) * kNR;
      copy_tile(reinterpret_cast<char*>(out), reinterpret_cast<const char*>(base + P.b.rows[p] + P.b.cols[j0]), nr,
                run, col_step * static_cast<int64_t>(sizeof(float)), kNR * static_cast<int64_t>(sizeof(float)),
                sizeof(float), false);
      for (int64_t r = 0; r < run; ++r) std::fill(out + r * kNR + nr, out + (r + 1) * kNR, 0.f);
      p += run;
    }
    return;
  }
  for (int64_t p = p0; p < p0 + kc; ++p, dst += kNR) {
    const float* row = base + P.b.rows[p];
    int64_t q = 0;
    for (; q < nr; ++q) dst[q] = row[P.b.cols[j0 + q]];
    for (; q < kNR; ++q) dst[q] = 0.f;
  }
}

// A rows [i0, i0 + mc) x depth [p0, p0 + kc) into strips of 12 rows (rows past m are zero).
// Where A's columns lie in runs (A sticked on k) each strip is [12][kKC] (its rows kKC floats
// apart whatever kc is: the kernels then reach all 12 rows from one register at fixed offsets,
// where rows kc apart took 12 registers and spilled two to vector registers, whose moves back
// took FMA ports), copied row by row and run by run; otherwise (A sticked on its rows: a
// transposed operand) [kc][12], each column's 12 rows copied together (a run where the strip's
// rows are adjacent).
void pack_a(const Problem& P, const Call& X, int64_t bi, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            float* dst) {
  const float* base = X.a + P.a.batch[bi];
  const int64_t real = std::max<int64_t>(0, std::min(mc, P.m - i0));
  const int64_t* rows = P.a.rows.data() + i0;
  if (P.a_strips_by_row) {
    for (int64_t r = real; r < mc; ++r) std::fill(dst + r * kKC, dst + r * kKC + kc, 0.f);
    for (int64_t r = 0; r < real; ++r) {
      const float* row = base + rows[r];
      const float* ahead = r + kPrefetchAhead < real ? base + rows[r + kPrefetchAhead] : nullptr;
      for (int64_t p = p0; p < p0 + kc;) {
        const int64_t len = std::min(P.a_run[p], p0 + kc - p);
        if (ahead) prefetch_floats(ahead + P.a.cols[p], len);
        copy_floats(row + P.a.cols[p], len, dst + r * kKC + (p - p0));
        p += len;
      }
    }
    return;
  }
  // Column after column: one column's rows of the block lie in a few runs (lines read once). Each
  // strip's rows are copied run by run (every row the one after the last: a folded batch may
  // interleave rows whose ends are kMR - 1 apart; a strip across a stick boundary in two runs, rows
  // 24-35 of a transposed Spyre operand's sticks of 32), and the column kPrefetchAhead further on
  // is asked for first: its rows lie in sticks a page or more apart, which the hardware
  // prefetchers do not follow (bmm of a 32x128x128 transpose @ 32x128x64: 467 -> 401 us). A
  // block of at most kNearBytes, which the L1 holds, is not asked for: the demo MLP's weight
  // gradient (a 128x32 transpose, 16 KiB) 148 -> 140 thousand instructions a call (155 before the
  // 4-float copy in copy_floats), 10.4-10.7 -> 9.8-10.0 us in a loop (CPU 6.6-6.9 in that hour).
  struct Run {
    int64_t row, len;
  };
  Run runs[kMC];
  int64_t first_run[kMC / kMR + 1], live[kMC / kMR];
  const int64_t strips = mc / kMR;
  int64_t count = 0;
  for (int64_t t = 0; t < strips; ++t) {
    first_run[t] = count;
    live[t] = std::max<int64_t>(0, std::min(kMR, real - t * kMR));
    for (int64_t r = 0; r < live[t];) {
      int64_t len = 1;
      while (r + len < live[t] && rows[t * kMR + r + len] == rows[t * kMR + r] + len) ++len;
      runs[count++] = Run{r, len};
      r += len;
    }
  }
  first_run[strips] = count;
  // A strip whose 12 rows are one run: one copy of 12 floats a column, no run loop or fill (the
  // demo MLP's weight gradient, 128x32 @ 32x64: 139 -> 127 thousand instructions a call, 8.2-8.7 ->
  // 7.5-7.7 us in a loop).
  bool whole[kMC / kMR];
  for (int64_t t = 0; t < strips; ++t) whole[t] = live[t] == kMR && first_run[t + 1] - first_run[t] == 1;
  const bool ask_ahead = real * kc * static_cast<int64_t>(sizeof(float)) > kNearBytes;
  for (int64_t p = 0; p < kc; ++p) {
    const float* col = base + P.a.cols[p0 + p];
    if (ask_ahead && p + kPrefetchAhead < kc) {  // each run's first and last line of the column kPrefetchAhead on
      const float* ahead = base + P.a.cols[p0 + p + kPrefetchAhead];
      for (int64_t t = 0; t < strips; ++t) {
        for (int64_t j = first_run[t]; j < first_run[t + 1]; ++j) {
          const float* run = ahead + rows[t * kMR + runs[j].row];
          _mm_prefetch(reinterpret_cast<const char*>(run), _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(run + runs[j].len - 1), _MM_HINT_T0);
        }
      }
    }
    for (int64_t t = 0; t < strips; ++t) {
      float* out = dst + t * kMR * kc + p * kMR;
      if (whole[t]) {
        copy_floats(col + rows[t * kMR], kMR, out);  // a constant length: the 8 + 4 float copy alone
        continue;
      }
      for (int64_t j = first_run[t]; j < first_run[t + 1]; ++j) {
        copy_floats(col + rows[t * kMR + runs[j].row], runs[j].len, out + runs[j].row);
      }
      std::fill(out + live[t], out + kMR, 0.f);
    }
  }
}

// C rows [i0, i0 + mr) x columns of panel jp (+)= alpha * acc.
void write_c(const Problem& P, const Call& X, int64_t bi, int64_t i0, int64_t mr, int64_t jp, const float* acc,
             bool add) {
  float* base = X.c + P.c.batch[bi];
  const int64_t j0 = jp * kNR, nr = std::min(kNR, P.n - j0);
  const __m256 alpha = _mm256_set1_ps(X.alpha);
  const bool bias = !add && X.bias != nullptr;  // the first pass adds beta * bias[j]
  if (P.c_direct[jp]) {
    __m256 bias0 = _mm256_setzero_ps(), bias1 = bias0;
    if (bias) {
      const __m256 beta = _mm256_set1_ps(X.beta);
      bias0 = _mm256_mul_ps(beta, _mm256_loadu_ps(X.bias + j0));
      bias1 = _mm256_mul_ps(beta, _mm256_loadu_ps(X.bias + j0 + 8));
    }
    for (int64_t r = 0; r < mr; ++r) {
      float* out = base + P.c.rows[i0 + r] + P.c.cols[j0];
      __m256 v0 = _mm256_mul_ps(alpha, _mm256_loadu_ps(acc + r * kNR));
      __m256 v1 = _mm256_mul_ps(alpha, _mm256_loadu_ps(acc + r * kNR + 8));
      if (add) v0 = _mm256_add_ps(_mm256_loadu_ps(out), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(out + 8), v1);
      if (bias) v0 = _mm256_add_ps(bias0, v0), v1 = _mm256_add_ps(bias1, v1);
      _mm256_storeu_ps(out, v0);
      _mm256_storeu_ps(out + 8, v1);
    }
    return;
  }
  for (int64_t r = 0; r < mr; ++r) {
    float* row = base + P.c.rows[i0 + r];
    for (int64_t q = 0; q < nr; ++q) {
      float& out = row[P.c.cols[j0 + q]];
      const float v = X.alpha * acc[r * kNR + q];
      out = add ? out + v : bias ? X.beta * X.bias[j0 + q] + v : v;
    }
  }
}

// Panel jp's rows [p0, p0 + kc) of B: where they lie (a direct panel), packed by this task into
// `bpack` ([kc][16]), or packed beforehand; and their row step.
std::pair<const float*, int64_t> b_rows(const Problem& P, const Call& X, int64_t bi, int64_t jp, int64_t p0,
                                        int64_t kc, float* bpack) {
  if (P.b_panel[jp] >= 0) return {X.b + P.b.batch[bi] + P.b_panel[jp] + p0 * P.ldb, P.ldb};
  if (X.pack_b_in_task) {
    pack_b(P, X, bi, jp, p0, kc, bpack);
    return {bpack, kNR};
  }
  return {X.packed_b + ((bi * P.panels + jp) * P.k + p0) * kNR, kNR};
}

// C's rows [i0, i0 + mc) and panels [jp0, jp1) of batch entry bi, kKC of depth a pass. On AVX-512
// the panels go in pairs (kernel_12x32_avx512), both direct or both packed, any other alone;
// `bpack` holds two panels.
void run_task(const Problem& P, const Call& X, int64_t bi, int64_t i0, int64_t mc, int64_t jp0, int64_t jp1,
              float* apack, float* bpack) {
  const int64_t mc_strips = (mc + kMR - 1) / kMR * kMR;
  alignas(64) float acc[2 * kMR * kNR];
  for (int64_t p0 = 0; p0 < P.k; p0 += kKC) {
    const int64_t kc = std::min(kKC, P.k - p0);
    pack_a(P, X, bi, i0, mc_strips, p0, kc, apack);
    const bool add = X.accumulate || p0 > 0;
    for (int64_t jp = jp0; jp < jp1;) {
      // A pair: both panels direct (one row step) or both packed.
      const bool pair = X.avx512 && jp + 1 < jp1 && (P.b_panel[jp] >= 0) == (P.b_panel[jp + 1] >= 0);
      const auto [b, ldb] = b_rows(P, X, bi, jp, p0, kc, bpack);
      const float* next = pair ? b_rows(P, X, bi, jp + 1, p0, kc, bpack + kKC * kNR).first : nullptr;
      // Both panels' columns contiguous in C and whole: written from the kernel's registers.
      const bool direct_out = pair && P.c_direct[jp] && P.c_direct[jp + 1];
      for (int64_t s = 0; s < mc; s += kMR) {
        const float* strip = apack + s * (P.a_strips_by_row ? kKC : kc);
        const int64_t rows = std::min(kMR, mc - s);
        if (direct_out) {
          BlockOut o{{}, X.alpha, add, X.bias && !add ? X.bias + jp * kNR : nullptr, X.beta};
          float* c_base = X.c + P.c.batch[bi];
          for (int64_t q = 0; q < kMR; ++q) {
            const bool real = q < rows;
            o.run[q][0] = real ? c_base + P.c.rows[i0 + s + q] + P.c.cols[jp * kNR] : nullptr;
            o.run[q][1] = real ? c_base + P.c.rows[i0 + s + q] + P.c.cols[(jp + 1) * kNR] : nullptr;
          }
          P.a_strips_by_row ? kernel_12x32_avx512<1>(kc, strip, b, next, ldb, acc, &o)
                            : kernel_12x32_avx512<kMR>(kc, strip, b, next, ldb, acc, &o);
          continue;
        } else if (pair) {
          P.a_strips_by_row ? kernel_12x32_avx512<1>(kc, strip, b, next, ldb, acc)
                            : kernel_12x32_avx512<kMR>(kc, strip, b, next, ldb, acc);
          write_c(P, X, bi, i0 + s, rows, jp + 1, acc + kMR * kNR, add);
        } else if (X.avx512) {
          P.a_strips_by_row ? kernel_12x16_avx512<1>(kc, strip, b, ldb, acc)
                            : kernel_12x16_avx512<kMR>(kc, strip, b, ldb, acc);
        } else if (P.a_strips_by_row) {
          kernel_6x16<1>(kc, strip, b, ldb, acc);
          if (rows > 6) kernel_6x16<1>(kc, strip + 6 * kKC, b, ldb, acc + 6 * kNR);
        } else {
          kernel_6x16<kMR>(kc, strip, b, ldb, acc);
          if (rows > 6) kernel_6x16<kMR>(kc, strip + 6, b, ldb, acc + 6 * kNR);
        }
        write_c(P, X, bi, i0 + s, rows, jp, acc, add);
      }
      jp += pair ? 2 : 1;
    }
  }
}

// A B shared by every batch entry (its batch dims broadcast: linear on a batch of matrices
// that does not fold into one) makes one GEMM of batch * m rows: A's and C's rows are
// enumerated across the batch, so B is packed once and the row blocks are full.
void fold_batch(Problem& P) {
  if (P.batch <= 1) return;
  for (int64_t bi = 1; bi < P.batch; ++bi)
    if (P.b.batch[bi] != P.b.batch[0]) return;
  for (Tables* t : {&P.a, &P.c}) {
    std::vector<int64_t> rows;
    rows.reserve(static_cast<size_t>(P.batch * P.m));
    for (int64_t bi = 0; bi < P.batch; ++bi)
      for (int64_t r = 0; r < P.m; ++r) rows.push_back(t->batch[bi] + t->rows[r]);
    t->rows = std::move(rows);
    t->batch.assign(1, 0);
  }
  P.b.batch.resize(1);
  P.m *= P.batch;
  P.batch = 1;
}

// The geometry's decisions that do not depend on the operands' data or the threads.
void prepare(Problem& P) {
  fold_batch(P);
  P.a_run.assign(P.k, 1);
  for (int64_t p = P.k - 1; p-- > 0;)
    if (P.a.cols[p + 1] == P.a.cols[p] + 1) P.a_run[p] = P.a_run[p + 1] + 1;
  P.a_strips_by_row = P.a_run[0] >= std::min<int64_t>(4, P.k);
  int64_t direct_ld = 0;
  const bool rows_even = evenly_spaced(P.b.rows.data(), static_cast<int64_t>(P.b.rows.size()), &direct_ld);
  P.ldb = direct_ld;
  for (int64_t jp = 0; jp < P.panels; ++jp) {
    // Rows far apart (a batch dim between them) alias in L1 and L2: such panels are packed.
    const bool direct = rows_even && direct_ld <= kMaxDirectLd && contiguous_panel(P.b.cols, jp * kNR);
    P.b_panel.push_back(direct ? P.b.rows[0] + P.b.cols[jp * kNR] : -1);
    if (!direct) P.to_pack.push_back(jp);
    P.c_direct.push_back(contiguous_panel(P.c.cols, jp * kNR));
  }
}

void run(const Problem& P, Call& X) {
  const std::vector<int64_t>& to_pack = P.to_pack;
  // Tasks: batch x row blocks x panel ranges, enough for every thread when there are few blocks.
  // Row blocks of whole strips of kMR rows (at most kMC rows), as many as a multiple of the threads
  // when there are few tasks, their strips spread evenly (sizes differing by one strip at most),
  // so that every thread gets the same work: 1024 rows in 8 blocks of 10-11 strips, where blocks of
  // 11 left the last one 9 (a thread idle 5% of a 1024x256 @ 256x1024 product).
  // Small problems run on one thread: there, more tasks than blocks would only pack A again.
  const int64_t flops = 2 * P.batch * P.m * P.n * P.k;
  const bool single = flops < (int64_t{1} << 22);
  const int64_t threads = single ? 1 : at::get_num_threads();
  int64_t blocks = (P.m + kMC - 1) / kMC;
  if (P.batch * blocks % threads != 0 && P.batch * blocks < 8 * threads && P.m >= threads * kMR)
    blocks = (blocks + threads - 1) / threads * threads;
  const int64_t strips = (P.m + kMR - 1) / kMR;
  blocks = std::min(blocks, strips);
  int64_t split =
      single ? 1 : std::clamp<int64_t>((2 * threads + P.batch * blocks - 1) / (P.batch * blocks), 1, P.panels);
  if (!single && P.batch == 1 && blocks == threads && threads > 1 && P.m <= kMC) {
    // One block a thread, where all the rows fit one block: if the strips do not split evenly over
    // the threads and the panels split more evenly, every thread takes all the rows and its share
    // of the panels instead (each packs A): 128x256 @ 256x256 at 2 threads is 6 strips against 5
    // by rows, 8 panels each by panels. Balance: the mean share over the largest.
    const auto balance = [&](int64_t units) {
      return static_cast<double>(units) / static_cast<double>(threads * ((units + threads - 1) / threads));
    };
    if (balance(P.panels) > balance(strips) + 0.05) {
      blocks = 1;
      split = std::min(threads, P.panels);
    }
  }
  const auto block_row = [&](int64_t b) { return std::min(P.m, b * strips / blocks * kMR); };
  const int64_t per = (P.panels + split - 1) / split;
  const int64_t tasks = P.batch * blocks * split;
  X.pack_b_in_task = blocks == 1;  // no two tasks read the same panel of one batch entry
  if (!to_pack.empty() && !X.pack_b_in_task) {
    // The calling thread's buffer, kept from call to call: a fresh one of a few MiB costs its page
    // faults on every call (one grown past 16 MiB is given back at the next call that needs less).
    thread_local std::vector<float> packed;
    const size_t floats = static_cast<size_t>(P.batch * P.panels * P.k * kNR);
    if (packed.size() > (size_t{4} << 20) && floats <= (size_t{4} << 20)) std::vector<float>().swap(packed);
    if (packed.size() < floats) packed.resize(floats);
    X.packed_b = packed.data();
    const int64_t jobs = P.batch * static_cast<int64_t>(to_pack.size());
    at::parallel_for(0, jobs, std::max<int64_t>(1, 4096 / std::max<int64_t>(P.k, 1)), [&](int64_t b0, int64_t b1) {
      for (int64_t t = b0; t < b1; ++t) {
        const int64_t bi = t / to_pack.size(), jp = to_pack[t % to_pack.size()];
        pack_b(P, X, bi, jp, 0, P.k, X.packed_b + (bi * P.panels + jp) * P.k * kNR);
      }
    });
  }
  const int64_t grain = single ? tasks : 1;
  at::parallel_for(0, tasks, grain, [&](int64_t t0, int64_t t1) {
    // Each thread's packing buffers, kept across calls (pack_a and pack_b write every float they
    // read back): a small GEMM does not clear 150 KB each call.
    thread_local std::vector<float> apack(static_cast<size_t>(kMC * kKC)), bpack(static_cast<size_t>(2 * kKC * kNR));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / (blocks * split), rest = t % (blocks * split);
      const int64_t block = rest / split, i0 = block_row(block), jp0 = (rest % split) * per;
      const int64_t jp1 = std::min(P.panels, jp0 + per);
      if (jp0 < jp1) run_task(P, X, bi, i0, block_row(block + 1) - i0, jp0, jp1, apack.data(), bpack.data());
    }
  });
}

#pragma GCC pop_options

std::atomic<int> g_avx512{-1};  // whether tile_gemm runs kernel_12x16_avx512; -1: the best one

}  // namespace

bool tile_gemm_available() {
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return available;
}

const std::vector<std::string>& tile_gemm_kernels() {
  static const std::vector<std::string> kernels = [] {
    std::vector<std::string> found;
    if (tile_gemm_available() && __builtin_cpu_supports("avx512f")) found.push_back("avx512");
    if (tile_gemm_available()) found.push_back("avx2");
    return found;
  }();
  return kernels;
}

// Whether a g_avx512 setting runs the AVX-512 kernel (-1: the best kernel this CPU runs).
static bool runs_avx512(int setting) {
  const auto& kernels = tile_gemm_kernels();
  return setting < 0 ? !kernels.empty() && kernels.front() == "avx512" : setting == 1;
}

std::string tile_gemm_set_kernel(const std::string& kernel) {
  const auto& kernels = tile_gemm_kernels();
  TORCH_CHECK_VALUE(std::find(kernels.begin(), kernels.end(), kernel) != kernels.end(), "tile GEMM kernel ",
                    kernel, " is not one this CPU runs (", c10::Join(", ", kernels), ")");
  return runs_avx512(g_avx512.exchange(kernel == "avx512")) ? "avx512" : "avx2";
}

struct TileGemmPlan {
  Problem problem;
  bool empty = false;  // no batch entry, row or column: nothing to write
  std::vector<int64_t> sizes[3], strides[3];  // C's, A's and B's views
};

std::shared_ptr<const TileGemmPlan> plan_tile_gemm(const GemmOperand& c, const GemmOperand& a, const GemmOperand& b,
                                                   int64_t m, int64_t n, int64_t k) {
  TORCH_CHECK(tile_gemm_available(), "tile_gemm needs a CPU with AVX2 and FMA");
  TORCH_CHECK_VALUE(m >= 0 && n >= 0 && k >= 0, "tile_gemm: negative size m=", m, " n=", n, " k=", k);
  const int64_t batch = group_extent(c);
  TORCH_CHECK_VALUE(group_extent(a) == batch && group_extent(b) == batch, "tile_gemm: batch sizes differ: C ",
                    batch, ", A ", group_extent(a), ", B ", group_extent(b));
  auto plan = std::make_shared<TileGemmPlan>(TileGemmPlan{
      Problem{tables(c, "C", batch, m, n), tables(a, "A", batch, m, k), tables(b, "B", batch, k, n), batch, m, n,
              k, (n + kNR - 1) / kNR, {}, 0, {}, {}, {}},
      batch == 0 || m == 0 || n == 0, {}, {}});
  const GemmOperand* views[3] = {&c, &a, &b};
  for (int i = 0; i < 3; ++i) {
    plan->sizes[i] = views[i]->view.sizes().vec();
    plan->strides[i] = views[i]->view.strides().vec();
  }
  if (plan->empty) return plan;
  TORCH_CHECK_VALUE(k > 0, "tile_gemm: k must be positive (an empty product is a fill)");
  prepare(plan->problem);
  return plan;
}

void run_tile_gemm(const TileGemmPlan& plan, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                   double alpha, bool accumulate, const std::optional<at::Tensor>& bias, double beta) {
  const at::Tensor* views[3] = {&c, &a, &b};
  const char* names[3] = {"C", "A", "B"};
  for (int i = 0; i < 3; ++i) {
    const at::Tensor& v = *views[i];
    TORCH_CHECK_VALUE(v.device().is_cpu() && v.scalar_type() == at::kFloat, names[i],
                      ": expected a float32 CPU view, got ", v.scalar_type(), " on ", v.device());
    TORCH_CHECK_VALUE(v.sizes() == c10::IntArrayRef(plan.sizes[i]) && v.strides() == c10::IntArrayRef(plan.strides[i]),
                      names[i], ": the plan is for a view of sizes ", c10::IntArrayRef(plan.sizes[i]), " and strides ",
                      c10::IntArrayRef(plan.strides[i]),
                      ", got ", v.sizes(), " and ", v.strides());
  }
  const Problem& P = plan.problem;
  Call X{c.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>(), static_cast<float>(alpha), accumulate,
         nullptr, static_cast<float>(beta)};
  if (bias) {
    TORCH_CHECK_VALUE(bias->device().is_cpu() && bias->scalar_type() == at::kFloat && bias->dim() == 1 &&
                          bias->is_contiguous() && bias->numel() >= P.n,
                      "bias: expected a contiguous float32 CPU vector of at least ", P.n, " elements, got ",
                      bias->sizes(), " ", bias->scalar_type());
    TORCH_CHECK_VALUE(!accumulate, "bias: only without accumulate (C starts from beta * bias)");
    X.bias = bias->data_ptr<float>();
  }
  if (plan.empty) return;
  X.avx512 = runs_avx512(g_avx512.load(std::memory_order_relaxed));
  run(P, X);
}

void tile_gemm(const GemmOperand& c, const GemmOperand& a, const GemmOperand& b, int64_t m, int64_t n, int64_t k,
               double alpha, bool accumulate, const std::optional<at::Tensor>& bias, double beta) {
  run_tile_gemm(*plan_tile_gemm(c, a, b, m, n, k), c.view, a.view, b.view, alpha, accumulate, bias, beta);
}

}  // namespace torch_layouts
