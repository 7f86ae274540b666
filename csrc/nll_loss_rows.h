// nll_loss's forward over rows (its replay in the runtime's front: strided views of device
// buffers), summed as ATen's CPU kernel sums them.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// output := the negated sum of self[b, target[b]] over the rows b whose target is not
// ignore_index (divided by their count for reduction 1, mean; as it is for 2, sum), and
// total_weight := that count, where self is a 2-D float32 view of at least one row, target a 1-D
// int64 view of one entry per row, output and total_weight float32 views of one element: true,
// ATen's bits (its cascade of partial sums: 8 levels, a level's sum carried into the next every
// 2^level_power rows), or ATen's IndexError naming a target out of bounds; else false, having
// written nothing (ATen's kernel then runs).
bool nll_loss_rows(const at::Tensor& self, const at::Tensor& target, int64_t reduction, int64_t ignore_index,
                   const at::Tensor& output, const at::Tensor& total_weight);

}  // namespace torch_layouts
