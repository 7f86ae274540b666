#include "layout_moves.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ops/_to_copy.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/utils/pybind.h>

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

#include "device_memory.h"
#include "int64_format.h"

namespace torch_layouts {

namespace py = pybind11;

namespace {

// A training loop moves each batch into the same layout, a model makes its buffers in it: a few
// dozen records at most; the oldest goes first beyond this.
constexpr size_t kMaxKept = 256;

struct KeptKey {
  PyObject* spec;  // identity: the entry holds the object, so its address is not reused meanwhile
  KeptKind kind;
  bool strided;  // strides given (always for a move)
  c10::ScalarType dtype;
  c10::SmallVector<int64_t, 12> dims;  // the sizes, then the strides where given

  bool operator==(const KeptKey& o) const {
    return spec == o.spec && kind == o.kind && strided == o.strided && dtype == o.dtype && dims == o.dims;
  }
};

struct KeptHash {
  size_t operator()(const KeptKey& k) const {
    uint64_t h = reinterpret_cast<uintptr_t>(k.spec) * 8 + static_cast<uint64_t>(k.kind) * 2 + k.strided;
    h = h * 31 + static_cast<uint64_t>(k.dtype);
    for (int64_t d : k.dims) h = h * 1000003 + static_cast<uint64_t>(d);
    return static_cast<size_t>((h * 0x9E3779B97F4A7C15ull) >> 7);
  }
};

struct KeptEntry {
  py::object spec;
  LayoutPtr record;
};

// Touched with the GIL held only (every caller is a Python call); never destroyed, since its
// Python objects must not be released after the interpreter has gone.
struct KeptTable {
  std::unordered_map<KeptKey, KeptEntry, KeptHash> entries;
  std::deque<KeptKey> order;  // oldest first
};

KeptTable& table() {
  static auto* kept = new KeptTable();
  return *kept;
}

KeptKey make_key(KeptKind kind, PyObject* spec, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                 c10::ScalarType dtype) {
  KeptKey key{spec, kind, stride.has_value(), dtype, {}};
  key.dims.append(size.begin(), size.end());
  if (stride) key.dims.append(stride->begin(), stride->end());
  return key;
}

// The spyre device a `to` argument names (a string or a torch.device), else nullopt. Strings
// are parsed only where they start with the backend's name ("cpu" is not), and the last one
// parsed is kept (held), as loops pass the same "spyre" object each time.
std::optional<c10::Device> spyre_device(PyObject* where) {
  static auto* last = new std::pair<py::object, c10::Device>(py::none(), c10::Device(c10::kCPU));
  std::optional<c10::Device> device;
  if (THPDevice_Check(where)) {
    device = reinterpret_cast<THPDevice*>(where)->device;
  } else if (where == last->first.ptr()) {
    device = last->second;
  } else if (PyUnicode_Check(where)) {
    Py_ssize_t n = 0;
    const char* text = PyUnicode_AsUTF8AndSize(where, &n);
    if (text == nullptr) {
      PyErr_Clear();
      return std::nullopt;
    }
    static const std::string backend = c10::get_privateuse1_backend();
    if (std::string_view(text, static_cast<size_t>(n)).substr(0, backend.size()) != backend) return std::nullopt;
    try {
      device = c10::Device(std::string(text, static_cast<size_t>(n)));
    } catch (const c10::Error&) {
      return std::nullopt;  // Python's path raises PyTorch's own error for it
    }
    *last = {py::reinterpret_borrow<py::object>(where), *device};
  }
  if (!device || device->type() != c10::DeviceType::PrivateUse1) return std::nullopt;
  return device;
}

// The GIL released while a move of this many bytes runs, as PyTorch's methods release it, where
// the move is long enough for another thread to use it: a small move keeps it, since each copy of
// the tensor's handle made meanwhile (PyTorch's PyObject preservation) would take it back.
class ReleasedFor {
 public:
  explicit ReleasedFor(size_t nbytes) {
    if (nbytes >= kReleaseBytes) released_.emplace();
  }

 private:
  static constexpr size_t kReleaseBytes = size_t(1) << 16;
  std::optional<py::gil_scoped_release> released_;
};

// `self` as a tensor a move may take without Python: a Tensor (or Parameter) that no
// __torch_function__ mode sees, off the device, whose move autograd does not record and the JIT
// does not trace; else nullptr.
const at::Tensor* plain_host(PyObject* self) {
  if (!THPVariable_CheckExact(self) || at::impl::torch_function_mode_enabled() || torch::jit::tracer::isTracing()) {
    return nullptr;
  }
  const at::Tensor& x = THPVariable_Unpack(self);
  if (x.is_privateuseone() || (x.requires_grad() && c10::GradMode::is_enabled())) return nullptr;
  return &x;
}

// `self.to(device)` of a CPU tensor to a spyre device: what PyTorch's method calls for it
// (`_to_copy` to that device, keeping the dtype and strides), without parsing its arguments.
PyObject* move_default(PyObject* self, c10::Device device) {
  const at::Tensor* x = plain_host(self);
  if (x == nullptr || !x->device().is_cpu()) return nullptr;
  at::Tensor out;
  {
    const ReleasedFor released(x->nbytes());
    out = at::_to_copy(*x, x->scalar_type(), std::nullopt, device, std::nullopt, false, std::nullopt);
  }
  return THPVariable_Wrap(std::move(out));
}

// `self.to(device, device_layout=spec)` of a host tensor into a layout record already kept: the
// new tensor (a new reference), or nullptr for Python's path.
PyObject* move_kept(PyObject* self, c10::Device device, PyObject* spec) {
  const at::Tensor* host = plain_host(self);
  if (spec == Py_None || host == nullptr) return nullptr;
  const at::Tensor& x = *host;
  LayoutPtr record = kept_record(KeptKind::Move, spec, x.sizes(), x.strides(), x.scalar_type());
  if (!record) return nullptr;
  if (x.scalar_type() == at::kLong) warn_int64_downcast();  // as Python's path does on a kept record
  at::Tensor out;
  {
    const ReleasedFor released(x.nbytes());
    out = new_device_tensor(record, resolved_device(device));
    out.copy_(x);
  }
  return THPVariable_Wrap(std::move(out));
}

// PyTorch's Tensor.to, and Python's path for the moves with device_layout this file leaves.
struct ToMethods {
  py::object original, slow;
};

ToMethods& to_methods() {
  static auto* methods = new ToMethods();  // never destroyed, as the table
  return *methods;
}

// `fn(self, *args, **kwargs)`, the arguments copied after `self` (a bound `x.to` gets `args`
// without `self` before them, so nothing before `args` is read).
PyObject* call_with_self(PyObject* fn, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  c10::SmallVector<PyObject*, 8> all{self};
  all.append(args, args + nargs + nkw);
  return PyObject_Vectorcall(fn, all.data(), static_cast<size_t>(nargs + 1), kwnames);
}

// A move's result, or nullptr with or without a Python error (then: none made here).
template <typename Move>
PyObject* guarded(Move move) {
  HANDLE_TH_ERRORS
  return move();
  END_HANDLE_TH_ERRORS
}

// Tensor.to's C function (a method descriptor's: `self` the tensor, `args` what follows it).
PyObject* tensor_to(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const ToMethods& to = to_methods();
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  Py_ssize_t at = -1;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), "device_layout") == 0) at = i;
  }
  if (nargs == 1 && nkw == (at < 0 ? 0 : 1)) {
    if (const std::optional<c10::Device> device = spyre_device(args[0])) {
      PyObject* moved = guarded([&] { return at < 0 ? move_default(self, *device) : move_kept(self, *device, args[1]); });
      if (moved != nullptr || PyErr_Occurred()) return moved;
    }
  }
  return call_with_self(at < 0 ? to.original.ptr() : to.slow.ptr(), self, args, nargs, kwnames);
}

PyMethodDef tensor_to_def{
    "to", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(tensor_to)), METH_FASTCALL | METH_KEYWORDS,
    "to(*args, device_layout=None, **kwargs) -> Tensor\n\nPyTorch's Tensor.to; with device_layout= (torch_layouts), "
    "the result is a spyre tensor in that device layout or layout template."};

}  // namespace

LayoutPtr kept_record(KeptKind kind, PyObject* spec, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                      c10::ScalarType dtype) {
  const auto& entries = table().entries;
  auto it = entries.find(make_key(kind, spec, size, stride, dtype));
  return it == entries.end() ? nullptr : it->second.record;
}

void keep_record(KeptKind kind, py::object spec, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                 c10::ScalarType dtype, LayoutPtr record) {
  TORCH_CHECK_VALUE(record != nullptr, "keep_record: no record");
  KeptTable& kept = table();
  KeptKey key = make_key(kind, spec.ptr(), size, stride, dtype);
  auto it = kept.entries.find(key);
  if (it != kept.entries.end()) {
    it->second.record = std::move(record);
    return;
  }
  if (kept.entries.size() >= kMaxKept) {
    kept.entries.erase(kept.order.front());
    kept.order.pop_front();
  }
  kept.order.push_back(key);
  kept.entries.emplace(std::move(key), KeptEntry{std::move(spec), std::move(record)});
}

size_t kept_records() { return table().entries.size(); }

void clear_kept_records() {
  KeptTable& kept = table();
  kept.entries.clear();
  kept.order.clear();
}

py::object tensor_to_method(py::object original, py::object slow) {
  to_methods() = ToMethods{std::move(original), std::move(slow)};
  // A method descriptor of torch.Tensor, as PyTorch's own methods are: `x.to(...)` calls it with
  // no bound method made per call.
  PyObject* method = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(THPVariableClass), &tensor_to_def);
  if (method == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(method);
}

}  // namespace torch_layouts
