// Batch norm's loops (batch_norm.cpp), included once in each instruction set's namespace and
// compiled for its target: plain loops GCC vectorizes (across a group's channels, or along a row).

// The sums of kGroup channels at once, each in ATen's order (batch, then the plane row-major) and
// in double, one addition at a time: channel k's elements at x + offsets[k] + n * sn + h * sh +
// w * sw. With `mean` (kGroup float means), the sums of (x - mean)^2, each square in float.
template <bool Squares>
inline void group_loop(const float* x, const int64_t* offsets, int64_t n, int64_t sn, int64_t h, int64_t sh,
                       int64_t w, int64_t sw, const float* mean, double* out) {
  double acc[kGroup] = {};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < h; ++r) {
      const float* row = x + i * sn + r * sh;
      for (int64_t j = 0; j < w; ++j) {
        for (int k = 0; k < kGroup; ++k) {
          const float v = row[offsets[k] + j * sw];
          if constexpr (Squares) {
            const float d = v - mean[k];
            acc[k] += static_cast<double>(d * d);
          } else {
            acc[k] += static_cast<double>(v);
          }
        }
      }
    }
  }
  for (int k = 0; k < kGroup; ++k) out[k] = acc[k];
}

inline void group_sums(const float* x, const int64_t* offsets, int64_t n, int64_t sn, int64_t h, int64_t sh,
                       int64_t w, int64_t sw, const float* mean, double* out) {
  if (mean == nullptr) return group_loop<false>(x, offsets, n, sn, h, sh, w, sw, mean, out);
  group_loop<true>(x, offsets, n, sn, h, sh, w, sw, mean, out);
}

// y = x * a + b along a row of n elements (stride 1 on both sides), the product and the sum
// rounded apart, or fused (ATen's AVX2 and AVX-512 kernels contract them).
inline void affine_row(const float* __restrict x, float* __restrict y, int64_t n, float a, float b, bool fused) {
  if (fused) {
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(x[j], a, b);
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] * a + b;
  }
}

constexpr BatchNormRows kTable{group_sums, affine_row};
