// The column sums' loops (column_sums.cpp), included once in each instruction set's namespace,
// after that namespace's kWidth (sums a block holds) and half_runs (float16 and bfloat16 runs to
// float32: half_runs_x86.h's for the x86 sets), and compiled for its target, as row_math.cpp
// includes row_math_kernels.h.

// n elements as float32 (exact), through the namespace's converters.
[[gnu::always_inline]] inline void to_float(float* d, const c10::Half* s, int64_t n) {
  half_runs::half_to_float(d, reinterpret_cast<const uint16_t*>(s), n);
}
[[gnu::always_inline]] inline void to_float(float* d, const c10::BFloat16* s, int64_t n) {
  half_runs::bf16_to_float(d, reinterpret_cast<const uint16_t*>(s), n);
}

// The loops written once; GCC vectorizes them along the run for the target (no reassociation:
// each sum's terms are added in the same order by every instruction set).
template <int64_t W, typename T>
[[gnu::always_inline]] inline void add_block(float* acc, const T* x, int64_t n2, int64_t step2, int64_t n1,
                                             int64_t step1, int64_t w) {
  const int64_t width = W > 0 ? W : w;
  constexpr int64_t kN = W > 0 ? W : kTail;
  float a[kN], b[kN], c[kN], d[kN];
  for (int64_t j = 0; j < width; ++j) {
    a[j] = acc[j];
    b[j] = 0.0f;
    c[j] = 0.0f;
    d[j] = 0.0f;
  }
  for (int64_t i = 0; i < n2; ++i) {
    const T* row = x + i * step2;
    int64_t k = 0;
    for (; k + 4 <= n1; k += 4) {
      const T* p = row + k * step1;
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t j = 0; j < width; ++j) {
          a[j] += p[j];
          b[j] += p[j + step1];
          c[j] += p[j + 2 * step1];
          d[j] += p[j + 3 * step1];
        }
      } else {  // the four runs in float32 first
        float f[4][kN];
        for (int q = 0; q < 4; ++q) to_float(f[q], p + q * step1, width);
        for (int64_t j = 0; j < width; ++j) {
          a[j] += f[0][j];
          b[j] += f[1][j];
          c[j] += f[2][j];
          d[j] += f[3][j];
        }
      }
    }
    for (; k < n1; ++k) {
      const T* p = row + k * step1;
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t j = 0; j < width; ++j) a[j] += p[j];
      } else {
        float f[kN];
        to_float(f, p, width);
        for (int64_t j = 0; j < width; ++j) a[j] += f[j];
      }
    }
  }
  for (int64_t j = 0; j < width; ++j) acc[j] = (a[j] + c[j]) + (b[j] + d[j]);
}

// Blocks of up to kWidth sums, as many as the registers hold four sets of (AVX-512 64, AVX2 16,
// portable 8); each sum's terms are added in the same order whatever the width: the same bits.
template <typename T>
void add_runs(float* acc, const void* data, int64_t n2, int64_t step2, int64_t acc2, int64_t n1, int64_t step1,
              int64_t len) {
  const T* x = static_cast<const T*>(data);
  const int64_t rows = acc2 != 0 ? n2 : 1, inner = acc2 != 0 ? 1 : n2;
  for (int64_t i = 0; i < rows; ++i) {
    float* to = acc + i * acc2;
    const T* from = x + i * step2;
    for (int64_t j = 0; j < len;) {
      const int64_t w = std::min(kWidth, len - j);
      const int64_t b = w >= 64 ? 64 : w >= 32 ? 32 : w >= 16 ? 16 : w >= 8 ? 8 : w;
      switch (b) {
        case 64: add_block<64>(to + j, from + j, inner, step2, n1, step1, b); break;
        case 32: add_block<32>(to + j, from + j, inner, step2, n1, step1, b); break;
        case 16: add_block<16>(to + j, from + j, inner, step2, n1, step1, b); break;
        case 8: add_block<8>(to + j, from + j, inner, step2, n1, step1, b); break;
        default: add_block<0>(to + j, from + j, inner, step2, n1, step1, b);  // under 8: the run's end
      }
      j += b;
    }
  }
}

const AddRunsTable kTable{add_runs<float>, add_runs<c10::Half>, add_runs<c10::BFloat16>};
