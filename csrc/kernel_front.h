// The runtime's front of the Python device kernels (ops/registry.py registers them here).
//
// A call of a geometry the front has no replay for runs the op's Python kernel, with the
// arguments torch.library would pass it. A kernel that read every operand where it lies offers
// the front a replay for its call (a pointwise op's or a reduction's CPU out= overload on views of
// the buffers here; clone; the row kernels, row_recipes.h; the tile GEMM, gemm_recipe.h; dropout's
// backward, dropout_recipe.h). Later calls of that geometry (the op, every tensor's geometry key
// and whether it shares the target's buffer, every Scalar's kind, every other argument's value)
// run the replay without entering Python (docs/design.md, "Replays: the kernels' front").
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <pybind11/pybind11.h>

#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensor_impl.h"

namespace torch_layouts {

// Registers `fn` as the spyre kernel of the ATen overload `name` ("add.Tensor"); with `counted`
// the front counts each call in kernel_counts() (else `fn` counts its own).
void register_front(const std::string& name, pybind11::object fn, bool counted);

// A registered front: its id (the first entry of its calls' replay keys), call count (kept by
// the front when `counted`) and the argument its op writes (in-place self, out=; -1: none).
struct FrontEntry {
  int64_t id;
  std::atomic<int64_t>* count;
  bool counted;
  int64_t target;
};

// Runs the replay kept for `front`'s call of `op` with `args`, if one serves it (and counts the
// call): appends the new results (a call that writes an argument returns that argument, which the
// caller returns); false: the boxed front runs the Python kernel, and `missed` (if given) gets the
// call's key when it has one (never in strict mode). The arguments are only read, so they may be
// lent uncounted (unboxed_front.cpp).
bool replay_call(const FrontEntry& front, const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                 std::vector<c10::IValue>& results, std::vector<int64_t>* missed = nullptr);

// The kernel of `op` for the hot schemas listed in unboxed_front.cpp: called unboxed, it lends its
// arguments to replay_call without taking references (each reference to a Python-held tensor
// takes the GIL), and boxes the call for the boxed front (`boxed()`, called once at registration)
// when no replay serves it. None for other schemas (registered boxed).
std::optional<torch::CppFunction> unboxed_front(const c10::OperatorHandle& op, const FrontEntry& front,
                                                const std::function<c10::BoxedKernel()>& boxed);

// A strided view of a device tensor's buffer.
struct BufferView {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

// Whether a copy's two views (source, destination) have one shape of `numel` elements, one
// stride per dim each (a clone's or a view backward's copy between two buffers).
bool copy_views_fit(const std::pair<BufferView, BufferView>& views, int64_t numel);

// A replay kept for one call geometry: the call run from its arguments, without Python.
class Replay {
 public:
  virtual ~Replay() = default;
  // Appends the op's new results (in its schema's order; none for the argument it writes, its
  // `target`, or -1). It only reads `args`, which an unboxed front lends without references: a copy
  // of one takes its own reference (for a Python-held tensor under the GIL), so hot replays make none.
  virtual void run(c10::ArrayRef<c10::IValue> args, int64_t target, std::vector<c10::IValue>& results) const = 0;
  // Whether it serves a call of its key with these arguments (else the Python kernel does).
  virtual bool accepts(c10::ArrayRef<c10::IValue> args) const { return true; }
  std::vector<LayoutPtr> layouts;  // the layout objects whose addresses are in the key stay theirs
};

// Offers `replay` for the call the innermost front serves on this thread when that call is of
// `op` ("aten::native_layer_norm"), writes none of its arguments (the replay makes new results; with
// `writes_self`, it writes argument 0 in place, an in-place op's self) and each (position, tensor)
// of `own` is its own argument.
bool offer_replay(std::shared_ptr<Replay> replay, const std::string& op,
                  const std::vector<std::pair<int64_t, at::Tensor>>& own, bool writes_self = false);

// Offers `replay` for the in-place call of `op` ("aten::_foreach_add_.List") the innermost front
// serves on this thread when each (position, tensors) of `lists` is its own list argument; the
// replay holds those tensors' layouts.
bool offer_list_replay(std::shared_ptr<Replay> replay, const std::string& op,
                       const std::vector<std::pair<int64_t, std::vector<at::Tensor>>>& lists);

// The operator named "aten::add.out" ("aten::relu": the default overload), if registered.
std::optional<c10::OperatorHandle> find_op(const std::string& name);

// A strided CPU view of a device tensor's buffer.
inline at::Tensor view_of(const at::Tensor& t, const BufferView& v) { return raw_view(t, v.sizes, v.strides, v.offset); }
// The same view borrowing the buffer: for one compute call on it while `t` lives.
inline at::Tensor borrowed_view_of(const at::Tensor& t, const BufferView& v) {
  return raw_view(t, v.sizes, v.strides, v.offset, /*owning=*/false);
}

// One operand's read: its argument position and its view; a staged operand is first copied into
// a new tensor of `staged` (the restickify or relayout the op's rules ask for; `restickify_bytes`
// counted each call when it is a restickify) and the view is of that copy.
struct RecipeRead {
  int64_t arg;
  BufferView view;
  LayoutPtr staged = nullptr;
  int64_t restickify_bytes = 0;
  int64_t dense_from = -1;  // >= 0: read from a contiguous copy of the view's dims from this one on
};

// A recipe offered by the Python kernel serving the innermost front call on this thread, for
// that call's geometry: `compute` (a CPU out= overload of the called op, "aten::add.out") runs on
// the call's own arguments, each read replaced by its view and each of `overrides` (argument
// position, value) by its value, with the results' views last; a functional `compute` (the op
// itself, "aten::mse_loss", whose out= overload would use its out= tensor as scratch) returns its
// new results, each copied into its view. The results are new tensors of
// `outs` (one view each in `result_views`: nll_loss_forward's output and total weight), or the
// call's target (no `outs`): the first argument written in place through its read (no view), or
// the out= tensor (its view). `args`: the kernel's positional
// arguments (each read's tensor must be the call's own). With `boxes` ((begin, count) per dim of
// the views; a view's dims of size 1 stay whole), the compute runs once per box on the views
// narrowed to it: a result's positions outside them (its padding) keep what they hold. With
// `pieces` (each a part's reads, of the same arguments as `reads`, and its result views), the
// compute runs once per piece on its own views instead: strided pieces of a refinement of the
// host shape (a comparison's bool result, whose view in its input's coordinates is no strided
// view). With `staged_outs` (per result, a layout or null), a result with a layout is computed
// into a new tensor of it, its view's, then copied into the result by the runtime (a gradient of
// classes in padded sticks, computed dense). `classes` (an nll_loss compute only; -1: none): its
// input's or gradient's view is a row view of classes in sticks with that many real classes a row
// (nll_loss_rows.h), which the runtime's row kernels compute on. `kept` (a functional compute
// only; none: every return): which of its returns are the results, the call's others undefined
// (an output_mask's; the call's key holds the mask). The compute may be another op than the
// called one where the CPU computes it so (kernel_front.cpp's computed_as: the called op's
// arguments, one of them perhaps inserted as an override). With `whole_if` (boxes only, no staged
// result), a replayed call whose listed scalar arguments are those values bit for bit runs the
// compute once on the whole views, padding included, into new results not padding-filled first:
// the offer's promise that the op keeps the pad value there (every operand read in the result's
// own layout). Returns whether it was kept.
bool offer_recipe(const std::vector<std::optional<at::Tensor>>& args, std::vector<RecipeRead> reads,
                  std::vector<LayoutPtr> outs, std::vector<BufferView> result_views,
                  const std::vector<std::pair<int64_t, pybind11::object>>& overrides, const std::string& compute,
                  const std::vector<std::vector<std::pair<int64_t, int64_t>>>& boxes = {},
                  std::vector<std::pair<std::vector<RecipeRead>, std::vector<BufferView>>> pieces = {},
                  std::vector<LayoutPtr> staged_outs = {}, int64_t classes = -1, const std::vector<bool>& kept = {},
                  const std::optional<std::vector<std::pair<int64_t, c10::Scalar>>>& whole_if = std::nullopt);

// A recipe offered by `clone`'s kernel for the call it serves (`src` its argument): a new tensor
// of `out` that the runtime copies `src` into (a kept view copy, csrc/view_copies.h), or, with
// `pieces` (strided views of `src`'s and the new tensor's buffers, one shape per pair, together
// every element once), a CPU copy between each pair.
bool offer_clone_recipe(const at::Tensor& src, LayoutPtr out,
                        std::vector<std::pair<BufferView, BufferView>> pieces = {});

// Same-device conversions (`_to_copy` to another dtype, which the runtime hands to Python outside
// the fronts): the kept conversion of `self`'s geometry to `dtype` (a new tensor of its layout, the
// input's strided pieces copied into it, converting; counted as an "aten::_to_copy" call), or none
// (never in strict mode); and keeping one (ops/elementwise.to_copy: `out` the result's layout,
// `pieces` views of both buffers that together hold every element once).
std::optional<at::Tensor> replay_conversion(const at::Tensor& self, c10::ScalarType dtype);
bool keep_conversion(const at::Tensor& self, c10::ScalarType dtype, LayoutPtr out,
                     std::vector<std::pair<BufferView, BufferView>> pieces);

// A recipe offered by cat's or stack's kernel (`op`: "aten::cat", "aten::stack") for the call it
// serves (`inputs` its list argument): a new tensor of `out`, each input copied into it through
// `pieces[i]` (strided views of the input's and the result's buffers, one shape per pair,
// together every element of the input once).
bool offer_concat_recipe(const std::string& op, const std::vector<at::Tensor>& inputs, LayoutPtr out,
                         std::vector<std::vector<std::pair<BufferView, BufferView>>> pieces);

// How many recipes are kept, and forgetting them (ops/elementwise.forget_recipes).
int64_t kept_recipes();
void forget_recipes();

// Calls per op ("aten::add.Tensor") since the last reset (ops/stats.py merges them).
std::map<std::string, int64_t> kernel_counts();
void reset_kernel_counts();

// Restickifies that replays did (an op's rule asks for them; ops/stats.py adds them to its own).
void count_restickify(int64_t nbytes);
std::pair<int64_t, int64_t> restickify_counts();  // (count, bytes)

// Strict layouts on this thread (ops/rules.strict_layouts): no recipe is replayed.
void set_strict(bool strict);

constexpr size_t kMaxRecipes = 4096;

}  // namespace torch_layouts
