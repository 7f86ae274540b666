// Float32 add, sub, mul and div of CPU views of device buffers, run by run: every such op the
// replays run (kernel_front.cpp). A bias added to a (batch, tokens, features) tensor in Spyre's
// default layout (the batch dim between the stick columns and the stick) would otherwise be read
// densified (ops/broadcasts.py: a copy per call), and a small op would set up ATen's
// TensorIterator over the layout's dims (x * x of 2x6x16: 17.8 -> 13.8 thousand instructions).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

namespace torch_layouts {

enum class Arithmetic { kAdd, kSub, kMul, kDiv };

// The arithmetic an op's compute does ("aten::add.out", "aten::div.out", ...), or nullopt (div
// with a rounding mode is "aten::div.out_mode": nullopt).
std::optional<Arithmetic> arithmetic_of(const std::string& op);

// out := self `op` other (add and sub: self + alpha * other, alpha other than 1 where ATen's kernels
// fuse it, aten_fuses_scaled_add, and both operands vary along the run; mul and div: alpha absent
// or 1), where self, other and out are
// float32 CPU views of one shape (broadcast dims of stride 0) or 0-dim CPU numbers (float32, float64
// or int64, cast to float32 as ATen casts a wrapped Python number), one dim of at least 8
// elements has stride 1 in out and stride 1 or 0 in self and other (not 0 in both), and out
// shares no memory with the operands unless it is self itself: true, the elements ATen's op
// gives; else false, having written nothing.
bool arithmetic_runs(Arithmetic op, const at::Tensor& self, const at::Tensor& other, const at::Tensor& out,
                     const c10::IValue& alpha = c10::IValue());

// a[j sa] += alpha * b[j sb] for j < n in one rounding, as ATen's AVX2 and AVX-512 kernels add
// with alpha, in the instruction set the ISA tables chose; null where ATen's kernels round twice
// (aten_fuses_scaled_add: the caller runs ATen's op).
using StridedScaledAdd = void (*)(float* a, int64_t sa, const float* b, int64_t sb, float alpha, int64_t n);
StridedScaledAdd strided_scaled_add_kernel();

}  // namespace torch_layouts
