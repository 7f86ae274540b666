// The runtime's front of the Python device kernels (ops/registry.py registers them here).
//
// A call of a geometry the front has no recipe for runs the op's Python kernel, with the
// arguments torch.library would pass it. A kernel that read every operand in place (ops/
// elementwise.py) offers the front a recipe for its call: the strided view of each operand's
// buffer and the CPU out= overload that computes on them. Later calls of that geometry (the op,
// every argument's geometry key or scalar kind, which arguments share the target's buffer)
// replay the recipe without entering Python (docs/design.md, "Replays").
#pragma once

#include <ATen/ATen.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensor_impl.h"

namespace torch_layouts {

// Registers `fn` as the spyre kernel of the ATen overload `name` ("add.Tensor"); with `counted`
// the front counts each call in kernel_counts() (else `fn` counts its own).
void register_front(const std::string& name, pybind11::object fn, bool counted);

// A strided view of a device tensor's buffer.
struct BufferView {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

// One operand's read: its argument position and its view.
struct RecipeRead {
  int64_t arg;
  BufferView view;
};

// A recipe offered by the Python kernel serving the innermost front call on this thread, for
// that call's geometry: `compute` (a CPU out= overload of the called op, "aten::add.out") runs on
// the call's own arguments, each read replaced by its view and each of `overrides` (argument
// position, value) by its value, with the result's view last. The result is a new tensor of
// `out`, or the call's target (nullptr): the first argument written in place through its read, or
// the out= tensor; `result_view` views it (absent: in place). `args`: the kernel's positional
// arguments (each read's tensor must be the call's own). Returns whether it was kept.
bool offer_recipe(const std::vector<std::optional<at::Tensor>>& args, std::vector<RecipeRead> reads, LayoutPtr out,
                  std::optional<BufferView> result_view,
                  const std::vector<std::pair<int64_t, pybind11::object>>& overrides, const std::string& compute);

// A recipe offered by `clone`'s kernel for the call it serves (`src` its argument): a new tensor
// of `out` that the runtime copies `src` into (a kept view copy, csrc/view_copies.h).
bool offer_clone_recipe(const at::Tensor& src, LayoutPtr out);

// How many recipes are kept, and forgetting them (ops/elementwise.forget_recipes).
int64_t kept_recipes();
void forget_recipes();

// Calls per op ("aten::add.Tensor") since the last reset (ops/stats.py merges them).
std::map<std::string, int64_t> kernel_counts();
void reset_kernel_counts();

// Strict layouts on this thread (ops/rules.strict_layouts): no recipe is replayed.
void set_strict(bool strict);

constexpr size_t kMaxRecipes = 4096;

}  // namespace torch_layouts
