// The 2x2, stride-2 max pooling rows (max_pool.cpp), included once in each instruction set's
// namespace and compiled for its target: plain loops GCC vectorizes along the output row.

// One output row of float32 values and int64 indices from input rows r0 and r1 (each element
// at stride 1): window j is r0[2j], r0[2j + 1], r1[2j], r1[2j + 1], whose indices in the plane are
// i0 + 2j, +1, +w, +w + 1. ATen's rule, in that order: an element replaces the window's maximum
// where it is greater or NaN (the first maximum, or the last NaN); the first element always holds
// (it is greater than ATen's starting -inf, NaN, or -inf itself, which keeps the starting index).
inline void max2x2_row(const float* __restrict r0, const float* __restrict r1, float* __restrict out,
                       int64_t* __restrict index, int64_t n, int64_t i0, int64_t w) {
  for (int64_t j = 0; j < n; ++j) {
    const float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
    const int64_t i = i0 + 2 * j;
    float m = a;
    int64_t k = i;
    bool u = b > m || b != b;
    m = u ? b : m;
    k = u ? i + 1 : k;
    u = c > m || c != c;
    m = u ? c : m;
    k = u ? i + w : k;
    u = d > m || d != d;
    m = u ? d : m;
    k = u ? i + w + 1 : k;
    out[j] = m;
    index[j] = k;
  }
}

// The gradient's input rows g0 and g1 (stride 1) of one output row of non-overlapping 2x2
// windows: each element the window's gradient where the window's index names it (0 + g, as
// ATen adds into zeros: -0 becomes +0), else 0. Returns whether every index named an element of
// its window or was -1 (ATen skips those); else the caller redoes the plane by ATen's loop.
inline bool max2x2_backward_row(const float* __restrict grad, const int64_t* __restrict index,
                                float* __restrict g0, float* __restrict g1, int64_t n, int64_t i0, int64_t w) {
  int64_t outside = 0;  // (bitwise, not short-circuit: GCC vectorizes the reduction)
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = index[j], k = at - (i0 + 2 * j);
    const float g = 0.0f + grad[j];
    g0[2 * j] = k == 0 ? g : 0.0f;
    g0[2 * j + 1] = k == 1 ? g : 0.0f;
    g1[2 * j] = k == w ? g : 0.0f;
    g1[2 * j + 1] = k == w + 1 ? g : 0.0f;
    outside |= int64_t{k != 0} & int64_t{k != 1} & int64_t{k != w} & int64_t{k != w + 1} & int64_t{at != -1};
  }
  return outside == 0;
}

constexpr MaxPoolRows kTable{max2x2_row, max2x2_backward_row};
