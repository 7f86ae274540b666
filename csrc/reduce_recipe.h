// The replay of a reduction over several device dims in the runtime's front (csrc/kernel_front.h):
// ops/reductions.py offers, for a kept plan whose input is read in place, the input's view, the
// device dims in the order it reduces them (one CPU reduction per dim, keepdim), and the result's
// layout and view; later calls of that geometry make the same reductions and copy the values into
// a new result without Python, so its bits are the Python path's.
#pragma once

#include <optional>

#include "kernel_front.h"

namespace torch_layouts {

// `kind`: "sum", "amax", "amin", "mean", "all" or "any" (the called op's name, "aten::" + kind);
// `dtype`: a sum's dtype (a mean's sums'); a mean divides its float32 sums by `count` and rounds
// to `out_dtype`. `row_kernels` (a sum, mean, amax or amin over sticks, ops/reductions._row_reduce):
// the reduced dims reduced in one sweep by the row kernels (rows_sum, rows_extreme) into float32, a
// mean's divided by `count`, rounded to `out_dtype`; `length` (with the row kernels: amax or amin
// over sticks whose last one is padded) a row's real elements, its first ones (-1: the whole row).
// One box of a reduction over several boxes of real positions: the input's view of the box, the
// box's region of the values (a contiguous tensor of the values' shape) and the result's view of
// that region; whether it is the first box there (it writes the region; later ones combine).
struct ReducePiece {
  BufferView input, region, result;
  bool writes = true;
};

bool offer_reduce(const std::string& kind, const at::Tensor& x, BufferView input, std::vector<int64_t> order,
                  std::optional<c10::ScalarType> dtype, LayoutPtr out, BufferView result, int64_t count = 1,
                  std::optional<c10::ScalarType> out_dtype = std::nullopt, bool row_kernels = false,
                  int64_t length = -1);

// amax, amin, all or any over `pieces` (ops/reductions.box_regions), their values of `values_sizes`
// combined where regions meet (maximum, minimum, and, or), each written region copied into a new
// tensor of `out`. With `row_kernels` (amax or amin of float rows over sticks: 1000 classes, a
// box of 31 whole sticks and one of 8), each box is reduced by the row kernels, in `out_dtype`.
bool offer_reduce_pieces(const std::string& kind, const at::Tensor& x, std::vector<ReducePiece> pieces,
                         std::vector<int64_t> values_sizes, std::vector<int64_t> order, LayoutPtr out,
                         std::optional<c10::ScalarType> out_dtype = std::nullopt, bool row_kernels = false);

}  // namespace torch_layouts
