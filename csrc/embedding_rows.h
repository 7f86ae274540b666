// The weight gradient of an embedding (aten::embedding_dense_backward) over rows of device
// buffers: a row per embedding, whatever tiles its elements lie in.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_layouts {

// grad_weight := zeros, then row k += row i of grad for every token i, in the indices' order,
// whose index k lies in [0, grad_weight.size(0)) and is not padding_idx: ATen's
// embedding_dense_backward_cpu without scale_grad_by_freq, bit for bit (the same additions in the
// same order: each row's tokens in index order, each addition rounded once). grad: a float32 view
// (the indices' dims, then a row's dims), grad_weight: a float32 view (rows, then the same row dims:
// a row of 256 in sticks of 32 is (8, 32)), both contiguous along the last dim; indices: a
// contiguous int64 CPU tensor. ValueError naming the operand that is not so.
void embedding_backward_rows(const at::Tensor& grad, const at::Tensor& indices, int64_t padding_idx,
                             const at::Tensor& grad_weight);

}  // namespace torch_layouts
