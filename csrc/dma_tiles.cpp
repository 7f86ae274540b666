#include "dma_tiles.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <immintrin.h>
#endif

namespace torch_layouts {
namespace {

template <typename E>
inline E load(const char* p) {
  E v;
  std::memcpy(&v, p, sizeof(E));
  return v;
}

template <typename E>
inline void store(char* p, E v) {
  std::memcpy(p, &v, sizeof(E));
}

// A 16-byte unit, copied by value.
struct U128 {
  char bytes[16];
};

// Unit by unit, the inner loop along whichever side is longer.
template <typename E>
void scalar_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  constexpr int64_t U = sizeof(E);
  if (na >= nb) {
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t a = 0; a < na; ++a) store<E>(d + a * U + b * dst_b, load<E>(s + a * src_a + b * U));
  } else {
    for (int64_t a = 0; a < na; ++a)
      for (int64_t b = 0; b < nb; ++b) store<E>(d + a * U + b * dst_b, load<E>(s + a * src_a + b * U));
  }
}

template <typename E>
void strided_units(char* d, const char* s, int64_t n, int64_t dst_step, int64_t src_step) {
  for (int64_t i = 0; i < n; ++i) store<E>(d + i * dst_step, load<E>(s + i * src_step));
}

// A tile of whole-line units whose source is one dense block (rows adjacent) reads it in order
// and scatters whole lines to the destination; otherwise the writes run in order.
inline bool source_order(int64_t na, int64_t nb, int64_t src_a, int64_t dst_b, int64_t unit) {
  return unit % 64 == 0 && src_a == nb * unit && dst_b != na * unit;
}

// One unit of U bytes (U == 0: `unit` bytes) moved by memcpy.
template <int64_t U>
inline void memcpy_unit(char* d, const char* s, int64_t unit) {
  std::memcpy(d, s, U > 0 ? U : unit);
}

// n units, dst_step and src_step bytes apart, each moved by Move (always inlined, as wide_tile).
template <void (*Move)(char*, const char*, int64_t)>
[[gnu::always_inline]] inline void strided_moves(char* d, const char* s, int64_t n, int64_t dst_step,
                                                 int64_t src_step, int64_t unit) {
  for (int64_t i = 0; i < n; ++i) Move(d + i * dst_step, s + i * src_step, unit);
}

// Units of U bytes (U == 0: `unit` bytes), each moved by Move, in the order source_order says.
// Always inlined, so that it takes its caller's target (AVX moves inline into an AVX caller).
template <int64_t U, void (*Move)(char*, const char*, int64_t) = memcpy_unit<U>>
[[gnu::always_inline]] inline void wide_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a,
                                             int64_t dst_b, int64_t unit) {
  const int64_t u = U > 0 ? U : unit;
  if (na >= nb && !source_order(na, nb, src_a, dst_b, u)) {
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t a = 0; a < na; ++a) Move(d + a * u + b * dst_b, s + a * src_a + b * u, u);
  } else {
    for (int64_t a = 0; a < na; ++a)
      for (int64_t b = 0; b < nb; ++b) Move(d + a * u + b * dst_b, s + a * src_a + b * u, u);
  }
}

#if defined(__SSE2__)
// Non-temporal 16-byte stores of `bytes` (a multiple of 16) to a 16-byte aligned destination.
inline void stream16(char* d, const char* s, int64_t bytes) {
  for (int64_t k = 0; k < bytes; k += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k)));
}

// Streams a run of bytes: the 16-byte aligned middle non-temporally, the ragged ends plainly.
inline void stream_run(char* d, const char* s, int64_t bytes) {
  const int64_t head = std::min<int64_t>(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  const int64_t body = (bytes - head) / 16 * 16;
  stream16(d + head, s + head, body);
  std::memcpy(d + head + body, s + head + body, bytes - head - body);
}

inline __m128i ld(const char* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void st(char* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }

// 8x8 block of 2-byte units: src rows a (8 units along b each) become dst rows b.
inline void block8x8_u16(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m128i r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = ld(s + i * src_a);
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  // t0,t2 / t4,t6: columns 0-3 of rows 0-3 / 4-7; t1,t3 / t5,t7: columns 4-7.
  u[0] = _mm_unpacklo_epi32(t[0], t[2]);
  u[1] = _mm_unpackhi_epi32(t[0], t[2]);
  u[2] = _mm_unpacklo_epi32(t[1], t[3]);
  u[3] = _mm_unpackhi_epi32(t[1], t[3]);
  u[4] = _mm_unpacklo_epi32(t[4], t[6]);
  u[5] = _mm_unpackhi_epi32(t[4], t[6]);
  u[6] = _mm_unpacklo_epi32(t[5], t[7]);
  u[7] = _mm_unpackhi_epi32(t[5], t[7]);
  for (int i = 0; i < 4; ++i) {
    st(d + (2 * i) * dst_b, _mm_unpacklo_epi64(u[i], u[i + 4]));
    st(d + (2 * i + 1) * dst_b, _mm_unpackhi_epi64(u[i], u[i + 4]));
  }
}

// 4x4 block of 4-byte units.
inline void block4x4_u32(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  const __m128i r0 = ld(s), r1 = ld(s + src_a), r2 = ld(s + 2 * src_a), r3 = ld(s + 3 * src_a);
  const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpackhi_epi32(r0, r1);
  const __m128i t2 = _mm_unpacklo_epi32(r2, r3), t3 = _mm_unpackhi_epi32(r2, r3);
  st(d, _mm_unpacklo_epi64(t0, t2));
  st(d + dst_b, _mm_unpackhi_epi64(t0, t2));
  st(d + 2 * dst_b, _mm_unpacklo_epi64(t1, t3));
  st(d + 3 * dst_b, _mm_unpackhi_epi64(t1, t3));
}

// 2x2 block of 8-byte units.
inline void block2x2_u64(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  const __m128i r0 = ld(s), r1 = ld(s + src_a);
  st(d, _mm_unpacklo_epi64(r0, r1));
  st(d + dst_b, _mm_unpackhi_epi64(r0, r1));
}

// 4x4 block of 16-byte units: all sixteen loads, then the stores. Unit by unit, a load whose
// address lies a multiple of 4 KiB from a pending store waits for it (4K aliasing), and the tiles
// of 16-byte units (MACE images of float32) step 1 or 4 KiB on both sides.
inline void block4x4_u128(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m128i r[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) r[a][b] = ld(s + a * src_a + b * 16);
  for (int b = 0; b < 4; ++b)
    for (int a = 0; a < 4; ++a) st(d + a * 16 + b * dst_b, r[a][b]);
}

// AVX 256-bit shuffles move bits like the SSE2 ones; they are compiled for AVX and used only
// where the CPU reports it.
#define TL_AVX __attribute__((target("avx")))
const bool kAvx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();
TL_AVX inline void block4x4_u64_avx(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  const __m256d r0 = _mm256_loadu_pd(reinterpret_cast<const double*>(s));
  const __m256d r1 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + src_a));
  const __m256d r2 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + 2 * src_a));
  const __m256d r3 = _mm256_loadu_pd(reinterpret_cast<const double*>(s + 3 * src_a));
  const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1);
  const __m256d t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
  _mm256_storeu_pd(reinterpret_cast<double*>(d), _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(d + dst_b), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(d + 2 * dst_b), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(reinterpret_cast<double*>(d + 3 * dst_b), _mm256_permute2f128_pd(t1, t3, 0x31));
}

// Whole blocks of K x K units over [0, na) x [0, nb), the ragged edges unit by unit. Always
// inlined, so that it takes its caller's target (AVX blocks inline into an AVX caller).
template <typename E, int K, void (*Block)(char*, const char*, int64_t, int64_t)>
[[gnu::always_inline]] inline void blocked_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a,
                                                int64_t dst_b) {
  constexpr int64_t U = sizeof(E);
  const int64_t na_k = na - na % K, nb_k = nb - nb % K;
  for (int64_t a = 0; a < na_k; a += K)
    for (int64_t b = 0; b < nb_k; b += K) Block(d + a * U + b * dst_b, s + a * src_a + b * U, src_a, dst_b);
  if (nb_k < nb) scalar_tile<E>(d + nb_k * dst_b, s + nb_k * U, na_k, nb - nb_k, src_a, dst_b);
  if (na_k < na) scalar_tile<E>(d + na_k * U, s + na_k * src_a, na - na_k, nb, src_a, dst_b);
}

// 8x8 block of 4-byte units in AVX: rows a and a + 4 share a register (one per 128-bit lane), so
// that each lane transposes a 4x4 block and a register holds a whole destination row of 8 units.
TL_AVX inline void block8x8_u32_avx(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m256 t[8];
  for (int h = 0; h < 2; ++h)  // h: units 0-3 or 4-7 along b
    for (int a = 0; a < 4; ++a) {
      const float* lo = reinterpret_cast<const float*>(s + a * src_a + h * 16);
      const float* hi = reinterpret_cast<const float*>(s + (a + 4) * src_a + h * 16);
      t[4 * h + a] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
    }
  for (int h = 0; h < 2; ++h) {
    const __m256 x0 = _mm256_unpacklo_ps(t[4 * h], t[4 * h + 1]), x1 = _mm256_unpackhi_ps(t[4 * h], t[4 * h + 1]);
    const __m256 x2 = _mm256_unpacklo_ps(t[4 * h + 2], t[4 * h + 3]);
    const __m256 x3 = _mm256_unpackhi_ps(t[4 * h + 2], t[4 * h + 3]);
    float* out = reinterpret_cast<float*>(d + 4 * h * dst_b);
    const int64_t step = dst_b / 4;  // floats
    _mm256_storeu_ps(out, _mm256_shuffle_ps(x0, x2, 0x44));
    _mm256_storeu_ps(out + step, _mm256_shuffle_ps(x0, x2, 0xEE));
    _mm256_storeu_ps(out + 2 * step, _mm256_shuffle_ps(x1, x3, 0x44));
    _mm256_storeu_ps(out + 3 * step, _mm256_shuffle_ps(x1, x3, 0xEE));
  }
}

TL_AVX void blocked_tile_u32_avx(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  blocked_tile<uint32_t, 8, block8x8_u32_avx>(d, s, na, nb, src_a, dst_b);
}

// 16x16 block of 2-byte units in AVX2: rows a and a + 8 share a register, each lane transposing
// an 8x8 block as block8x8_u16 does; a register then holds a whole destination row of 16 units.
#define TL_AVX2 __attribute__((target("avx2")))
const bool kAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
TL_AVX2 inline void block16x16_u16_avx2(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  for (int h = 0; h < 2; ++h) {  // h: units 0-7 or 8-15 along b
    __m256i r[8], t[8], u[8];
    for (int a = 0; a < 8; ++a) {
      const __m128i lo = ld(s + a * src_a + h * 16), hi = ld(s + (a + 8) * src_a + h * 16);
      r[a] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    }
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    u[0] = _mm256_unpacklo_epi32(t[0], t[2]);
    u[1] = _mm256_unpackhi_epi32(t[0], t[2]);
    u[2] = _mm256_unpacklo_epi32(t[1], t[3]);
    u[3] = _mm256_unpackhi_epi32(t[1], t[3]);
    u[4] = _mm256_unpacklo_epi32(t[4], t[6]);
    u[5] = _mm256_unpackhi_epi32(t[4], t[6]);
    u[6] = _mm256_unpacklo_epi32(t[5], t[7]);
    u[7] = _mm256_unpackhi_epi32(t[5], t[7]);
    char* out = d + 8 * h * dst_b;
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (2 * i) * dst_b), _mm256_unpacklo_epi64(u[i], u[i + 4]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (2 * i + 1) * dst_b), _mm256_unpackhi_epi64(u[i], u[i + 4]));
    }
  }
}

TL_AVX2 void blocked_tile_u16_avx2(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  blocked_tile<uint16_t, 16, block16x16_u16_avx2>(d, s, na, nb, src_a, dst_b);
}

TL_AVX void blocked_tile_u64_avx(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  blocked_tile<uint64_t, 4, block4x4_u64_avx>(d, s, na, nb, src_a, dst_b);
}

// AVX-512 blocks of 64-byte rows: every source and destination line of a block is one whole
// load or store, read or written once. The 256-bit blocks above move half lines, so a source line
// serves two blocks; where source rows lie a multiple of 4 KiB apart (NCHW channels, the H2D of
// blocked-channel formats) its 16 or 32 rows share an L1 set of 8 ways and each half is read from
// L2 again (kCHW32 float16 H2D, 1 MiB, one thread: 65 -> 50 us).
#define TL_AVX512 __attribute__((target("avx512f,avx512bw")))
// GCC 12's AVX-512 headers fill unmasked lanes from a self-initialised "undefined" vector, which
// -Wuninitialized reports at every unpack and lane shuffle below.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
const bool kAvx512Blocks = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
}();
std::atomic<bool> g_avx512_blocks{kAvx512Blocks};

// The four registers' 128-bit lanes transposed: out[l] holds lane l of v[0], v[1], v[2], v[3].
TL_AVX512 inline void lanes4x4(const __m512i v[4], __m512i out[4]) {
  const __m512i p0 = _mm512_shuffle_i32x4(v[0], v[1], 0x44), p1 = _mm512_shuffle_i32x4(v[0], v[1], 0xEE);
  const __m512i q0 = _mm512_shuffle_i32x4(v[2], v[3], 0x44), q1 = _mm512_shuffle_i32x4(v[2], v[3], 0xEE);
  out[0] = _mm512_shuffle_i32x4(p0, q0, 0x88);
  out[1] = _mm512_shuffle_i32x4(p0, q0, 0xDD);
  out[2] = _mm512_shuffle_i32x4(p1, q1, 0x88);
  out[3] = _mm512_shuffle_i32x4(p1, q1, 0xDD);
}

TL_AVX512 inline __m512i ld512(const char* p) { return _mm512_loadu_si512(p); }
TL_AVX512 inline void st512(char* p, __m512i v) { _mm512_storeu_si512(p, v); }

// The destination rows of a block whose four row groups g left their C columns per lane in
// col[g][c] (lane l: column C l + c): column C l + c is lane l of col[0..3][c], one whole line.
template <int C>
TL_AVX512 inline void store_columns(char* d, int64_t dst_b, const __m512i (*col)[C]) {
  for (int c = 0; c < C; ++c) {
    const __m512i v[4] = {col[0][c], col[1][c], col[2][c], col[3][c]};
    __m512i out[4];
    lanes4x4(v, out);
    for (int l = 0; l < 4; ++l) st512(d + (C * l + c) * dst_b, out[l]);
  }
}

// Rows rows[0], rows[src_a], ... rows[7 * src_a] of 32 2-byte units (lane l: units 8l..8l+7),
// each lane's 8x8 block transposed as block8x8_u16 does: col[c] holds, in lane l, column 8l + c of
// the 8 rows.
TL_AVX512 inline void columns8_u16(const char* rows, int64_t src_a, __m512i col[8]) {
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    const __m512i x = ld512(rows + 2 * i * src_a), y = ld512(rows + (2 * i + 1) * src_a);
    t[2 * i] = _mm512_unpacklo_epi16(x, y);
    t[2 * i + 1] = _mm512_unpackhi_epi16(x, y);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3, 4-7
    u[4 * h] = _mm512_unpacklo_epi32(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi32(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    col[2 * i] = _mm512_unpacklo_epi64(u[i], u[i + 4]);
    col[2 * i + 1] = _mm512_unpackhi_epi64(u[i], u[i + 4]);
  }
}

// 32x32 2-byte units: group g (rows 8g..8g+7) leaves its columns in col[g]; column 8l + c gathers
// lane l of col[0..3][c].
TL_AVX512 inline void block32x32_u16(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m512i col[4][8];
  for (int g = 0; g < 4; ++g) columns8_u16(s + 8 * g * src_a, src_a, col[g]);
  store_columns<8>(d, dst_b, col);
}

// 16 rows of 32 2-byte units (whole lines) into 32 destination rows of 32 bytes: column 8l + c is
// lane l of col[0][c] then lane l of col[1][c]. Blocked-channel formats of 16 channels (kCHW16,
// nChw16c) read 16 far-apart rows (rows 128 KiB apart within a huge page share an L2 set). A D2D
// of 32 MiB into kCHW16 float16 with the tile rules, half lines -> this: 2.5-4.3 -> 1.1x memcpy in
// some processes, 0.77 -> 0.70 in others.
TL_AVX512 inline void block16x32_u16(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m512i col[2][8];
  for (int g = 0; g < 2; ++g) columns8_u16(s + 8 * g * src_a, src_a, col[g]);
  for (int c = 0; c < 8; ++c) {
    // lanes (0, 1) and (2, 3) of both groups, each pair's interleaved: [g0 l, g1 l, g0 l+1, g1 l+1]
    const __m512i p = _mm512_shuffle_i32x4(col[0][c], col[1][c], 0x44);
    const __m512i q = _mm512_shuffle_i32x4(col[0][c], col[1][c], 0xEE);
    const __m512i lo = _mm512_shuffle_i32x4(p, p, 0xD8), hi = _mm512_shuffle_i32x4(q, q, 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + c * dst_b), _mm512_castsi512_si256(lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (8 + c) * dst_b), _mm512_extracti64x4_epi64(lo, 1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (16 + c) * dst_b), _mm512_castsi512_si256(hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (24 + c) * dst_b), _mm512_extracti64x4_epi64(hi, 1));
  }
}

// 16x16 blocks of 4-byte units: each lane's 4x4 block as block4x4_u32 does, then the lanes.
TL_AVX512 inline void block16x16_u32(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m512i col[4][4];
  for (int g = 0; g < 4; ++g) {
    const char* rows = s + 4 * g * src_a;
    const __m512i r0 = ld512(rows), r1 = ld512(rows + src_a), r2 = ld512(rows + 2 * src_a);
    const __m512i r3 = ld512(rows + 3 * src_a);
    const __m512i t0 = _mm512_unpacklo_epi32(r0, r1), t1 = _mm512_unpackhi_epi32(r0, r1);
    const __m512i t2 = _mm512_unpacklo_epi32(r2, r3), t3 = _mm512_unpackhi_epi32(r2, r3);
    col[g][0] = _mm512_unpacklo_epi64(t0, t2);
    col[g][1] = _mm512_unpackhi_epi64(t0, t2);
    col[g][2] = _mm512_unpacklo_epi64(t1, t3);
    col[g][3] = _mm512_unpackhi_epi64(t1, t3);
  }
  store_columns<4>(d, dst_b, col);
}

// 8x8 blocks of 8-byte units: each lane's 2x2 block, then the lanes.
TL_AVX512 inline void block8x8_u64(char* d, const char* s, int64_t src_a, int64_t dst_b) {
  __m512i col[4][2];
  for (int g = 0; g < 4; ++g) {
    const __m512i r0 = ld512(s + 2 * g * src_a), r1 = ld512(s + (2 * g + 1) * src_a);
    col[g][0] = _mm512_unpacklo_epi64(r0, r1);
    col[g][1] = _mm512_unpackhi_epi64(r0, r1);
  }
  store_columns<2>(d, dst_b, col);
}

// `rows` rows of `bytes` (a multiple of 64) from the staging buffer (rows `row` bytes apart) to
// rows dst_b apart, in whole-line moves.
TL_AVX512 void staged_rows_avx512(char* d, const char* buf, int64_t rows, int64_t bytes, int64_t row, int64_t dst_b) {
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t k = 0; k < bytes; k += 64) st512(d + b * dst_b + k, _mm512_load_si512(buf + b * row + k));
}

// Whole KA x KB blocks (KB units: a 64-byte row) over [0, na) x [0, nb); returns the
// block-aligned extents, whose remaining strips the caller copies with narrower blocks.
template <typename E, int KA, int KB, void (*Block)(char*, const char*, int64_t, int64_t)>
[[gnu::always_inline]] inline std::pair<int64_t, int64_t> line_blocks(char* d, const char* s, int64_t na, int64_t nb,
                                                                      int64_t src_a, int64_t dst_b) {
  constexpr int64_t U = sizeof(E);
  const int64_t na_k = na - na % KA, nb_k = nb - nb % KB;
  for (int64_t a = 0; a < na_k; a += KA)
    for (int64_t b = 0; b < nb_k; b += KB) Block(d + a * U + b * dst_b, s + a * src_a + b * U, src_a, dst_b);
  return {na_k, nb_k};
}

// 32-row bands in 32x32 blocks, then a band of 16 rows in 16x32 blocks where one remains.
TL_AVX512 std::pair<int64_t, int64_t> line_blocks_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a,
                                                      int64_t dst_b) {
  const auto [na_k, nb_k] = line_blocks<uint16_t, 32, 32, block32x32_u16>(d, s, na, nb, src_a, dst_b);
  if (na - na_k < 16) return {na_k, nb_k};
  line_blocks<uint16_t, 16, 32, block16x32_u16>(d + na_k * 2, s + na_k * src_a, 16, nb, src_a, dst_b);
  return {na_k + 16, nb_k};
}
TL_AVX512 std::pair<int64_t, int64_t> line_blocks_u32(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a,
                                                      int64_t dst_b) {
  return line_blocks<uint32_t, 16, 16, block16x16_u32>(d, s, na, nb, src_a, dst_b);
}
TL_AVX512 std::pair<int64_t, int64_t> line_blocks_u64(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a,
                                                      int64_t dst_b) {
  return line_blocks<uint64_t, 8, 8, block8x8_u64>(d, s, na, nb, src_a, dst_b);
}

// Interleaves of 2 or 4 rows of 2-byte units into a dense destination (kCHW2, kCHW4 H2D), 32 units
// of each row a step, and their inverses (D2H): 4 rows take their lanes transposed and one word
// permute per register; 2 rows one two-register word permute per output. Each returns the units
// (b for interleaves, a for the inverses) done, a multiple of 32.
// Permute indices of a register's elements of type E: table[i] = f(i) (the 32 words of a word
// permute, the 16 dwords of a dword permute).
template <typename E>
struct LaneIndex {
  alignas(64) E at[64 / sizeof(E)];
};
template <typename E, typename F>
constexpr LaneIndex<E> lane_index(F f) {
  LaneIndex<E> w{};
  for (int i = 0; i < static_cast<int>(64 / sizeof(E)); ++i) w.at[i] = static_cast<E>(f(i));
  return w;
}
using WordIndex = LaneIndex<int16_t>;
// lane: 8 units of 4 rows
constexpr WordIndex kInterleave4 = lane_index<int16_t>([](int i) { return (i % 4) * 8 + i / 4; });
constexpr WordIndex kInterleave2[2] = {lane_index<int16_t>([](int i) { return (i % 2) * 32 + i / 2; }),
                                       lane_index<int16_t>([](int i) { return (i % 2) * 32 + i / 2 + 16; })};
// lane c: unit c of 8
constexpr WordIndex kDeinterleave4 = lane_index<int16_t>([](int i) { return (i % 8) * 4 + i / 8; });
constexpr WordIndex kDeinterleave2[2] = {lane_index<int16_t>([](int i) { return 2 * i; }),
                                         lane_index<int16_t>([](int i) { return 2 * i + 1; })};

TL_AVX512 int64_t interleave_u16_avx512(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a) {
  const __m512i i0 = _mm512_load_si512(na == 4 ? kInterleave4.at : kInterleave2[0].at);
  const __m512i i1 = _mm512_load_si512(kInterleave2[1].at);
  const int64_t nb32 = nb - nb % 32;
  for (int64_t b = 0; b < nb32; b += 32) {
    const char* p = s + 2 * b;
    char* q = d + 2 * na * b;
    if (na == 2) {
      const __m512i r0 = ld512(p), r1 = ld512(p + src_a);
      st512(q, _mm512_permutex2var_epi16(r0, i0, r1));
      st512(q + 64, _mm512_permutex2var_epi16(r0, i1, r1));
      continue;
    }
    const __m512i r[4] = {ld512(p), ld512(p + src_a), ld512(p + 2 * src_a), ld512(p + 3 * src_a)};
    __m512i lanes[4];
    lanes4x4(r, lanes);
    for (int l = 0; l < 4; ++l) st512(q + 64 * l, _mm512_permutexvar_epi16(i0, lanes[l]));
  }
  return nb32;
}

TL_AVX512 int64_t deinterleave_u16_avx512(char* d, const char* s, int64_t na, int64_t nb, int64_t dst_b) {
  const __m512i i0 = _mm512_load_si512(nb == 4 ? kDeinterleave4.at : kDeinterleave2[0].at);
  const __m512i i1 = _mm512_load_si512(kDeinterleave2[1].at);
  const int64_t na32 = na - na % 32;
  for (int64_t a = 0; a < na32; a += 32) {
    const char* p = s + 2 * nb * a;
    char* q = d + 2 * a;
    if (nb == 2) {
      const __m512i v0 = ld512(p), v1 = ld512(p + 64);
      st512(q, _mm512_permutex2var_epi16(v0, i0, v1));
      st512(q + dst_b, _mm512_permutex2var_epi16(v0, i1, v1));
      continue;
    }
    __m512i v[4], rows[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm512_permutexvar_epi16(i0, ld512(p + 64 * k));
    lanes4x4(v, rows);
    for (int c = 0; c < 4; ++c) st512(q + c * dst_b, rows[c]);
  }
  return na32;
}

// Records of 4 4-byte units (a dense source, src_a == 16) split into 4 rows, 16 records a step:
// each register's four records grouped by unit (lane c: unit c), then the lanes transposed.
// Returns the records done, a multiple of 16.
constexpr LaneIndex<int32_t> kDeinterleave4Dwords = lane_index<int32_t>([](int i) { return (i % 4) * 4 + i / 4; });

// The inverse: 4 rows (src_a apart) of 4-byte units interleaved into records of 4 (dst_b == 16),
// 16 units of each row a step (the lane transpose, then the same permute: it is its own inverse).
TL_AVX512 int64_t interleave4_u32_avx512(char* d, const char* s, int64_t nb, int64_t src_a) {
  const __m512i index = _mm512_load_si512(kDeinterleave4Dwords.at);
  const int64_t nb16 = nb - nb % 16;
  for (int64_t b = 0; b < nb16; b += 16) {
    const __m512i r[4] = {ld512(s + 4 * b), ld512(s + 4 * b + src_a), ld512(s + 4 * b + 2 * src_a),
                          ld512(s + 4 * b + 3 * src_a)};
    __m512i lanes[4];
    lanes4x4(r, lanes);
    for (int l = 0; l < 4; ++l) st512(d + 16 * b + 64 * l, _mm512_permutexvar_epi32(index, lanes[l]));
  }
  return nb16;
}

TL_AVX512 int64_t deinterleave4_u32_avx512(char* d, const char* s, int64_t na, int64_t dst_b) {
  const __m512i index = _mm512_load_si512(kDeinterleave4Dwords.at);
  const int64_t na16 = na - na % 16;
  for (int64_t a = 0; a < na16; a += 16) {
    __m512i v[4], rows[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm512_permutexvar_epi32(index, ld512(s + 16 * a + 64 * k));
    lanes4x4(v, rows);
    for (int c = 0; c < 4; ++c) st512(d + 4 * a + c * dst_b, rows[c]);
  }
  return na16;
}

#pragma GCC diagnostic pop

// Whether copy_tile takes a tile of na x nb units of `unit` bytes in line blocks (of 2-byte units,
// `half`: also 16 rows, whose destination rows are half lines).
inline bool in_line_blocks(int64_t na, int64_t nb, int64_t unit, bool half = false) {
  const int64_t k = 64 / unit;
  return (unit == 2 || unit == 4 || unit == 8) && na >= (half && unit == 2 ? 16 : k) && nb >= k &&
         g_avx512_blocks.load(std::memory_order_relaxed);
}

// A tile in whole line blocks, the strips they leave (the bottom rows, then the right columns
// of the blocked rows) by `rest`. False where this CPU (or the setting) has no AVX-512 blocks
// or the tile is smaller than one block.
template <int64_t U>
bool tile_in_lines(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b,
                   void (*rest)(char*, const char*, int64_t, int64_t, int64_t, int64_t)) {
  if (!in_line_blocks(na, nb, U, true)) return false;
  const auto [na_k, nb_k] = U == 2 ? line_blocks_u16(d, s, na, nb, src_a, dst_b)
                            : U == 4 ? line_blocks_u32(d, s, na, nb, src_a, dst_b)
                                     : line_blocks_u64(d, s, na, nb, src_a, dst_b);
  if (nb_k < nb) rest(d + nb_k * dst_b, s + nb_k * U, na_k, nb - nb_k, src_a, dst_b);
  if (na_k < na) rest(d + na_k * U, s + na_k * src_a, na - na_k, nb, src_a, dst_b);
  return true;
}

// na = 2 or 4 source rows interleaved into a dense destination (dst_b == na * unit).
void interleave_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a) {
  const int64_t nb8 = nb - nb % 8;
  const bool lines = g_avx512_blocks.load(std::memory_order_relaxed);
  const int64_t wide = lines ? interleave_u16_avx512(d, s, na, nb, src_a) : 0;
  for (int64_t b = wide; b < nb8; b += 8) {
    const char* p = s + 2 * b;
    if (na == 2) {
      const __m128i r0 = ld(p), r1 = ld(p + src_a);
      st(d + 4 * b, _mm_unpacklo_epi16(r0, r1));
      st(d + 4 * b + 16, _mm_unpackhi_epi16(r0, r1));
    } else {
      const __m128i r0 = ld(p), r1 = ld(p + src_a), r2 = ld(p + 2 * src_a), r3 = ld(p + 3 * src_a);
      const __m128i t0 = _mm_unpacklo_epi16(r0, r1), t1 = _mm_unpackhi_epi16(r0, r1);
      const __m128i t2 = _mm_unpacklo_epi16(r2, r3), t3 = _mm_unpackhi_epi16(r2, r3);
      st(d + 8 * b, _mm_unpacklo_epi32(t0, t2));
      st(d + 8 * b + 16, _mm_unpackhi_epi32(t0, t2));
      st(d + 8 * b + 32, _mm_unpacklo_epi32(t1, t3));
      st(d + 8 * b + 48, _mm_unpackhi_epi32(t1, t3));
    }
  }
  if (nb8 < nb) scalar_tile<uint16_t>(d + nb8 * 2 * na, s + nb8 * 2, na, nb - nb8, src_a, 2 * na);
}

// The inverse: a dense source (src_a == nb * unit) of nb = 2 or 4 units split into nb rows.
void deinterleave_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t dst_b) {
  const int64_t na8 = na - na % 8;
  const bool lines = g_avx512_blocks.load(std::memory_order_relaxed);
  const int64_t wide = lines ? deinterleave_u16_avx512(d, s, na, nb, dst_b) : 0;
  for (int64_t a = wide; a < na8; a += 8) {
    const char* p = s + 2 * nb * a;
    char* q = d + 2 * a;
    if (nb == 2) {  // [e0 o0 e1 o1 ...]: evens to row 0, odds to row 1
      __m128i x = ld(p), y = ld(p + 16);
      x = _mm_shuffle_epi32(_mm_shufflehi_epi16(_mm_shufflelo_epi16(x, 0xD8), 0xD8), 0xD8);
      y = _mm_shuffle_epi32(_mm_shufflehi_epi16(_mm_shufflelo_epi16(y, 0xD8), 0xD8), 0xD8);
      st(q, _mm_unpacklo_epi64(x, y));
      st(q + dst_b, _mm_unpackhi_epi64(x, y));
    } else {
      const __m128i v0 = ld(p), v1 = ld(p + 16), v2 = ld(p + 32), v3 = ld(p + 48);
      const __m128i t0 = _mm_unpacklo_epi16(v0, v1), t1 = _mm_unpackhi_epi16(v0, v1);
      const __m128i t2 = _mm_unpacklo_epi16(v2, v3), t3 = _mm_unpackhi_epi16(v2, v3);
      const __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
      const __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
      st(q, _mm_unpacklo_epi64(u0, u2));
      st(q + dst_b, _mm_unpackhi_epi64(u0, u2));
      st(q + 2 * dst_b, _mm_unpacklo_epi64(u1, u3));
      st(q + 3 * dst_b, _mm_unpackhi_epi64(u1, u3));
    }
  }
  if (na8 < na) scalar_tile<uint16_t>(d + na8 * 2, s + na8 * 2 * nb, na - na8, nb, 2 * nb, dst_b);
}

// Two 4-byte rows interleaved into a dense destination, and the inverse.
void interleave2_u32(char* d, const char* s, int64_t nb, int64_t src_a) {
  const int64_t nb4 = nb - nb % 4;
  for (int64_t b = 0; b < nb4; b += 4) {
    const __m128i r0 = ld(s + 4 * b), r1 = ld(s + 4 * b + src_a);
    st(d + 8 * b, _mm_unpacklo_epi32(r0, r1));
    st(d + 8 * b + 16, _mm_unpackhi_epi32(r0, r1));
  }
  if (nb4 < nb) scalar_tile<uint32_t>(d + nb4 * 8, s + nb4 * 4, 2, nb - nb4, src_a, 8);
}

// The second units go to `odd`, or nowhere where it is null: every other unit of s (a clone of
// x[..., ::2] in float32), whose last second unit may lie past the buffer: the tail takes the
// last pair then.
void deinterleave2_u32(char* d, char* odd, const char* s, int64_t na) {
  const int64_t pairs = odd != nullptr ? na : std::max<int64_t>(na - 1, 0);
  const int64_t na4 = pairs - pairs % 4;
  for (int64_t a = 0; a < na4; a += 4) {
    const __m128 x = _mm_castsi128_ps(ld(s + 8 * a)), y = _mm_castsi128_ps(ld(s + 8 * a + 16));
    st(d + 4 * a, _mm_castps_si128(_mm_shuffle_ps(x, y, 0x88)));  // shuffles move bits, NaNs intact
    if (odd != nullptr) st(odd + 4 * a, _mm_castps_si128(_mm_shuffle_ps(x, y, 0xDD)));
  }
  if (na4 == na) return;
  if (odd != nullptr) return scalar_tile<uint32_t>(d + na4 * 4, s + na4 * 8, na - na4, 2, 8, odd - d);
  strided_units<uint32_t>(d + na4 * 4, s + na4 * 8, na - na4, 4, 8);
}

// Tiles narrower than a line block (and the strips line blocks leave).
void half_line_tile_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (kAvx2 && na >= 16 && nb >= 16) return blocked_tile_u16_avx2(d, s, na, nb, src_a, dst_b);
  if (na >= 8 && nb >= 8) return blocked_tile<uint16_t, 8, block8x8_u16>(d, s, na, nb, src_a, dst_b);
  scalar_tile<uint16_t>(d, s, na, nb, src_a, dst_b);
}

void half_line_tile_u32(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (kAvx && na >= 8 && nb >= 8) return blocked_tile_u32_avx(d, s, na, nb, src_a, dst_b);
  if (na >= 4 && nb >= 4) return blocked_tile<uint32_t, 4, block4x4_u32>(d, s, na, nb, src_a, dst_b);
  scalar_tile<uint32_t>(d, s, na, nb, src_a, dst_b);
}

void half_line_tile_u64(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (kAvx && na >= 4 && nb >= 4) return blocked_tile_u64_avx(d, s, na, nb, src_a, dst_b);
  if (na >= 2 && nb >= 2) return blocked_tile<uint64_t, 2, block2x2_u64>(d, s, na, nb, src_a, dst_b);
  scalar_tile<uint64_t>(d, s, na, nb, src_a, dst_b);
}

void tile_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if ((na == 2 || na == 4) && dst_b == 2 * na) return interleave_u16(d, s, na, nb, src_a);
  if ((nb == 2 || nb == 4) && src_a == 2 * nb) return deinterleave_u16(d, s, na, nb, dst_b);
  if (tile_in_lines<2>(d, s, na, nb, src_a, dst_b, half_line_tile_u16)) return;
  half_line_tile_u16(d, s, na, nb, src_a, dst_b);
}

void tile_u32(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (na == 2 && dst_b == 8) return interleave2_u32(d, s, nb, src_a);
  if (nb == 2 && src_a == 8) return deinterleave2_u32(d, d + dst_b, s, na);
  const bool lines = g_avx512_blocks.load(std::memory_order_relaxed);
  if (na == 4 && dst_b == 16 && nb >= 16 && lines) {  // (MACE CONV2D_FILTER float32's H2D: 4 output channels a record)
    const int64_t done = interleave4_u32_avx512(d, s, nb, src_a);
    if (done < nb) half_line_tile_u32(d + 16 * done, s + 4 * done, 4, nb - done, src_a, 16);
    return;
  }
  if (nb == 4 && src_a == 16 && na >= 16 && lines) {  // (and its D2H)
    const int64_t done = deinterleave4_u32_avx512(d, s, na, dst_b);
    if (done < na) half_line_tile_u32(d + 4 * done, s + 16 * done, na - done, 4, 16, dst_b);
    return;
  }
  if (tile_in_lines<4>(d, s, na, nb, src_a, dst_b, half_line_tile_u32)) return;
  half_line_tile_u32(d, s, na, nb, src_a, dst_b);
}

// Blocks along the rows of the side whose rows lie the farther apart, the nearer side's accesses
// strided: along the destination's (its lines written in order) unless the source's rows lie
// farther apart (MACE IN_OUT_CHANNEL float32's D2H: source rows 4 KiB apart, destination rows
// 1 KiB; 1 MiB, 2 threads, loop: 17.1 -> 13.0 us, 21.5 -> 16.9 in a slower phase; its H2D, the
// other way round, 13.2 in either order of its own, 19 along the source).
void tile_u128(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (na < 4 || nb < 4) return wide_tile<16>(d, s, na, nb, src_a, dst_b, 16);
  const int64_t na_k = na - na % 4, nb_k = nb - nb % 4;
  if (src_a > dst_b) {  // along the source's rows, the farther apart (see above)
    for (int64_t a = 0; a < na_k; a += 4)
      for (int64_t b = 0; b < nb_k; b += 4) block4x4_u128(d + a * 16 + b * dst_b, s + a * src_a + b * 16, src_a, dst_b);
  } else {
    for (int64_t b = 0; b < nb_k; b += 4)
      for (int64_t a = 0; a < na_k; a += 4) block4x4_u128(d + a * 16 + b * dst_b, s + a * src_a + b * 16, src_a, dst_b);
  }
  if (nb_k < nb) scalar_tile<U128>(d + nb_k * dst_b, s + nb_k * 16, na_k, nb - nb_k, src_a, dst_b);
  if (na_k < na) scalar_tile<U128>(d + na_k * 16, s + na_k * src_a, na - na_k, nb, src_a, dst_b);
}

void tile_u64(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  if (tile_in_lines<8>(d, s, na, nb, src_a, dst_b, half_line_tile_u64)) return;
  half_line_tile_u64(d, s, na, nb, src_a, dst_b);
}
#else
inline bool in_line_blocks(int64_t, int64_t, int64_t, bool = false) { return false; }
void tile_u64(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  scalar_tile<uint64_t>(d, s, na, nb, src_a, dst_b);
}
void tile_u16(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  scalar_tile<uint16_t>(d, s, na, nb, src_a, dst_b);
}
void tile_u32(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  scalar_tile<uint32_t>(d, s, na, nb, src_a, dst_b);
}
void tile_u128(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b) {
  wide_tile<16>(d, s, na, nb, src_a, dst_b, 16);
}
#endif

#if defined(__SSE2__)
// Units of whole 32-byte words in 256-bit AVX moves, where wide_tile's memcpy compiles to 16-byte
// SSE moves (one process, tuned, 2 threads, 1 MiB: HTP's croutons 1.43-1.67 -> 1.22-1.48x memcpy,
// Spyre's sticks H2D and D2D 1.17-1.28 -> 1.12-1.24; 32 MiB streams and is as before).
template <int64_t U>
TL_AVX inline void words_avx(char* d, const char* s, int64_t unit) {
  const int64_t u = U > 0 ? U : unit;
  for (int64_t k = 0; k < u; k += 32)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k)));
}

template <int64_t U>
TL_AVX void wide_tile_avx(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b, int64_t unit) {
  wide_tile<U, words_avx<U>>(d, s, na, nb, src_a, dst_b, unit);
}

// n units of whole 32-byte words, dst_step and src_step bytes apart.
TL_AVX void strided_words_avx(char* d, const char* s, int64_t n, int64_t dst_step, int64_t src_step, int64_t unit) {
  switch (unit) {
    case 64: return strided_moves<words_avx<64>>(d, s, n, dst_step, src_step, unit);
    case 128: return strided_moves<words_avx<128>>(d, s, n, dst_step, src_step, unit);
    default: return strided_moves<words_avx<0>>(d, s, n, dst_step, src_step, unit);
  }
}
#endif

void plain_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b, int64_t unit) {
#if defined(__SSE2__)
  if (kAvx && unit % 32 == 0) {
    switch (unit) {
      case 32: return wide_tile_avx<32>(d, s, na, nb, src_a, dst_b, unit);
      case 64: return wide_tile_avx<64>(d, s, na, nb, src_a, dst_b, unit);
      case 128: return wide_tile_avx<128>(d, s, na, nb, src_a, dst_b, unit);
      case 256: return wide_tile_avx<256>(d, s, na, nb, src_a, dst_b, unit);
      default: return wide_tile_avx<0>(d, s, na, nb, src_a, dst_b, unit);
    }
  }
#endif
  switch (unit) {
    case 1: return scalar_tile<uint8_t>(d, s, na, nb, src_a, dst_b);
    case 2: return tile_u16(d, s, na, nb, src_a, dst_b);
    case 4: return tile_u32(d, s, na, nb, src_a, dst_b);
    case 8: return tile_u64(d, s, na, nb, src_a, dst_b);
    case 16: return tile_u128(d, s, na, nb, src_a, dst_b);
    case 32: return wide_tile<32>(d, s, na, nb, src_a, dst_b, unit);
    case 64: return wide_tile<64>(d, s, na, nb, src_a, dst_b, unit);
    case 128: return wide_tile<128>(d, s, na, nb, src_a, dst_b, unit);
    case 256: return wide_tile<256>(d, s, na, nb, src_a, dst_b, unit);
    default: return wide_tile<0>(d, s, na, nb, src_a, dst_b, unit);
  }
}

}  // namespace

bool line_blocks_available() {
#if defined(__SSE2__)
  return kAvx512Blocks;
#else
  return false;
#endif
}

bool set_line_blocks(bool on) {
  TORCH_CHECK_VALUE(!on || line_blocks_available(), "set_line_blocks(True): this CPU has no AVX-512F/BW line blocks");
#if defined(__SSE2__)
  return g_avx512_blocks.exchange(on);
#else
  return false;
#endif
}

void copy_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_b, int64_t unit,
               bool stream) {
  if (na == 1 && nb == 1) {
    std::memcpy(d, s, unit);
    return;
  }
  const int64_t row = na * unit;
#if defined(__SSE2__)
  if (stream && unit % 16 == 0 && reinterpret_cast<uintptr_t>(d) % 16 == 0 && dst_b % 16 == 0) {
    if (source_order(na, nb, src_a, dst_b, unit)) {
      for (int64_t a = 0; a < na; ++a)
        for (int64_t b = 0; b < nb; ++b) stream16(d + a * unit + b * dst_b, s + a * src_a + b * unit, unit);
      return;
    }
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t a = 0; a < na; ++a) stream16(d + a * unit + b * dst_b, s + a * src_a + b * unit, unit);
    return;
  }
#endif
  // Transpose into an L1 buffer, then write whole rows (or the whole tile) out: streamed, or
  // plainly where destination rows lie far apart (rows 1 KiB apart measured 1.5x slower staged:
  // NCHW -> NHWC float32 at 1 MiB). Unstaged, a line block's 32 stores to rows 4 KiB apart all
  // fall in one L1 set of 12 ways: staged, with the rows written out in whole-line moves, the D2H
  // of kCHW32, nChw16c float32 and a Spyre dim_order change at 1 MiB, 2 threads took 1.4-1.8x
  // memcpy against 2.1-2.3, NHWC float16 1.9-2.0 against 2.8-3.1 (AMD Zen 5; benchmarks/RESULTS.md,
  // thirty-second session). Up to 4 destination rows (the deinterleaves of kCHW2 and kCHW4) stay
  // within the L1's ways: unstaged, their D2H at 1 MiB took 15-25% less time.
  const bool far_rows = dst_b >= 2048 && nb > 4;
  const bool staged = unit <= 8 && row * nb <= kStageBytes && (stream ? row % 16 == 0 || dst_b == row : far_rows);
  if (staged) {
    alignas(64) char buf[kStageBytes];
    plain_tile(buf, s, na, nb, src_a, row, unit);
    const int64_t rows = dst_b == row ? 1 : nb, bytes = dst_b == row ? row * nb : row;
#if defined(__SSE2__)
    if (!stream && bytes % 64 == 0 && row % 64 == 0 && g_avx512_blocks.load(std::memory_order_relaxed))
      return staged_rows_avx512(d, buf, rows, bytes, row, dst_b);
    if (!stream && bytes % 16 == 0 && bytes <= 1024) {  // short rows: inline, no call per row
      for (int64_t b = 0; b < rows; ++b)
        for (int64_t k = 0; k < bytes; k += 16) st(d + b * dst_b + k, ld(buf + b * row + k));
      return;
    }
#endif
    for (int64_t b = 0; b < rows; ++b) copy_run(d + b * dst_b, buf + b * row, bytes, stream);
    return;
  }
  plain_tile(d, s, na, nb, src_a, dst_b, unit);
}

void copy_spaced_runs(char* d, const char* s, int64_t na, int64_t nb, int64_t src_a, int64_t dst_a, int64_t dst_b,
                      int64_t unit, bool stream) {
#if defined(__SSE2__)
  if (stream && reinterpret_cast<uintptr_t>(d) % 16 == 0 && dst_a % 16 == 0 && dst_b % 16 == 0) {
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t a = 0; a < na; ++a) stream16(d + a * dst_a + b * dst_b, s + a * src_a + b * unit, unit);
    return;
  }
  if (kAvx) {
    for (int64_t b = 0; b < nb; ++b) strided_words_avx(d + b * dst_b, s + b * unit, na, dst_a, src_a, unit);
    return;
  }
#endif
  for (int64_t b = 0; b < nb; ++b) strided_moves<memcpy_unit<0>>(d + b * dst_b, s + b * unit, na, dst_a, src_a, unit);
}

namespace {
// n rows of R bytes, src_step apart, into adjacent rows of d.
template <int64_t R>
void gather_rows(char* d, const char* s, int64_t n, int64_t src_step) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * R, s + i * src_step, R);
}

// The same for rows of any length: whole words of W bytes, the last one overlapping the one before
// it where W does not divide the row (both hold the same source bytes). W: the widest of 16, 8, 4
// not longer than the row.
template <typename E>
void gather_words(char* d, const char* s, int64_t n, int64_t src_step, int64_t row) {
  constexpr int64_t W = sizeof(E);
  for (int64_t i = 0; i < n; ++i) {
    char* out = d + i * row;
    const char* in = s + i * src_step;
    for (int64_t k = 0; k + W <= row; k += W) store<E>(out + k, load<E>(in + k));
    if (row % W) store<E>(out + row - W, load<E>(in + row - W));
  }
}
// Destination row b of an extended tile (ne chunks of `row` bytes, adjacent) gathered from the
// transposed buffer, where chunk e of row b lies at buf[(e * nb + b) * row].
void gather_extended(char* d, const char* buf, int64_t nb, int64_t ne, int64_t dst_b, int64_t row) {
  const int64_t step = nb * row;
  // Rows of 4, 8 or 16 bytes: the gather is itself a transpose of row-wide units, ne x nb, run as
  // SIMD blocks (MACE CONV2D_FILTER float16 H2D: 1.2x faster at 1 MiB, 1.3x at 32 MiB).
  if (row == 4 || row == 8 || row == 16) return plain_tile(d, buf, ne, nb, step, dst_b, row);
  for (int64_t b = 0; b < nb; ++b) {
    char* out = d + b * dst_b;
    const char* in = buf + b * row;
    switch (row) {
      case 8: gather_rows<8>(out, in, ne, step); break;
      case 16: gather_rows<16>(out, in, ne, step); break;
      case 32: gather_rows<32>(out, in, ne, step); break;
      case 64: gather_rows<64>(out, in, ne, step); break;
      default:
        if (row >= 16) gather_words<U128>(out, in, ne, step, row);
        else if (row >= 8) gather_words<uint64_t>(out, in, ne, step, row);
        else if (row >= 4) gather_words<uint32_t>(out, in, ne, step, row);
        else gather_words<uint8_t>(out, in, ne, step, row);
    }
  }
}
}  // namespace

void copy_extended_tile(char* d, const char* s, int64_t na, int64_t nb, int64_t ne, int64_t src_a, int64_t dst_b,
                        int64_t unit, bool stream) {
  alignas(64) char buf[kStageBytes];
  const int64_t row = na * unit, chunk = nb * unit;
  const auto whole = [](int64_t bytes) { return bytes == 4 || bytes == 8 || bytes == 16 || bytes % 32 == 0; };
  if (!whole(row) && whole(chunk) && (row < 64 || (unit == 2 && (nb == 2 || nb == 4)))) {
    // Destination chunks of an odd width under a line (9 taps of 2 or 4 bytes: the D2H of MACE
    // CONV2D_FILTER and oneDNN OIhw16i16o), which the gather below would move in overlapping
    // words, from source chunks of whole words: the source chunks are gathered first, buf[e][a]
    // holding row a's chunk e, then one transpose of the (e, a) records' nb units writes the
    // destination rows (for 2-byte units and records of 2 or 4: the de-interleave kernels). 2
    // threads, one process, alternating builds: at 1 MiB CONV2D_FILTER float16 34 -> 17 us,
    // float32 26 -> 21 (17.6 with tile_u32's split of 4-unit records), OIhw16i16o 23 -> 15.6;
    // at 32 MiB 1.9 -> 1.3 ms, 1.4 (as before), 1.8 -> 1.2.
    // Destination chunks of a line or more move well in the gather; a transpose of few wider
    // units (4 or 8 bytes, records of 2 or 4) measured slower there.
    plain_tile(buf, s, na, ne, src_a, na * chunk, chunk);
    if (!stream) return copy_tile(d, buf, ne * na, nb, chunk, dst_b, unit, false);
    alignas(64) char rows[kStageBytes];
    const int64_t run = ne * row;
    plain_tile(rows, buf, ne * na, nb, chunk, run, unit);
    for (int64_t b = 0; b < nb; ++b) copy_run(d + b * dst_b, rows + b * run, run, true);
    return;
  }
  plain_tile(buf, s, na, ne * nb, src_a, row, unit);  // buf[e * nb + b] holds destination row b's chunk e
  if (!stream) return gather_extended(d, buf, nb, ne, dst_b, row);
  // Streamed: the destination rows are gathered into a second L1 buffer, then each is written
  // around the cache (no read-for-ownership of its lines: MACE CONV2D_FILTER and OIhw16i16o at
  // 32 MiB, see benchmarks/RESULTS.md).
  alignas(64) char rows[kStageBytes];
  const int64_t run = ne * row;
  gather_extended(rows, buf, nb, ne, run, row);
  for (int64_t b = 0; b < nb; ++b) copy_run(d + b * dst_b, rows + b * run, run, true);
}

void copy_strided(char* d, const char* s, int64_t n, int64_t dst_step, int64_t src_step, int64_t unit) {
#if defined(__SSE2__)
  if (kAvx && unit % 32 == 0) return strided_words_avx(d, s, n, dst_step, src_step, unit);
  if (unit == 4 && dst_step == 4 && src_step == 8) return deinterleave2_u32(d, nullptr, s, n);
#endif
  switch (unit) {
    case 1: return strided_units<uint8_t>(d, s, n, dst_step, src_step);
    case 2: return strided_units<uint16_t>(d, s, n, dst_step, src_step);
    case 4: return strided_units<uint32_t>(d, s, n, dst_step, src_step);
    case 8: return strided_units<uint64_t>(d, s, n, dst_step, src_step);
    default: return strided_moves<memcpy_unit<0>>(d, s, n, dst_step, src_step, unit);
  }
}

void copy_run(char* d, const char* s, int64_t bytes, bool stream) {
#if defined(__SSE2__)
  if (stream) return stream_run(d, s, bytes);
#endif
  std::memcpy(d, s, bytes);
}

void end_streaming() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace torch_layouts
