// Column sums: a float32, float16 or bfloat16 sum over strided dims of a CPU view of a device
// buffer whose contiguous dim is kept (a bias gradient's sum over batch and tokens, whose batch dim
// lies between a Spyre 3-D layout's stick columns and its sticks), in one pass over the buffer in
// memory order (docs/design.md, "Column sums").
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// out := v summed over the dims `reduced`, where the kernel takes it: v a float32, float16 or
// bfloat16 CPU tensor, out one of v's dtype or float32, of v's shape with the reduced dims of size
// 1 (any strides), v's stride-1 dim kept and, merged with the kept dims that continue it in memory,
// at least 16 elements long, at most 16384 results. Returns false, out untouched, where it does
// not take it. float16 and bfloat16 are summed in float32 (each run converted as it is read: the
// bits of the same values in float32) and rounded once: the CPU's sum of the same elements is
// within an ulp.
//
// The sum walks v in memory order: its dims, those that continue each other in memory merged
// (reduced with reduced, kept with kept), least contiguous first, each result's terms added in that
// order into float32 partial sums, one per chunk of the least contiguous reduced dim (a fixed
// number from v's size: about 128 KiB of it each, at most 16), which the threads share; the
// partials are then added in chunk order. The bits depend only on the elements' places in memory,
// not on the thread count nor on how the view splits or merges its dims, nor on the instruction set
// (the row kernels': rows_set_math picks it, tests run each).
bool columns_sum(const at::Tensor& v, c10::IntArrayRef reduced, const at::Tensor& out);

}  // namespace torch_layouts
