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

// Rows of whole vectors (w a multiple of kLanes) added into the lanes s and t, product and sum
// rounded apart; two sets of lanes interleaved over the row's vectors would change the order, so
// the rows' additions stay one chain per lane (ATen's), with the lanes in registers.
inline void whole_rows(const float* __restrict dy, const float* __restrict x, int64_t rows, int64_t sh_dy, int64_t sh_x,
                       int64_t w, float mean, float* __restrict sums, float* __restrict dots) {
  using Lanes = float __attribute__((vector_size(kLanes * sizeof(float))));  // GCC's vectors: one chain per lane
  Lanes s, t, g, v;
  std::memcpy(&s, sums, sizeof(s));
  std::memcpy(&t, dots, sizeof(t));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < w; j += kLanes) {
      std::memcpy(&g, dy + r * sh_dy + j, sizeof(g));
      std::memcpy(&v, x + r * sh_x + j, sizeof(v));
      s += g;
      t = t + (v - mean) * g;
    }
  }
  std::memcpy(sums, &s, sizeof(s));
  std::memcpy(dots, &t, sizeof(t));
}

// ATen's vec::reduce_all of x + y (dy) and vec::map2_reduce_all of acc + (x - mean) * dy over
// one plane of `h` rows of `w` elements (rows sh apart, elements at stride 1), in ATen's lanes:
// element e of the plane (row-major) goes to lane e % kLanes, the first kLanes set the lanes,
// the others are added in order; `sums` and `dots` get the lanes. ATen's AVX2 build rounds the
// product and the sum apart in the full vectors and fuses them in the last, partial one
// (`fused`: where ATen's kernels fuse at all). Rows whose length is a multiple of the lanes run a
// row of lanes at a time.
inline void plane_lanes(const float* dy, const float* x, int64_t h, int64_t sh_dy, int64_t sh_x, int64_t w, float mean,
                        bool fused, float* sums, float* dots) {
  const int64_t tail = h * w / kLanes * kLanes;  // where the partial vector starts
  int64_t e = 0;
  for (int64_t r = 0; r < h; ++r) {
    const float* g = dy + r * sh_dy;
    const float* v = x + r * sh_x;
    if (e >= kLanes && w % kLanes == 0) {  // the other rows, whole vectors (no tail)
      return whole_rows(g, v, h - r, sh_dy, sh_x, w, mean, sums, dots);
    }
    for (int64_t j = 0; j < w; ++j, ++e) {
      const int l = static_cast<int>(e % kLanes);
      const float d = v[j] - mean;
      if (e < kLanes) {
        sums[l] = g[j];
        dots[l] = d * g[j];
        continue;
      }
      sums[l] += g[j];
      dots[l] = fused && e >= tail ? std::fma(d, g[j], dots[l]) : dots[l] + d * g[j];
    }
  }
}

// The input's gradient along a row (stride 1): (dy - grad_mean - (x - mean) * k) * invstd * w,
// the product folded into the difference where ATen's kernels fuse (training), or dy * invstd * w.
inline void grad_row(const float* __restrict dy, const float* __restrict x, float* __restrict out, int64_t n,
                     float mean, float k, float grad_mean, float invstd, float w, bool train, bool fused) {
  if (!train) {
    for (int64_t j = 0; j < n; ++j) out[j] = dy[j] * invstd * w;
  } else if (fused) {
    for (int64_t j = 0; j < n; ++j) out[j] = std::fma(-(x[j] - mean), k, dy[j] - grad_mean) * invstd * w;
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = (dy[j] - grad_mean - (x[j] - mean) * k) * invstd * w;
  }
}

constexpr BatchNormRows kTable{group_sums, affine_row, plane_lanes, grad_row};
