// Row math of the fused row kernels (row_kernels.h) on float32 rows in memory: softmax, layer
// norm, their backward and sums, plus the float16 conversions of their gathers and scatters.
// One table of functions, AVX2/FMA/F16C where the CPU has them, portable loops elsewhere
// (docs/design.md, "Row kernels").
#pragma once

#include <cstdint>

namespace torch_layouts {

// How a row lies in memory: `runs` runs of `run` contiguous floats each (a stick, a chunk row,
// or the whole row when runs == 1). Element i of run j of an operand is at base + off[j] + i;
// every operand of a call has the same runs, each its own base and offsets.
struct RowShape {
  int64_t runs, run;
};
struct Row {
  float* base;
  const int64_t* off;
};

// Each function takes a block of `count` rows (at most kMaxBlockRows), operand arrays of one Row
// per row, and walks the block run by run: where rows of a tile are adjacent in memory (a
// stick's rows), every pass reads the block in storage order.
constexpr int64_t kMaxBlockRows = 64;

struct RowMath {
  // out := softmax(x) (log: log_softmax); safe: a row of only -inf gives 0s. out may be x.
  void (*softmax)(RowShape s, int64_t count, const Row* x, const Row* out, bool log, bool safe);
  // out := the input gradient of softmax (log: log_softmax) from output y and output gradient g.
  void (*softmax_backward)(RowShape s, int64_t count, const Row* g, const Row* y, const Row* out, bool log);
  // out := (x - mean) * rstd * w + b (w, b dense, may be null); writes each row's mean and rstd.
  void (*layer_norm)(RowShape s, int64_t count, const Row* x, const Row* out, const float* w, const float* b,
                     float eps, float* mean, float* rstd);
  // With xhat = (x - mean) * rstd and gw = g * w: dgamma += g * xhat, dbeta += g (dense, each may be
  // null); when out: out := rstd * (gw - sum(gw) / n - xhat * sum(gw * xhat) / n).
  void (*layer_norm_backward)(RowShape s, int64_t count, const Row* g, const Row* x, const Row* out,
                              const float* mean, const float* rstd, const float* w, float* dgamma, float* dbeta);
  float (*sum)(const float* x, int64_t n);
  // sums[r] += the sum of n float32 (half: float16) elements from runs[r], for r < count.
  void (*add_run_sums)(float* sums, const char* const* runs, int64_t count, int64_t n, bool half);
  void (*load_half)(float* d, const uint16_t* s, int64_t n);
  void (*store_half)(uint16_t* d, const float* s, int64_t n);
};

// AVX2 where the CPU reports AVX2, FMA and F16C, else the portable loops.
const RowMath& row_math();
// The portable loops, whatever the CPU (tests compare the two).
const RowMath& portable_row_math();

}  // namespace torch_layouts
