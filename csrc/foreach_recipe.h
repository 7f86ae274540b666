// The _foreach ops' replay in the runtime's front (csrc/kernel_front.h): ops/foreach.py
// offers, for a call whose every index lines up (the lists' tensors whole buffers in one layout,
// or in two that one strided view of each reads in the same order: docs/design.md "Foreach ops"),
// each tensor's view of its buffer, the tensors it copied into the first list's layout first, and
// the indices whose padding it restored; later calls of that geometry run the CPU's own _foreach
// op on those views without Python.
#pragma once

#include "kernel_front.h"

namespace torch_layouts {

// One copy made before the op: the list argument's position, the index, the layout copied into.
struct ForeachCopy {
  int64_t arg;
  int64_t index;
  LayoutPtr layout;
};

// `lists`: (argument position, the call's tensors) of each list argument, the first one written;
// `views`: per list, each index's view of its tensor's buffer (a copied tensor's: of the copy), of
// one shape across the lists; `padded`: the first list's indices whose padding gets the pad value
// back after the op.
bool offer_foreach(const std::string& op, const std::vector<std::pair<int64_t, std::vector<at::Tensor>>>& lists,
                   std::vector<std::vector<BufferView>> views, std::vector<ForeachCopy> copies,
                   std::vector<int64_t> padded);

// The out-of-place unary _foreach ops' replay (_foreach_sqrt, Adam's): for the call of `op` on
// `tensors` (its list argument, position 0), each result a new tensor of `results[i]`'s layout
// written by `out_op` (the per-tensor op's out= overload, "aten::sqrt.out") from `views[i]` of the
// input's buffer into the same view of the result's; `padded`: the results whose padding gets the
// pad value back after.
bool offer_foreach_unary(const std::string& op, const std::vector<at::Tensor>& tensors, std::vector<BufferView> views,
                         std::vector<LayoutPtr> results, const std::string& out_op, std::vector<int64_t> padded);

}  // namespace torch_layouts
