// Row math of the fused row kernels (row_kernels.h) on float32 rows in memory: softmax, layer
// norm, their backward, sums and extremes (amax, amin), plus the float16 conversions of their
// gathers and scatters; and the fused LSTM and GRU cells (recurrent_cells.cpp) and their backward.
// One table of functions per instruction set: AVX-512, AVX2/FMA/F16C, portable loops
// (docs/design.md, "Row kernels").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_layouts {

// How a row lies in memory: `runs` runs of `run` contiguous floats each (a stick, a chunk row,
// or the whole row when runs == 1), but the last, which has `last` (1..run: a row whose stick is
// padded, 1000 classes in sticks of 64, ends within its last run). Element i of run j of row k of
// an operand's block is at base[k] + off[j] + i: every row of an operand has the same run offsets
// (its layout's), and every operand of a call the same runs.
struct RowShape {
  int64_t runs, run, last;
};
// Elements of run j; of the whole row.
inline int64_t run_length(RowShape s, int64_t j) { return j + 1 < s.runs ? s.run : s.last; }
inline int64_t row_length(RowShape s) { return s.runs == 0 ? 0 : (s.runs - 1) * s.run + s.last; }
struct Row {
  float* const* base;  // each row's start; null: the operand is absent
  const int64_t* off;
};

// Each function takes a block of `count` rows (at most kMaxBlockRows), one Row per operand, and
// walks the block run by run: where rows of a tile are adjacent in memory (a stick's rows),
// every pass reads the block in storage order.
constexpr int64_t kMaxBlockRows = 64;

// Runs first + r * step, indexed as an array of their pointers is.
struct StridedRuns {
  const char* first;
  int64_t step;
  const char* operator[](int64_t r) const { return first + r * step; }
};

struct RowMath {
  // out := softmax(x) (log: log_softmax); safe: a row of only -inf gives 0s. out may be x.
  void (*softmax)(RowShape s, int64_t count, Row x, Row out, bool log, bool safe);
  // out := the input gradient of softmax (log: log_softmax) from output y and output gradient g.
  void (*softmax_backward)(RowShape s, int64_t count, Row g, Row y, Row out, bool log);
  // out := (x - mean) * rstd * w + b (w, b dense, may be null); writes each row's mean and rstd.
  // rms: RMS norm, the mean taken as 0 (rstd from the mean of the squares), never computed.
  void (*layer_norm)(RowShape s, int64_t count, Row x, Row out, const float* w, const float* b,
                     float eps, float* mean, float* rstd, bool rms);
  // With xhat = (x - mean) * rstd and gw = g * w: dgamma += g * xhat, dbeta += g (dense, each may be
  // null); when out.base: out := rstd * (gw - sum(gw) / n - xhat * sum(gw * xhat) / n), without the
  // sum(gw) term for RMS norm (rms; its mean 0).
  void (*layer_norm_backward)(RowShape s, int64_t count, Row g, Row x, Row out, const float* mean,
                              const float* rstd, const float* w, float* dgamma, float* dbeta, bool rms);
  // The fused cells over n contiguous lanes of hidden units, each gate's run given apart (LSTM:
  // [i, f, g, o]; GRU: [r, z, n]); a null bias array: no bias. LSTM: gates = (ig + ib) + (hg + hb);
  // i, f, o = sigmoid, g = tanh; cy = f * cx + i * g; hy = o * tanh(cy); ws := the activated gates.
  void (*lstm_cell)(int64_t n, const float* const* ig, const float* const* hg, const float* const* ib,
                    const float* const* hb, const float* cx, float* hy, float* cy, float* const* ws);
  // Its backward from ws (grad_hy, grad_cy may be null: zeros): gg := the gates' gradient, gcx :=
  // cx's; gbias (may be null) += gg.
  void (*lstm_cell_backward)(int64_t n, const float* ghy, const float* gcy, const float* cx, const float* cy,
                             const float* const* ws, float* const* gg, float* gcx, float* const* gbias);
  // GRU: r, z = sigmoid((ig + ib) + (hg + hb)), n = tanh(ig_n + ib_n + r * (hg_n + hb_n)),
  // hy = n + z * (hx - n); ws := [r, z, n, hx, hg_n + hb_n].
  void (*gru_cell)(int64_t n, const float* const* ig, const float* const* hg, const float* const* ib,
                   const float* const* hb, const float* hx, float* hy, float* const* ws);
  // Its backward from ws: gi, gh := the input and hidden gates' gradients, ghx := hx's; gbi, gbh
  // (both null or neither) += gi, gh.
  void (*gru_cell_backward)(int64_t n, const float* ghy, const float* const* ws, float* const* gi, float* const* gh,
                            float* ghx, float* const* gbi, float* const* gbh);
  float (*sum)(const float* x, int64_t n);
  // sums[r] += the sum of n float32 (half: float16) elements from runs[r], for r < count.
  void (*add_run_sums)(float* sums, const char* const* runs, int64_t count, int64_t n, bool half);
  // The same for runs equally spaced: run r at first + r * step (bytes).
  void (*add_strided_run_sums)(float* sums, const char* first, int64_t step, int64_t count, int64_t n, bool half);
  // acc[r] := the maximum (max false: the minimum) of acc[r] and the n float32 (half: float16)
  // elements from runs[r], for r < count; NaN where any of them is (as ATen's amax and amin).
  void (*fold_run_extremes)(float* acc, const char* const* runs, int64_t count, int64_t n, bool half, bool max);
  // The same for runs equally spaced: run r at first + r * step (bytes).
  void (*fold_strided_run_extremes)(float* acc, const char* first, int64_t step, int64_t count, int64_t n, bool half,
                                    bool max);
  void (*load_half)(float* d, const uint16_t* s, int64_t n);
  void (*store_half)(uint16_t* d, const float* s, int64_t n);
  const char* set;  // its name in row_math_sets()
};

// The instruction sets this CPU runs the row math in, best first: "avx512" (AVX-512F with AVX2,
// FMA and F16C), "avx2" (AVX2, FMA, F16C), "portable" (SSE2 on x86-64, scalar elsewhere).
const std::vector<std::string>& row_math_sets();
// The row math in one of row_math_sets() (ValueError naming any other).
const RowMath& row_math(const std::string& set);

// The row math the row kernels use (rows_set_math installs one; the converting copies and the
// column sums run in its instruction set too).
const RowMath& rows_math();

}  // namespace torch_layouts
