// Sums of runs into per-row sums (RowMath::add_run_sums) over a namespace's run_lanes(p, n, half),
// which returns a run's sum as 8 partial float lanes. row_math.cpp includes this file in each x86
// instruction set's namespace after its run_lanes, as it does row_math_kernels.h.

// Eight rows at a time: their lanes reduce to one vector of eight sums (a transposing hadd tree).
// `runs[r]` is run r's start: an array of pointers, or StridedRuns (runs equally spaced).
// N > 0: runs of N elements, known here so that run_lanes unrolls (the same adds in the same order).
// Runs of up to 256 bytes are prefetched about 4 KiB ahead: the prefetchers do not follow the
// rows' pointers (a float16 stick sum of 4096x4096 in a loop: 1.10-1.22 -> 0.98-1.07x the CPU's).
// How many runs ahead runs of `bytes` are prefetched: about 4 KiB, for runs of up to 256 bytes.
inline int64_t prefetch_distance(int64_t bytes) {
  return bytes <= 256 ? std::max<int64_t>(8, 4096 / std::max<int64_t>(bytes, 1)) : 0;
}

// The eight runs `ahead` past run r (of `count`), a line at a time, where they exist.
template <typename Runs>
[[gnu::always_inline]] inline void prefetch_eight(Runs runs, int64_t r, int64_t count, int64_t ahead, int64_t bytes) {
  if (!ahead || r + ahead + 8 > count) return;
  for (int q = 0; q < 8; ++q)
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(runs[r + ahead + q] + o, _MM_HINT_T0);
}

template <int64_t N, typename Runs>
void add_runs(float* sums, Runs runs, int64_t count, int64_t len, bool half) {
  const int64_t n = N > 0 ? N : len, bytes = n * (half ? 2 : 4);
  const int64_t ahead = prefetch_distance(bytes);
  int64_t r = 0;
  for (; r + 8 <= count; r += 8) {
    __m256 v[8];
    prefetch_eight(runs, r, count, ahead, bytes);
    for (int q = 0; q < 8; ++q) v[q] = run_lanes(runs[r + q], n, half);
    const __m256 b0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m256 b1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    const __m256 total = _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
    _mm256_storeu_ps(sums + r, _mm256_add_ps(_mm256_loadu_ps(sums + r), total));
  }
  for (; r < count; ++r) {
    const __m256 v = run_lanes(runs[r], n, half);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    sums[r] += _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
  }
}

// Runs of a float16 or float32 stick through the code compiled for their length.
template <typename Runs>
void sum_runs(float* sums, Runs runs, int64_t count, int64_t n, bool half) {
  if (n == 64 && half) return add_runs<64>(sums, runs, count, n, true);  // a float16 stick
  if (n == 32 && !half) return add_runs<32>(sums, runs, count, n, false);  // a float32 stick
  add_runs<0>(sums, runs, count, n, half);
}

void add_run_sums(float* sums, const char* const* runs, int64_t count, int64_t n, bool half) {
  sum_runs(sums, runs, count, n, half);
}

void add_strided_run_sums(float* sums, const char* first, int64_t step, int64_t count, int64_t n, bool half) {
  sum_runs(sums, StridedRuns{first, step}, count, n, half);
}
