// nll_loss's forward and backward over rows (their replays in the runtime's front: strided views
// of device buffers), computed as ATen's CPU kernels compute them.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// A float32 view of rows whose classes are its dims after the first: class c of row b is element
// c, in row-major order over those dims, of self[b] (a 2-D (rows, classes) view, or a row view of
// classes in sticks: (rows, sticks, stick)). `classes`: a row's real classes, its first ones (the
// last stick padded: 1000 classes in sticks of 32); -1: every element of the row.

// output := the negated sum of self[b, target[b]] over the rows b whose target is not
// ignore_index (divided by their count for reduction 1, mean; as it is for 2, sum), and
// total_weight := that count, where self is a float32 view of classes (above) of at least one row,
// target a 1-D int64 view of one entry per row, output and total_weight float32 views of one
// element: true, ATen's bits (its cascade of partial sums: 8 levels, a level's sum carried into
// the next every 2^level_power rows), or ATen's IndexError naming a target out of bounds; else
// false, having written nothing (ATen's kernel then runs, where self is 2-D).
bool nll_loss_rows(const at::Tensor& self, const at::Tensor& target, int64_t reduction, int64_t ignore_index,
                   const at::Tensor& output, const at::Tensor& total_weight, int64_t classes = -1);

// grad_input := zeros but grad_input[b, target[b]] = -(grad_output / total_weight) (reduction 1,
// mean) or -grad_output (2, sum) on the rows whose target is not ignore_index, where grad_input is
// a float32 view of classes (above; a padded stick's padding is not written) of at least one row,
// target a 1-D int64 view of one entry per row, grad_output and total_weight float32 views of one
// element: true, ATen's bits, or its IndexError naming a target out of bounds; else false, having
// written nothing (ATen's kernel then runs, where grad_input is 2-D).
bool nll_loss_backward_rows(const at::Tensor& grad_output, const at::Tensor& target, int64_t reduction,
                            int64_t ignore_index, const at::Tensor& total_weight, const at::Tensor& grad_input,
                            int64_t classes = -1);

}  // namespace torch_layouts
