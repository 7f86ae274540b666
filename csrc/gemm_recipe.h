// The tile GEMM's replay in the runtime's front (csrc/kernel_front.h): ops/matmul.py offers, for a
// mm / bmm / addmm whose plan read A, B (and a bias row) where they lie (A and B, or copied whole
// into coordinates that read them), their views and dim groups,
// C's layout and groups and the restickifies the rule counts; later calls of that geometry run
// tile_gemm (tile_gemm.h) on those views without Python.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernel_front.h"

namespace torch_layouts {

// An operand of a kept GEMM: the argument, its view and its (batch, rows, cols) dim groups; with
// `staged`, the view reads a copy of the argument into a new tensor of that layout (k padded with
// zeros, or the operand restickified), made on every call as ops/matmul.py's materialize does.
struct GemmRead {
  int64_t arg;
  BufferView view;
  std::vector<int64_t> batch, rows, cols;
  LayoutPtr staged;
};

// `op` ("aten::addmm"): A and B; the bias row's read (addmm's first argument), if the GEMM adds
// one; C's layout, its view's sizes and dim groups; m, n, k; alpha and beta, which a replayed call
// must pass again (addmm's); the bytes of each restickify the rule counts.
bool offer_gemm(const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own, GemmRead a, GemmRead b,
                std::optional<std::pair<int64_t, BufferView>> bias, LayoutPtr c, std::vector<int64_t> c_sizes,
                std::vector<int64_t> c_batch, std::vector<int64_t> c_rows, std::vector<int64_t> c_cols, int64_t m,
                int64_t n, int64_t k, double alpha, double beta, std::vector<int64_t> restickify_bytes);

}  // namespace torch_layouts
