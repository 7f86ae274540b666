// Extremes of runs into per-row extremes (RowMath::fold_run_extremes) over a namespace's
// extreme_lanes<Max>(p, n, half, nan), which returns a run's maximum (Max false: minimum) as 8
// partial float lanes, by plain maxps/minps (which drop some NaNs), and sets `nan` where the run
// holds a NaN. row_math.cpp includes this file in each x86 instruction set's namespace, as it
// does row_sums_x86.h, and defines extreme_lanes after it before the set's table.
template <bool Max>
inline __m256 extreme_lanes(const char* p, int64_t n, bool half, bool& nan);

template <bool Max>
[[gnu::always_inline]] inline __m256 plain8(__m256 a, __m256 b) {
  return Max ? _mm256_max_ps(a, b) : _mm256_min_ps(a, b);
}

// a and b's lanewise maximum (Max false: minimum), NaN where either is (maxps alone gives b).
template <bool Max>
[[gnu::always_inline]] inline __m256 extreme8(__m256 a, __m256 b) {
  return _mm256_blendv_ps(plain8<Max>(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

// Lanes 2i and 2i + 1 of a and of b combined, in hadd's order.
template <bool Max>
[[gnu::always_inline]] inline __m256 pair8(__m256 a, __m256 b) {
  return plain8<Max>(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
}

template <bool Max>
inline float extreme1(float a, float b) {
  if (a != a || b != b) return a != a ? a : b;
  return (Max ? b > a : b < a) ? b : a;
}

// The run's extreme one element at a time, NaN where it holds one: runs that hold a NaN.
template <bool Max>
float exact_extreme(const char* p, int64_t n, bool half) {
  float a = Max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    a = extreme1<Max>(a, half ? _cvtsh_ss(reinterpret_cast<const uint16_t*>(p)[i]) : reinterpret_cast<const float*>(p)[i]);
  }
  return a;
}

// Eight rows at a time, their lanes reduced to one vector of eight extremes by a transposing tree
// (add_runs' hadd tree, with pair8 for hadd); eight rows of which one holds a NaN are redone
// element by element. N > 0: runs of N elements, known here so that extreme_lanes unrolls. Runs
// of up to 256 bytes are prefetched about 4 KiB ahead, as add_runs does.
template <bool Max, int64_t N, typename Runs>
void fold_runs(float* acc, Runs runs, int64_t count, int64_t len, bool half) {
  const int64_t n = N > 0 ? N : len, bytes = n * (half ? 2 : 4);
  const int64_t ahead = prefetch_distance(bytes);
  int64_t r = 0;
  for (; r + 8 <= count; r += 8) {
    __m256 v[8];
    prefetch_eight(runs, r, count, ahead, bytes);
    bool nan = false;
    for (int q = 0; q < 8; ++q) v[q] = extreme_lanes<Max>(runs[r + q], n, half, nan);
    if (nan) {
      for (int q = 0; q < 8; ++q) acc[r + q] = extreme1<Max>(acc[r + q], exact_extreme<Max>(runs[r + q], n, half));
      continue;
    }
    const __m256 b0 = pair8<Max>(pair8<Max>(v[0], v[1]), pair8<Max>(v[2], v[3]));
    const __m256 b1 = pair8<Max>(pair8<Max>(v[4], v[5]), pair8<Max>(v[6], v[7]));
    const __m256 total = plain8<Max>(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
    _mm256_storeu_ps(acc + r, extreme8<Max>(_mm256_loadu_ps(acc + r), total));
  }
  // The last rows one at a time, each run's lanes through the same tree in scalars (maxps/minps's
  // rule: the second operand unless the first is greater, or less): the bits the blocks of eight
  // give. Element by element they took ~0.7 ns an element: the kernel alone (2 threads, float32,
  // contiguous rows) 2.7 -> 0.48 us for 2x2000, 16.6 -> 1.04 for 7x4096 (rows_sum 0.45 and 1.01).
  const auto p = [](float a, float b) { return (Max ? a > b : a < b) ? a : b; };
  for (; r < count; ++r) {
    bool nan = false;
    const __m256 v = extreme_lanes<Max>(runs[r], n, half, nan);
    if (nan) {
      acc[r] = extreme1<Max>(acc[r], exact_extreme<Max>(runs[r], n, half));
      continue;
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, v);
    const float total = p(p(p(l[0], l[1]), p(l[2], l[3])), p(p(l[4], l[5]), p(l[6], l[7])));
    acc[r] = acc[r] != acc[r] ? acc[r] : p(acc[r], total);
  }
}

// Runs of a float16 or float32 stick through the code compiled for their length.
template <bool Max, typename Runs>
void extreme_runs(float* acc, Runs runs, int64_t count, int64_t n, bool half) {
  if (n == 64 && half) return fold_runs<Max, 64>(acc, runs, count, n, true);   // a float16 stick
  if (n == 32 && !half) return fold_runs<Max, 32>(acc, runs, count, n, false);  // a float32 stick
  fold_runs<Max, 0>(acc, runs, count, n, half);
}

void fold_run_extremes(float* acc, const char* const* runs, int64_t count, int64_t n, bool half, bool max) {
  max ? extreme_runs<true>(acc, runs, count, n, half) : extreme_runs<false>(acc, runs, count, n, half);
}

void fold_strided_run_extremes(float* acc, const char* first, int64_t step, int64_t count, int64_t n, bool half,
                               bool max) {
  const StridedRuns runs{first, step};
  max ? extreme_runs<true>(acc, runs, count, n, half) : extreme_runs<false>(acc, runs, count, n, half);
}
