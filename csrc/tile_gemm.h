// float32 GEMM on matrices that lie in device tiles: C (+)= alpha * A @ B with every operand read
// or written where it lies, no dense copy of any of them (docs/design.md, "Tile GEMM").
//
// Each operand is a strided CPU view of a device buffer whose dims are split into three groups:
// batch dims, the dims that make up the matrix's rows and the dims that make up its columns,
// each group enumerated row-major (a Spyre tile view [k tiles, m, stick] is rows (m), columns
// (k tiles, stick)). A transposed operand is the same view with the groups swapped. The kernel
// walks C in 12x16 register blocks (two 6x16 halves on AVX2): B's 16-column panels are read in
// place where their columns are contiguous and their rows evenly spaced (a tile sticked on n),
// else packed once; A is packed per 144x256 block into cache (its tile rows are 128 bytes
// apart). AVX2/FMA only (`tile_gemm_available`); callers keep a BLAS path for other hosts and
// dtypes.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_layouts {

// A view and its dim groups (indices into the view's dims, outer to inner).
struct GemmOperand {
  at::Tensor view;
  std::vector<int64_t> batch, rows, cols;
};

// C[b](i, j) = alpha * sum_p A[b](i, p) * B[b](p, j) (+ C[b](i, j) when accumulate, + beta * bias[j]
// with a bias) for i < m, j < n, p < k and every batch index; only those elements of C are written.
// A bias is a dense float32 vector of n elements or more.
void tile_gemm(const GemmOperand& c, const GemmOperand& a, const GemmOperand& b, int64_t m, int64_t n, int64_t k,
               double alpha, bool accumulate, const std::optional<at::Tensor>& bias, double beta);

// A tile GEMM planned for its operands' view geometry (sizes, strides, dim groups) and m, n, k:
// every row's and column's element offset and the packing decisions, computed once (a replay
// keeps it and runs it on each call's views).
struct TileGemmPlan;
std::shared_ptr<const TileGemmPlan> plan_tile_gemm(const GemmOperand& c, const GemmOperand& a, const GemmOperand& b,
                                                   int64_t m, int64_t n, int64_t k);
// tile_gemm on views of the sizes and strides the plan was made for (ValueError otherwise).
void run_tile_gemm(const TileGemmPlan& plan, const at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                   double alpha, bool accumulate, const std::optional<at::Tensor>& bias, double beta);

// Whether this CPU runs the kernel (AVX2 and FMA).
bool tile_gemm_available();

// The kernels this CPU runs, best first: "avx512" (AVX-512F: a 16-float register per row of a
// block), "avx2" (two 8-float registers per row). Both sum every product in the same order with
// one FMA each: they give the same bits.
const std::vector<std::string>& tile_gemm_kernels();
// Makes `kernel` (one of tile_gemm_kernels(), else ValueError) the one tile_gemm runs (process
// wide; the best by default); returns the one it replaces.
std::string tile_gemm_set_kernel(const std::string& kernel);

}  // namespace torch_layouts
