// Comparisons of float32 views into bool ones, run by run (a comparison's replay in the runtime's
// front: its pieces, strided views of device buffers).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>

namespace torch_layouts {

enum class Comparison { kEq, kNe, kLt, kLe, kGt, kGe };

// The comparison an op computes ("aten::gt.Tensor_out", "aten::le.Scalar_out", ...), or nullopt.
std::optional<Comparison> comparison_of(const std::string& op);

// out := self `c` other, where self is a float32 view, other a float32 view of its shape or a
// number (a Scalar, or a 0-dim tensor: compared as float32, as ATen's comparisons cast it), out a
// bool view of its shape, and one dim of at least 8 elements runs contiguous in all three: true,
// the elements ATen's comparison gives (NaN compares unequal); else false, having written nothing.
bool compare_runs(Comparison c, const at::Tensor& self, const c10::IValue& other, const at::Tensor& out);

}  // namespace torch_layouts
