#include "kernel_front.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/util/strides.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/tensor_layouts.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "arithmetic_runs.h"
#include "bounded_table.h"
#include "comparisons.h"
#include "device_memory.h"
#include "gathers.h"
#include "nll_loss_rows.h"
#include "piece_copies.h"
#include "runtime_stats.h"

namespace py = pybind11;

namespace torch_layouts {
namespace {

// A pointwise op's or a reduction's recipe: the CPU out= overload on views of the buffers.
class AtenRecipe final : public Replay {
 public:
  // The compute's views, one set per box of real positions (a single set: the whole views).
  struct Part {
    std::vector<RecipeRead> reads;
    std::vector<BufferView> results;   // each result's view; none: the target's read (in place)
  };
  std::vector<Part> parts;
  std::vector<LayoutPtr> outs;         // the new results' layouts; none: the target is written
  std::vector<LayoutPtr> staged_outs;  // per result, where it is computed first (null: in place)
  std::optional<c10::OperatorHandle> compute;  // the CPU out= overload, or a functional one
  bool functional = false;             // the compute returns its results, copied into their views
  std::vector<bool> kept;              // which of its returns are the results (none: all), the others undefined
  // Per result of a functional compute: its buffer is its row-major bytes, so the CPU tensor the
  // compute returns becomes it where the compute allocated it shaped as device memory (adopted).
  std::vector<bool> adopt;
  // The compute on the whole views, padding included, for a call whose listed scalar arguments
  // are these values bit for bit (the op keeps the pad value there with them: ops/elementwise.py
  // checked); new results are then not padding-filled first. Empty: the parts always.
  std::vector<Part> whole;
  std::vector<std::pair<int64_t, c10::Scalar>> whole_if;
  size_t compute_args = 0;             // arguments passed before the result's view
  std::vector<bool> wrap;              // scalar arguments the compute takes as (wrapped-number) tensors
  std::vector<bool> viewed;            // arguments every part replaces by its read's view
  std::vector<std::pair<int64_t, c10::IValue>> overrides;
  int64_t inserted = -1;               // a compute argument the call lacks (an override); the call's shift past it
  std::optional<Comparison> compare;   // a comparison's compute, run by compare_runs where it takes the views
  std::optional<Arithmetic> arithmetic;  // add, sub, mul, div: run by arithmetic_runs where it takes them
  bool gather = false;                 // index_select's compute, run by gather_slices where it takes the views
  bool nll_loss = false;               // nll_loss_forward's compute, run by nll_loss_rows where it takes the views
  bool nll_loss_backward = false;      // nll_loss_backward's, run by nll_loss_backward_rows likewise
  int64_t classes = -1;                // their views' real classes a row (nll_loss_rows.h; -1: every element)

  void run(c10::ArrayRef<c10::IValue> args, int64_t target, std::vector<c10::IValue>& results) const override;

  // The call's argument that the compute's argument `i` is (-1: the inserted one).
  int64_t source(size_t i) const {
    const auto k = static_cast<int64_t>(i);
    return inserted < 0 || k < inserted ? k : k == inserted ? -1 : k - 1;
  }
};

// clone's recipe: a new tensor of `out` that the runtime copies the argument into.
class CloneRecipe final : public Replay {
 public:
  LayoutPtr out;
  std::vector<std::pair<BufferView, BufferView>> pieces;  // the source's and the result's views; none: the runtime's copy

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    results.emplace_back(copy_of(args[0].toTensor()));
  }

  at::Tensor copy_of(const at::Tensor& src) const {
    at::Tensor result = new_device_tensor(out, src.device());
    if (pieces.empty()) {
      result.copy_(src);
    } else {
      copy_pieces(result, src, pieces);
    }
    return result;
  }
};

// cat's or stack's recipe: a new tensor of `out`, each listed input copied into its part by
// piece copies between the two buffers (converting where the dtypes differ: piece_copies.h).
class ConcatRecipe final : public Replay {
 public:
  LayoutPtr out;
  std::vector<std::vector<std::pair<BufferView, BufferView>>> pieces;  // per input: its and the result's views

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const c10::List<at::Tensor> inputs = args[0].toTensorList();
    at::Tensor result = new_device_tensor(out, inputs.get(0).device());
    for (size_t i = 0; i < pieces.size(); ++i) copy_pieces(result, inputs.get(i), pieces[i]);
    results.emplace_back(std::move(result));
  }
};

// One front's call being served by its Python kernel on this thread (offer_recipe's target).
struct Call {
  const c10::OperatorHandle* op;
  const std::vector<c10::IValue>* arguments;
  int64_t target;
  std::shared_ptr<const Replay> offered;
};

thread_local std::vector<Call*> t_calls;
thread_local bool t_strict = false;

BoundedTable<std::shared_ptr<const Replay>> g_recipes(kMaxRecipes);

// Each front's op name and call count; fronts are never unregistered.
std::mutex g_fronts_mutex;
std::deque<std::pair<std::string, std::atomic<int64_t>>> g_counts;
std::atomic<int64_t> g_restickify_count{0}, g_restickify_bytes{0};

// The argument an op writes (the self of an in-place op, the out= tensor), or -1.
int64_t written_argument(const c10::FunctionSchema& schema) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) return static_cast<int64_t>(i);
  }
  return -1;
}

// The call's geometry: the op and whether grad mode is on (a CPU kernel may return more with it:
// mkldnn_rnn_layer's workspace), then per argument its geometry key (device tensors with layouts)
// and whether it shares the target's buffer; a tensor list's geometry keys and whether each shares
// the first list's tensor's buffer; a Scalar's (or a Scalar list's) kind (a wrapped number's
// dtype), which the compute takes as it comes; any other value (dims, keepdim, a dtype, a memory
// format, a rounding mode), which a recipe may depend on. Written into `key`; false when an
// argument is anything else (a CPU tensor): no recipe is kept or replayed for such calls.
bool call_key(std::vector<int64_t>& key, int64_t front, const c10::FunctionSchema& schema,
              c10::ArrayRef<c10::IValue> args, int64_t target) {
  key.clear();
  key.insert(key.end(), {front, c10::GradMode::is_enabled()});
  const void* target_data = target >= 0 && args[target].isTensor() && args[target].toTensor().defined()
                                ? args[target].toTensor().storage().data()
                                : nullptr;
  // A tensor's geometry key after its length; false when it carries no layout.
  auto append_sized = [&key](const at::Tensor& t) {
    key.push_back(0);
    const size_t start = key.size();
    if (!append_geometry_key(key, t)) return false;
    key[start - 1] = static_cast<int64_t>(key.size() - start);
    return true;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& a = args[i];
    if (a.isTensor()) {
      const at::Tensor& t = a.toTensor();
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) {  // a Python number (the kernel's too)
        key.insert(key.end(), {-8, static_cast<int64_t>(t.scalar_type())});
        continue;
      }
      if (!t.defined()) {  // an absent optional tensor as autograd passes it: the kernel gets None
        key.push_back(-6);
        continue;
      }
      if (!t.is_privateuseone()) return false;
      key.push_back(-1);
      if (!append_sized(t)) return false;
      key.push_back(target_data != nullptr && t.storage().data() == target_data);
      continue;
    }
    if (a.isTensorList()) {  // a _foreach list: each tensor's geometry, whether it shares list 0's buffer
      const c10::List<at::Tensor> list = a.toTensorList();
      const c10::IValue& first = args[target >= 0 ? target : i];
      const c10::List<at::Tensor> lead = first.isTensorList() ? first.toTensorList() : list;
      if (lead.size() != list.size()) return false;
      key.insert(key.end(), {-11, static_cast<int64_t>(list.size())});
      for (size_t j = 0; j < list.size(); ++j) {
        const at::Tensor t = list[j];
        if (!t.defined() || !t.is_privateuseone()) return false;
        if (!append_sized(t)) return false;
        key.push_back(t.storage().data() == lead.get(j).storage().data());
      }
      continue;
    }
    c10::TypePtr type = schema.arguments()[i].real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    const bool scalar = type->kind() == c10::TypeKind::NumberType;
    if (a.isNone()) {
      key.push_back(-6);
    } else if (scalar && (a.isDouble() || a.isInt() || a.isBool() || a.isComplexDouble())) {
      key.push_back(a.isDouble() ? -2 : a.isInt() ? -3 : a.isBool() ? -4 : -5);
    } else if (a.isInt() || a.isBool()) {
      key.insert(key.end(), {-3, a.isBool() ? static_cast<int64_t>(a.toBool()) : a.toInt()});
    } else if (a.isDouble()) {
      const double d = a.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      key.insert(key.end(), {-2, bits});
    } else if (auto list_type = type->cast<c10::ListType>();
               list_type && list_type->getElementType()->kind() == c10::TypeKind::NumberType && a.isList()) {
      // a Scalar[] (a _foreach op's per-tensor scalars): their kinds; the values pass through
      const auto list = a.toListRef();
      key.insert(key.end(), {-12, static_cast<int64_t>(list.size())});
      for (const c10::IValue& v : list) {
        if (!(v.isDouble() || v.isInt() || v.isBool() || v.isComplexDouble())) return false;
        key.push_back(v.isDouble() ? -2 : v.isInt() ? -3 : v.isBool() ? -4 : -5);
      }
    } else if (a.isBoolList()) {
      const auto list = a.toBoolList();
      key.insert(key.end(), {-10, static_cast<int64_t>(list.size())});
      for (bool b : list) key.push_back(b);
    } else if (a.isIntList()) {
      const auto list = a.toIntVector();
      key.insert(key.end(), {-9, static_cast<int64_t>(list.size())});
      key.insert(key.end(), list.begin(), list.end());
    } else if (a.isString()) {
      const std::string& str = a.toStringRef();
      key.insert(key.end(), {-7, static_cast<int64_t>(str.size())});
      key.insert(key.end(), str.begin(), str.end());
    } else {
      return false;
    }
  }
  return true;
}

// v's values read from a contiguous copy of its dims from k on, stride 0 along the others (a
// broadcast operand: ops/broadcasts.py).
at::Tensor densified(const at::Tensor& v, int64_t k) {
  const at::Tensor block = v.as_strided(v.sizes().slice(k), v.strides().slice(k), v.storage_offset()).contiguous();
  std::vector<int64_t> strides(k, 0);
  strides.insert(strides.end(), block.strides().begin(), block.strides().end());
  return block.as_strided(v.sizes(), strides);
}

// A call's argument is the Python number `value` (a Scalar, or the wrapped-number tensor
// PyTorch's argument parser makes of it for a Tensor parameter): its kind and its bits (0.5 and
// -0.5, 0.0 and -0.0 differ).
bool same_scalar(const c10::IValue& arg, const c10::Scalar& value) {
  c10::Scalar given;
  if (arg.isTensor()) {
    const at::Tensor& t = arg.toTensor();
    if (!t.unsafeGetTensorImpl()->is_wrapped_number()) return false;
    given = t.item();
  } else if (arg.isScalar()) {
    given = arg.toScalar();
  } else {
    return false;
  }
  if (given.isFloatingPoint()) {
    return value.isFloatingPoint() && std::bit_cast<uint64_t>(given.toDouble()) == std::bit_cast<uint64_t>(value.toDouble());
  }
  if (given.isBoolean()) return value.isBoolean() && given.toBool() == value.toBool();
  return given.isIntegral(/*includeBool=*/false) && value.isIntegral(/*includeBool=*/false) &&
         given.toLong() == value.toLong();
}

// A functional compute's result `returned` (a CPU tensor) as a new tensor on `device` of `layout`,
// a layout whose buffer is its row-major bytes, where the compute allocated it shaped as device
// memory and nothing else holds it: the kernel's bytes become the buffer with no copy. Undefined
// otherwise.
at::Tensor adopted(const at::Tensor& returned, const LayoutPtr& layout, c10::DeviceIndex device) {
  if (!returned.defined() || !returned.device().is_cpu() || returned.use_count() != 1 ||
      returned.scalar_type() != layout->dtype || returned.sizes() != c10::IntArrayRef(layout->base_size) ||
      !returned.is_contiguous() || returned.storage_offset() != 0 ||
      static_cast<int64_t>(returned.storage().nbytes()) != layout->storage_nbytes) {
    return at::Tensor();
  }
  std::optional<c10::DataPtr> data = adopt_host_storage(returned.storage(), device);
  if (!data) return at::Tensor();
  count(Counter::AdoptedBytes, layout->storage_nbytes);
  return device_tensor_from(layout, std::move(*data));
}

// Whether a functional compute's result of `layout`, viewed as `view`, can be adopted: the view is
// the whole buffer in row-major order, which holds nothing else (no padding).
bool adoptable(const BoundLayout& layout, const BufferView& view) {
  return row_major_only(layout) && view.offset == 0 && view.sizes == layout.base_size &&
         c10::IntArrayRef(view.strides) == c10::IntArrayRef(c10::contiguous_strides(layout.base_size));
}

// The new results, or the call's target written in place, with its view passed last to the compute.
// No argument tensor is copied: a copy of a Python-held tensor takes the GIL (PyTorch's PyObject
// preservation), and the unboxed front lends the arguments uncounted.
void AtenRecipe::run(c10::ArrayRef<c10::IValue> args, int64_t target, std::vector<c10::IValue>& results) const {
  // The call's arguments, the read tensors left out (their views replace them); those the compute
  // takes past them (relu's clamp_min bound) are overrides.
  std::vector<c10::IValue> stack(compute_args);
  for (size_t i = 0; i < compute_args; ++i) {
    const int64_t from = source(i);
    if (viewed[i] || from < 0 || static_cast<size_t>(from) >= args.size()) continue;
    if (wrap[i]) {  // as PyTorch's argument parser passes a Python number to a Tensor parameter
      at::Tensor scalar = at::scalar_to_tensor(args[from].toScalar());
      scalar.unsafeGetTensorImpl()->set_wrapped_number(true);
      stack[i] = std::move(scalar);
    } else {
      stack[i] = args[from];
    }
  }
  for (const auto& [i, value] : overrides) stack[i] = value;
  const c10::Device device = args[parts.front().reads.front().arg].toTensor().device();
  const bool on_whole = !whole.empty() && std::all_of(whole_if.begin(), whole_if.end(), [&](const auto& w) {
    return same_scalar(args[w.first], w.second);
  });
  const std::vector<Part>& runs = on_whole ? whole : parts;
  std::vector<at::Tensor> values, staged;  // the new results (undefined: one to adopt); where each is computed first
  const bool adopting = std::find(adopt.begin(), adopt.end(), true) != adopt.end();
  for (size_t i = 0; i < outs.size(); ++i) {
    values.push_back(adopting && adopt[i] ? at::Tensor() : new_device_tensor(outs[i], device, /*fill=*/!on_whole));
    const bool staging = i < staged_outs.size() && staged_outs[i];
    staged.push_back(staging ? new_device_tensor(staged_outs[i], device) : at::Tensor());
  }
  // What the compute writes: a result (made here if it was to be adopted), its staging, or the
  // target in place.
  auto written = [&](size_t i) -> const at::Tensor& {
    if (outs.empty()) return args[target].toTensor();
    if (staged[i].defined()) return staged[i];
    if (!values[i].defined()) values[i] = new_device_tensor(outs[i], device);
    return values[i];
  };
  std::vector<at::Tensor> sources;  // the staged operands' copies, made once for every part
  for (const RecipeRead& read : runs.front().reads) {
    if (!read.staged) continue;
    sources.resize(args.size());
    sources[read.arg] = new_device_tensor(read.staged, device).copy_(args[read.arg].toTensor());
    if (read.restickify_bytes > 0) count_restickify(read.restickify_bytes);
  }
  for (size_t p = 0; p < runs.size(); ++p) {
    const Part& part = runs[p];
    std::vector<c10::IValue> call = p + 1 < runs.size() ? stack : std::move(stack);  // the last part takes it
    for (const RecipeRead& read : part.reads) {  // the arguments, sources and results outlive the call
      call[read.arg] = borrowed_view_of(read.staged ? sources[read.arg] : args[read.arg].toTensor(), read.view);
    }
    // float32 arithmetic run by run: a broadcast read as it is, with no densified copy (x + bias of
    // 8x128x256: 28 -> 24 us), and no TensorIterator set up over the layout's dims (a 16x16 a * b).
    if (arithmetic && !functional && part.results.size() <= 1 && call.size() >= 2 && call[0].isTensor() &&
        call[1].isTensor()) {
      const at::Tensor out =
          part.results.empty() ? call[target].toTensor() : borrowed_view_of(written(0), part.results[0]);
      const c10::IValue alpha = call.size() > 2 ? call[2] : c10::IValue();
      if (arithmetic_runs(*arithmetic, call[0].toTensor(), call[1].toTensor(), out, alpha)) continue;
    }
    for (const RecipeRead& read : part.reads) {
      if (read.dense_from >= 0) call[read.arg] = densified(call[read.arg].toTensor(), read.dense_from);
    }
    if (functional) {  // the returned CPU tensors adopted, or copied into the results' views (the kept ones)
      {
        std::optional<DeviceShapedHostScope> shaped;
        if (adopting) shaped.emplace(device.index());
        compute->callBoxed(call);
      }
      for (size_t i = 0, k = 0; i < call.size(); ++i) {
        if (!kept.empty() && !kept[i]) continue;
        const at::Tensor returned = std::move(call[i]).toTensor();  // (the only reference an adoption takes)
        const bool taken = !values[k].defined() && (values[k] = adopted(returned, outs[k], device.index())).defined();
        if (!taken) borrowed_view_of(written(k), part.results[k]).copy_(returned);
        ++k;
      }
      continue;
    }
    if (part.results.empty()) call.emplace_back(call[target].toTensor());
    for (size_t i = 0; i < part.results.size(); ++i) call.emplace_back(borrowed_view_of(written(i), part.results[i]));
    if (compare && call.size() == 3 && call[0].isTensor() &&
        compare_runs(*compare, call[0].toTensor(), call[1], call[2].toTensor())) {
      continue;  // ATen's comparisons into bool run element by element (a > b of 1024x256 float32: 72 us)
    }
    if (gather && call.size() == 4 && call[1].isInt() && args.size() >= 3 && args[1].isInt()) {
      try {  // ATen's index_select of strided views: 64 rows of sticks 6.4 us (2.6 contiguous)
        if (!gather_slices(call[0].toTensor(), call[1].toInt(), call[2].toTensor(), call[3].toTensor())) {
          compute->callBoxed(call);
        }
      } catch (const c10::Error&) {  // an index out of range: the CPU's own error (it depends on the dim)
        at::index_select(args[0].toTensor().cpu(), args[1].toInt(), args[2].toTensor().cpu());
        throw;
      }
      continue;
    }
    // ATen's nll_loss makes its strided input contiguous first (32x10 float32 in sticks: 3.3 us
    // against 1.4 on a contiguous tensor); its backward zeroes the strided view with a
    // TensorIterator before writing one element a row.
    auto absent = [](const c10::IValue& v) { return v.isNone() || (v.isTensor() && !v.toTensor().defined()); };
    if (nll_loss && call.size() == 7 && call[0].isTensor() && call[1].isTensor() && absent(call[2]) &&
        call[3].isInt() && call[4].isInt() &&
        nll_loss_rows(call[0].toTensor(), call[1].toTensor(), call[3].toInt(), call[4].toInt(), call[5].toTensor(),
                      call[6].toTensor(), classes)) {
      continue;
    }
    if (nll_loss_backward && call.size() == 8 && call[0].isTensor() && call[2].isTensor() && absent(call[3]) &&
        call[4].isInt() && call[5].isInt() && call[6].isTensor() &&
        nll_loss_backward_rows(call[0].toTensor(), call[2].toTensor(), call[4].toInt(), call[5].toInt(),
                               call[6].toTensor(), call[7].toTensor(), classes)) {
      continue;
    }
    // a row view of classes in sticks (classes set) is no operand of ATen's kernel: the offer
    // (ops/losses.py) made sure the row kernels take its calls
    TORCH_INTERNAL_ASSERT(classes < 0 || !(nll_loss || nll_loss_backward), "nll_loss row views the row kernels refused");
    compute->callBoxed(call);
  }
  for (size_t i = 0, k = 0; i < std::max(values.size(), kept.size()); ++i) {
    if (!kept.empty() && !kept[i]) {  // a return the op leaves undefined
      results.emplace_back(at::Tensor());
      continue;
    }
    if (staged[k].defined()) values[k].copy_(staged[k]);  // the runtime's copy into its layout
    results.emplace_back(std::move(values[k++]));
  }
}

// The views of `part` narrowed to `box` ((begin, count) per dim of every view; a view's dim of
// size 1, a reduced dim of a reduction's result, stays whole; so does a 0-dim operand's view).
AtenRecipe::Part narrowed(const AtenRecipe::Part& part, const std::vector<std::pair<int64_t, int64_t>>& box) {
  auto narrow = [&](const BufferView& v) {
    if (v.sizes.empty()) return v;
    BufferView b{{}, v.strides, v.offset};
    for (size_t d = 0; d < box.size(); ++d) {
      const bool whole = v.sizes[d] == 1;
      b.sizes.push_back(whole ? 1 : box[d].second);
      b.offset += whole ? 0 : box[d].first * v.strides[d];
    }
    return b;
  };
  AtenRecipe::Part out;
  for (const RecipeRead& read : part.reads) {
    out.reads.push_back(RecipeRead{read.arg, narrow(read.view), read.staged, read.restickify_bytes});
  }
  for (const BufferView& result : part.results) out.results.push_back(narrow(result));
  return out;
}

// Whether `t` is the call's argument i (the same tensor).
bool is_argument(const std::vector<c10::IValue>& arguments, int64_t i, const at::Tensor& t) {
  return i >= 0 && static_cast<size_t>(i) < arguments.size() && arguments[i].isTensor() &&
         arguments[i].toTensor().unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
}

// The replay holds the layout objects of the call's device tensors (their addresses are in its key).
void hold_layouts(Replay& replay, const std::vector<c10::IValue>& arguments) {
  for (const c10::IValue& a : arguments) {
    if (a.isTensor() && a.toTensor().defined() && a.toTensor().is_privateuseone()) {
      replay.layouts.push_back(layout_of(a.toTensor()));
    }
  }
}

// The Python objects torch.library passes a kernel: positional arguments up to the last one not
// at its default, keyword-only ones by name unless at their default; dtypes, layouts and memory
// formats as their torch objects.
std::pair<py::tuple, py::dict> python_arguments(const c10::FunctionSchema& schema,
                                                const std::vector<c10::IValue>& args) {
  const auto& formals = schema.arguments();
  auto is_default = [&](size_t i) {
    const auto& d = formals[i].default_value();
    return d.has_value() && *d == args[i];
  };
  auto convert = [&](size_t i) -> py::object {
    const c10::IValue& v = args[i];
    if (v.isNone()) return py::none();
    c10::TypePtr type = formals[i].real_type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    switch (type->kind()) {
      case c10::TypeKind::ScalarTypeType:
        return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(v.toScalarType())));
      case c10::TypeKind::LayoutType:
        return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPLayout(v.toLayout())));
      case c10::TypeKind::MemoryFormatType:
        return py::reinterpret_borrow<py::object>(torch::utils::getTHPMemoryFormat(v.toMemoryFormat()));
      default:
        return torch::jit::toPyObject(v);
    }
  };
  size_t keyword_start = args.size();
  while (keyword_start > 0 && formals[keyword_start - 1].kwarg_only()) --keyword_start;
  size_t positional = keyword_start;
  while (positional > 0 && is_default(positional - 1)) --positional;
  py::tuple positional_args(positional);
  for (size_t i = 0; i < positional; ++i) positional_args[i] = convert(i);
  py::dict keywords;
  for (size_t i = keyword_start; i < args.size(); ++i) {
    if (!is_default(i)) keywords[py::str(formals[i].name())] = convert(i);
  }
  return {std::move(positional_args), std::move(keywords)};
}

class Front final : public c10::OperatorKernel {
 public:
  Front(FrontEntry entry, py::object fn) : entry_(entry), fn_(fn.release().ptr()) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const c10::FunctionSchema& schema = op.schema();
    const size_t n = schema.arguments().size();
    std::vector<c10::IValue> results;
    std::vector<int64_t> key;  // the call's, kept with the recipe its Python kernel offers
    const int64_t target = entry_.target;
    if (replay_call(entry_, op, torch::jit::last(*stack, n), results, &key)) {
      if (target >= 0 && schema.returns().size() == 1) {  // an in-place or out= op returns what it wrote
        results.push_back(torch::jit::last(*stack, n)[target]);
      }
      torch::jit::drop(*stack, n);
      for (c10::IValue& r : results) stack->push_back(std::move(r));
      return;
    }
    if (entry_.counted) entry_.count->fetch_add(1, std::memory_order_relaxed);
    std::vector<c10::IValue> arguments = torch::jit::pop(*stack, n);
    py::gil_scoped_acquire gil;
    auto [args, kwargs] = python_arguments(schema, arguments);
    Call call{&op, &arguments, target, nullptr};
    t_calls.push_back(&call);
    PyObject* out = PyObject_Call(fn_, args.ptr(), kwargs.ptr());
    t_calls.pop_back();
    if (out == nullptr) throw python_error();
    py::object result = py::reinterpret_steal<py::object>(out);
    if (call.offered && !key.empty()) g_recipes.keep(std::move(key), std::move(call.offered));
    const auto& returns = schema.returns();
    if (returns.size() == 1) {
      stack->push_back(torch::jit::toIValue(result, returns[0].real_type()));
    } else if (!returns.empty()) {
      py::sequence values = py::cast<py::sequence>(result);
      TORCH_CHECK(values.size() == returns.size(), schema.name(), ": the kernel returned ", values.size(),
                  " values, the schema has ", returns.size());
      for (size_t i = 0; i < returns.size(); ++i) stack->push_back(torch::jit::toIValue(values[i], returns[i].real_type()));
    }
  }

 private:
  FrontEntry entry_;
  PyObject* fn_;  // owned for the life of the process (kernels are never unregistered)
};

torch::Library& library() {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  return *lib;
}

}  // namespace

bool replay_call(const FrontEntry& front, const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                 std::vector<c10::IValue>& results, std::vector<int64_t>* missed) {
  if (t_strict) return false;
  // The thread's key buffer, its capacity kept from call to call (a nested call's key is built
  // after this one's last use, in recipe->run).
  thread_local std::vector<int64_t> key;
  if (!call_key(key, front.id, op.schema(), args, front.target)) return false;
  const std::shared_ptr<const Replay> recipe = g_recipes.find(key).value_or(nullptr);
  if (!recipe || !recipe->accepts(args)) {
    if (missed != nullptr) *missed = key;
    return false;
  }
  if (front.counted) front.count->fetch_add(1, std::memory_order_relaxed);
  recipe->run(args, front.target, results);
  return true;
}

void register_front(const std::string& name, py::object fn, bool counted) {
  const std::optional<c10::OperatorHandle> op = find_op("aten::" + name);
  TORCH_CHECK_VALUE(op, "no ATen operator aten::", name, " to register a spyre kernel for");
  FrontEntry entry{0, nullptr, counted, written_argument(op->schema())};
  {
    std::lock_guard<std::mutex> lock(g_fronts_mutex);
    entry.id = static_cast<int64_t>(g_counts.size());
    entry.count = &g_counts.emplace_back(std::piecewise_construct, std::forward_as_tuple("aten::" + name),
                                         std::forward_as_tuple(0)).second;
  }
  auto front = std::make_unique<Front>(entry, std::move(fn));
  std::optional<torch::CppFunction> unboxed =
      unboxed_front(*op, entry, [&front] { return c10::BoxedKernel::makeFromFunctor(std::move(front)); });
  if (unboxed) {
    library().impl(name.c_str(), std::move(*unboxed));
    return;
  }
  library().impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(front)));
}

bool offer_recipe(const std::vector<std::optional<at::Tensor>>& args, std::vector<RecipeRead> reads,
                  std::vector<LayoutPtr> outs, std::vector<BufferView> result_views,
                  const std::vector<std::pair<int64_t, py::object>>& overrides, const std::string& compute,
                  const std::vector<std::vector<std::pair<int64_t, int64_t>>>& boxes,
                  std::vector<std::pair<std::vector<RecipeRead>, std::vector<BufferView>>> pieces,
                  std::vector<LayoutPtr> staged_outs, int64_t classes, const std::vector<bool>& kept,
                  const std::optional<std::vector<std::pair<int64_t, c10::Scalar>>>& whole_if) {
  if (t_calls.empty() || reads.empty() || (!pieces.empty() && !boxes.empty())) return false;
  if (whole_if && (boxes.empty() || !staged_outs.empty())) return false;
  Call& call = *t_calls.back();
  const std::vector<c10::IValue>& arguments = *call.arguments;
  auto own = [&](int64_t i) {  // the kernel's argument i is the call's own tensor
    return i >= 0 && static_cast<size_t>(i) < args.size() && args[i].has_value() && is_argument(arguments, i, *args[i]);
  };
  auto well_formed = [](const BufferView& v) { return v.strides.size() == v.sizes.size(); };
  bool reads_target = false;
  for (const RecipeRead& read : reads) {
    if (!own(read.arg) || !well_formed(read.view)) return false;
    if (read.staged && read.arg == call.target) return false;  // the target is written where it lies
    reads_target |= read.arg == call.target;
  }
  for (const BufferView& v : result_views) {
    if (!well_formed(v)) return false;
  }
  for (const auto& [piece_reads, piece_results] : pieces) {  // the same arguments and results, each view its own
    if (piece_reads.size() != reads.size() || piece_results.size() != result_views.size()) return false;
    for (size_t k = 0; k < reads.size(); ++k) {
      if (piece_reads[k].arg != reads[k].arg || piece_reads[k].staged || reads[k].staged ||
          !well_formed(piece_reads[k].view)) {
        return false;
      }
    }
    for (const BufferView& v : piece_results) {
      if (!well_formed(v)) return false;
    }
  }
  for (const auto& box : boxes) {  // each box spans every dim of every view, within it
    auto inside = [&](const BufferView& v) {
      if (v.sizes.empty()) return true;  // a 0-dim operand's element, read whole by every box
      if (box.size() != v.sizes.size()) return false;
      for (size_t d = 0; d < box.size(); ++d) {
        if (v.sizes[d] != 1 && (box[d].first < 0 || box[d].second < 0 || box[d].first + box[d].second > v.sizes[d])) {
          return false;
        }
      }
      return true;
    };
    for (const RecipeRead& read : reads) {
      if (!inside(read.view)) return false;
    }
    for (const BufferView& v : result_views) {
      if (!inside(v)) return false;
    }
  }
  // New results (one view each) for a functional call; the out= tensor's view; the target read in
  // place.
  for (const LayoutPtr& out : outs) {
    if (!out) return false;
  }
  if (!staged_outs.empty() && staged_outs.size() != outs.size()) return false;
  if (!outs.empty() ? call.target != -1 || result_views.size() != outs.size()
                    : call.target == -1 || result_views.size() > 1 || !result_views.empty() == reads_target) {
    return false;
  }
  auto handle = find_op(compute);
  if (!handle) return false;
  // The compute is an overload of the called op (in place: of its functional form), or the op
  // the CPU computes it as, with the call's arguments and perhaps one more, inserted (relu:
  // clamp_min at 0, the bound passed as an override; a backend's convolution_overrideable:
  // convolution; its backward: convolution_backward, the bias's sizes inserted as an override;
  // the fused LSTM and GRU cells and their backward: the runtime's, recurrent_cells.cpp; 2-D max
  // pooling, batch norm and their backward: the runtime's on strided views, max_pool.cpp and
  // batch_norm.cpp).
  std::string called = call.op->schema().name();
  if (!called.empty() && called.back() == '_') called.pop_back();
  struct ComputedAs {
    std::string_view called, compute;
    int64_t inserted;
  };
  static constexpr ComputedAs computed_as[] = {
      {"aten::relu", "aten::clamp_min", -1},
      {"aten::convolution_overrideable", "aten::convolution", -1},
      {"aten::convolution_backward_overrideable", "aten::convolution_backward", 3},
      {"aten::_thnn_fused_lstm_cell", "torch_layouts::lstm_cell", -1},
      {"aten::_thnn_fused_lstm_cell_backward_impl", "torch_layouts::lstm_cell_backward", -1},
      {"aten::_thnn_fused_gru_cell", "torch_layouts::gru_cell", -1},
      {"aten::_thnn_fused_gru_cell_backward", "torch_layouts::gru_cell_backward", -1},
      {"aten::max_pool2d_with_indices", "torch_layouts::max_pool2d", -1},
      {"aten::max_pool2d_with_indices_backward", "torch_layouts::max_pool2d_backward", -1},
      {"aten::native_batch_norm", "torch_layouts::batch_norm", -1},
      {"aten::native_batch_norm_backward", "torch_layouts::batch_norm_backward", -1}};
  const std::string& compute_name = handle->schema().name();
  const auto alias = std::find_if(std::begin(computed_as), std::end(computed_as),
                                  [&](const ComputedAs& a) { return a.called == called && a.compute == compute_name; });
  if (compute_name != called && alias == std::end(computed_as)) return false;
  auto recipe = std::make_shared<AtenRecipe>();
  recipe->inserted = compute_name != called ? alias->inserted : -1;
  const auto& formals = handle->schema().arguments();
  // A functional compute (no argument written) returns each new result (a CPU out= overload that
  // would use its out= tensor as scratch: mse_loss.out).
  recipe->functional = written_argument(handle->schema()) == -1;
  // (on the whole views only: a reduction's value per box or piece would not be the call's)
  // (a result for each return it keeps: an output_mask, in the call's key, leaves the others out)
  const size_t results_kept = kept.empty() ? handle->schema().returns().size()
                                           : static_cast<size_t>(std::count(kept.begin(), kept.end(), true));
  if (!kept.empty() && (!recipe->functional || kept.size() != handle->schema().returns().size())) return false;
  if (recipe->functional && (outs.empty() || results_kept != outs.size() || !boxes.empty() || !pieces.empty())) {
    return false;
  }
  recipe->kept = kept;
  const size_t written = recipe->functional ? 0 : std::max<size_t>(1, outs.size());  // its out= arguments, last
  if (formals.size() < written) return false;
  recipe->compute_args = formals.size() - written;
  for (const RecipeRead& read : reads) {  // (read where the compute and the call number them alike)
    if (static_cast<size_t>(read.arg) >= recipe->compute_args || recipe->source(read.arg) != read.arg) return false;
  }
  std::vector<bool> overridden(recipe->compute_args, false);
  for (const auto& [i, value] : overrides) {
    if (i < 0 || static_cast<size_t>(i) >= recipe->compute_args) return false;
    recipe->overrides.emplace_back(i, torch::jit::toIValue(value, formals[i].real_type()));
    overridden[i] = true;
  }
  for (size_t i = 0; i < recipe->compute_args; ++i) {
    const int64_t from = recipe->source(i);
    if (from < 0 || static_cast<size_t>(from) >= arguments.size()) {  // inserted or past the call's: an override
      if (!overridden[i]) return false;
      recipe->wrap.push_back(false);
      continue;
    }
    c10::TypePtr type = formals[i].real_type();
    const auto optional = type->cast<c10::OptionalType>();
    if (optional) type = optional->getElementType();
    const c10::IValue& a = arguments[from];
    const bool number = a.isDouble() || a.isInt() || a.isBool();
    if (type->kind() == c10::TypeKind::TensorType) {
      // a tensor (undefined: an absent optional one, as autograd passes it), None for Tensor?, or
      // a number the compute takes wrapped (a plain Tensor parameter)
      if (!(a.isTensor() || (optional && a.isNone()) || (!optional && number))) return false;
      recipe->wrap.push_back(!a.isTensor() && !a.isNone());
    } else {
      if (a.isTensor()) return false;
      recipe->wrap.push_back(false);
    }
  }
  recipe->viewed.assign(recipe->compute_args, false);
  for (const RecipeRead& read : reads) recipe->viewed[read.arg] = true;
  recipe->compute = handle;
  recipe->compare = comparison_of(compute);
  recipe->arithmetic = arithmetic_of(compute);
  recipe->gather = compute == "aten::index_select.out";
  recipe->nll_loss = compute == "aten::nll_loss_forward.output";
  recipe->nll_loss_backward = compute == "aten::nll_loss_backward.grad_input";
  if (classes >= 0 && !recipe->nll_loss && !recipe->nll_loss_backward) return false;
  recipe->classes = classes;
  AtenRecipe::Part whole{std::move(reads), std::move(result_views)};
  if (!pieces.empty()) {
    for (auto& [piece_reads, piece_results] : pieces) {
      recipe->parts.push_back(AtenRecipe::Part{std::move(piece_reads), std::move(piece_results)});
    }
  } else if (boxes.empty()) {
    recipe->parts.push_back(std::move(whole));
  } else {
    for (const auto& box : boxes) recipe->parts.push_back(narrowed(whole, box));
    if (whole_if) {
      recipe->whole.push_back(std::move(whole));
      recipe->whole_if = *whole_if;
    }
  }
  if (recipe->functional) {
    for (size_t k = 0; k < outs.size(); ++k) {
      recipe->adopt.push_back((k >= staged_outs.size() || !staged_outs[k]) &&
                              adoptable(*outs[k], recipe->parts.front().results[k]));
    }
  }
  recipe->outs = std::move(outs);
  recipe->staged_outs = std::move(staged_outs);
  hold_layouts(*recipe, arguments);
  call.offered = std::move(recipe);
  return true;
}

bool copy_views_fit(const std::pair<BufferView, BufferView>& views, int64_t numel) {
  const auto& [src, dst] = views;
  return c10::multiply_integers(src.sizes) == numel && dst.sizes == src.sizes && src.strides.size() == src.sizes.size() &&
         dst.strides.size() == dst.sizes.size();
}

namespace {
// The elements a copy's pieces move, or none where a piece's two views differ in shape.
std::optional<int64_t> pieces_numel(const std::vector<std::pair<BufferView, BufferView>>& pieces) {
  int64_t numel = 0;
  for (const auto& piece : pieces) {
    const int64_t n = c10::multiply_integers(piece.first.sizes);
    if (!copy_views_fit(piece, n)) return std::nullopt;
    numel += n;
  }
  return numel;
}
}  // namespace

bool offer_clone_recipe(const at::Tensor& src, LayoutPtr out, std::vector<std::pair<BufferView, BufferView>> pieces) {
  const std::optional<int64_t> numel = pieces_numel(pieces);
  if (!out || !numel || (!pieces.empty() && *numel != src.numel())) return false;
  auto recipe = std::make_shared<CloneRecipe>();
  recipe->out = std::move(out);
  recipe->pieces = std::move(pieces);
  return offer_replay(std::move(recipe), "aten::clone", {{0, src}});
}

bool offer_replay(std::shared_ptr<Replay> replay, const std::string& op,
                  const std::vector<std::pair<int64_t, at::Tensor>>& own, bool writes_self) {
  if (t_calls.empty()) return false;
  Call& call = *t_calls.back();
  const std::vector<c10::IValue>& arguments = *call.arguments;
  // A replay makes new results: never for a call that writes an argument (an out= overload
  // served by the functional kernel, ops/registry.register_out_variants); or writes its self.
  if (call.op->schema().name() != op || call.target != (writes_self ? 0 : -1)) return false;
  for (const auto& [i, t] : own) {
    if (!is_argument(arguments, i, t)) return false;
  }
  hold_layouts(*replay, arguments);
  call.offered = std::move(replay);
  return true;
}

bool offer_concat_recipe(const std::string& op, const std::vector<at::Tensor>& inputs, LayoutPtr out,
                         std::vector<std::vector<std::pair<BufferView, BufferView>>> pieces) {
  if (!out || inputs.empty() || pieces.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (pieces_numel(pieces[i]) != inputs[i].numel()) return false;
  }
  auto recipe = std::make_shared<ConcatRecipe>();
  recipe->out = std::move(out);
  recipe->pieces = std::move(pieces);
  return offer_list_replay(std::move(recipe), op, {{0, inputs}});
}

namespace {
// Same-device conversions kept per (the input's geometry, the dtype): keys tagged apart from the
// fronts' calls (their first entry, a front's id, is >= 0). Counted as "aten::_to_copy" calls.
constexpr int64_t kConversionTag = -100;

std::vector<int64_t> conversion_key(const at::Tensor& self, c10::ScalarType dtype) {
  std::vector<int64_t> key{kConversionTag, static_cast<int64_t>(dtype)};
  if (!append_geometry_key(key, self)) key.clear();
  return key;
}

std::atomic<int64_t>& conversions_count() {  // registered once, then no lock per call
  static std::atomic<int64_t>& count = [] () -> std::atomic<int64_t>& {
    std::lock_guard<std::mutex> lock(g_fronts_mutex);
    return g_counts.emplace_back(std::piecewise_construct, std::forward_as_tuple("aten::_to_copy"),
                                 std::forward_as_tuple(0)).second;
  }();
  return count;
}
}  // namespace

std::optional<at::Tensor> replay_conversion(const at::Tensor& self, c10::ScalarType dtype) {
  if (t_strict) return std::nullopt;
  const std::vector<int64_t> key = conversion_key(self, dtype);
  const std::shared_ptr<const Replay> kept = key.empty() ? nullptr : g_recipes.find(key).value_or(nullptr);
  if (!kept) return std::nullopt;
  conversions_count().fetch_add(1, std::memory_order_relaxed);
  // keep_conversion keeps CloneRecipes only. Called on `self` itself, not boxed: an IValue's copy
  // of a tensor Python holds would take the GIL back twice (PyTorch's PyObject preservation).
  return static_cast<const CloneRecipe&>(*kept).copy_of(self);
}

bool keep_conversion(const at::Tensor& self, c10::ScalarType dtype, LayoutPtr out,
                     std::vector<std::pair<BufferView, BufferView>> pieces) {
  std::vector<int64_t> key = conversion_key(self, dtype);
  if (!out || pieces.empty() || pieces_numel(pieces) != self.numel() || key.empty() || out->dtype != dtype) {
    return false;
  }
  auto recipe = std::make_shared<CloneRecipe>();  // a new tensor of `out`, the pieces copied (converted) into it
  recipe->out = std::move(out);
  recipe->pieces = std::move(pieces);
  recipe->layouts.push_back(layout_of(self));
  g_recipes.keep(std::move(key), std::move(recipe));
  return true;
}

bool offer_list_replay(std::shared_ptr<Replay> replay, const std::string& op,
                       const std::vector<std::pair<int64_t, std::vector<at::Tensor>>>& lists) {
  if (t_calls.empty()) return false;
  Call& call = *t_calls.back();
  const std::vector<c10::IValue>& arguments = *call.arguments;
  const c10::FunctionSchema& schema = call.op->schema();
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  if (name != op) return false;
  for (const auto& [p, tensors] : lists) {
    if (p < 0 || static_cast<size_t>(p) >= arguments.size() || !arguments[p].isTensorList()) return false;
    const c10::List<at::Tensor> own = arguments[p].toTensorList();
    if (own.size() != tensors.size()) return false;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor t = own[i];
      if (t.unsafeGetTensorImpl() != tensors[i].unsafeGetTensorImpl()) return false;
      if (LayoutPtr layout = layout_of(t)) replay->layouts.push_back(std::move(layout));
    }
  }
  call.offered = std::move(replay);
  return true;
}

std::optional<c10::OperatorHandle> find_op(const std::string& name) {
  const auto dot = name.find('.');
  return c10::Dispatcher::singleton().findSchema(
      {name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1)});
}

int64_t kept_recipes() { return static_cast<int64_t>(g_recipes.size()); }

void forget_recipes() { g_recipes.clear(); }

std::map<std::string, int64_t> kernel_counts() {
  std::lock_guard<std::mutex> lock(g_fronts_mutex);
  std::map<std::string, int64_t> counts;
  for (const auto& [name, count] : g_counts) {
    if (int64_t c = count.load(std::memory_order_relaxed)) counts[name] += c;
  }
  return counts;
}

void reset_kernel_counts() {
  std::lock_guard<std::mutex> lock(g_fronts_mutex);
  for (auto& entry : g_counts) entry.second.store(0, std::memory_order_relaxed);
  g_restickify_count.store(0, std::memory_order_relaxed);
  g_restickify_bytes.store(0, std::memory_order_relaxed);
}

void count_restickify(int64_t nbytes) {
  g_restickify_count.fetch_add(1, std::memory_order_relaxed);
  g_restickify_bytes.fetch_add(nbytes, std::memory_order_relaxed);
}

std::pair<int64_t, int64_t> restickify_counts() {
  return {g_restickify_count.load(std::memory_order_relaxed), g_restickify_bytes.load(std::memory_order_relaxed)};
}

void set_strict(bool strict) { t_strict = strict; }

}  // namespace torch_layouts
