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

// One operand's read: argument position, strides and offset of its view in the recipe's shape.
struct RecipeRead {
  int64_t arg;
  std::vector<int64_t> strides;
  int64_t offset;
};

// A recipe offered by the Python kernel serving the innermost front call on this thread, for
// that call's geometry. `args`: the kernel's positional arguments (each read's tensor must be
// the call's own); `out`: the layout of a new result (nullptr: the call's target is written:
// the first argument in place, or the out= tensor at `target_read`); `compute`: the CPU out=
// overload ("aten::add.out") run on the views, the result's view last. Returns whether it was kept.
bool offer_recipe(const std::vector<std::optional<at::Tensor>>& args, std::vector<int64_t> shape,
                  std::vector<RecipeRead> reads, LayoutPtr out,
                  std::optional<std::pair<std::vector<int64_t>, int64_t>> target_read, const std::string& compute);

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
