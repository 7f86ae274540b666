#include "layout_records.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernel_front.h"

namespace py = pybind11;

namespace torch_layouts {
namespace {

PyObject* g_layout_records = nullptr;  // a strong reference kept for the process lifetime

py::object layout_records() {
  TORCH_CHECK(g_layout_records != nullptr, "torch_layouts runtime is not initialised (import torch_layouts)");
  return py::reinterpret_borrow<py::object>(g_layout_records);
}

using DefaultKey = std::tuple<int, std::vector<int64_t>, std::vector<int64_t>>;
std::mutex g_defaults_mutex;
std::map<DefaultKey, LayoutPtr> g_defaults;
constexpr size_t kMaxDefaults = 4096;

py::tuple to_tuple(c10::IntArrayRef values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = py::int_(values[i]);
  return out;
}

std::vector<int64_t> int_vector(const py::handle& seq) {
  try {
    return py::cast<std::vector<int64_t>>(seq);
  } catch (const py::cast_error&) {
    TORCH_CHECK_VALUE(false, "expected a sequence of ints, got ", std::string(py::repr(seq)));
  }
}

int64_t int_value(const py::handle& value) {
  try {
    return py::cast<int64_t>(value);
  } catch (const py::cast_error&) {
    TORCH_CHECK_VALUE(false, "expected an int, got ", std::string(py::repr(value)));
  }
}

std::optional<std::vector<Transfer>> optional_nests(const py::object& result) {
  if (result.is_none()) return std::nullopt;
  return nests_from_python(result);
}

}  // namespace

PyObject* g_converter = nullptr;

void set_converter(py::object obj) {
  Py_XINCREF(obj.ptr());
  g_converter = obj.ptr();
}

std::optional<at::Tensor> convert_on_device(const at::Tensor& self, c10::ScalarType dtype) {
  if (g_converter == nullptr) return std::nullopt;
  if (auto kept = replay_conversion(self, dtype)) return kept;
  py::gil_scoped_acquire gil;
  py::handle dtype_obj(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
  return py::cast<at::Tensor>(py::handle(g_converter)(self, dtype_obj));
}

PyObject* g_view_copier = nullptr;

void set_view_copier(py::object obj) {
  Py_XINCREF(obj.ptr());
  g_view_copier = obj.ptr();
}

bool copy_view_planned(const at::Tensor& src, const at::Tensor& dst) {
  if (g_view_copier == nullptr) return false;
  py::gil_scoped_acquire gil;
  return py::cast<bool>(py::handle(g_view_copier)(dst, src));
}

void set_layout_records(py::object obj) {
  Py_XINCREF(obj.ptr());
  g_layout_records = obj.ptr();
}

std::vector<Transfer> nests_from_python(const py::handle& seq) {
  std::vector<Transfer> nests;
  for (const auto& item : seq) {
    TORCH_CHECK_VALUE(py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item), "a DMA nest must be a tuple, got ",
                      std::string(py::repr(item)));
    auto t = py::tuple(py::reinterpret_borrow<py::object>(item));
    TORCH_CHECK_VALUE(t.size() == 5, "a DMA nest is (ranges, dst_strides, src_strides, dst_offset, src_offset)");
    nests.push_back(Transfer{int_vector(t[0]), int_vector(t[1]), int_vector(t[2]), int_value(t[3]), int_value(t[4])});
    TORCH_CHECK_VALUE(nests.back().ranges.size() == nests.back().dst_strides.size() &&
                          nests.back().ranges.size() == nests.back().src_strides.size(),
                      "a DMA nest needs as many strides as loop ranges");
  }
  return nests;
}

std::vector<Fill> fills_from_python(const py::handle& seq) {
  std::vector<Fill> fills;
  for (const auto& item : seq) {
    TORCH_CHECK_VALUE(py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item),
                      "a padding nest must be a tuple, got ", std::string(py::repr(item)));
    auto t = py::tuple(py::reinterpret_borrow<py::object>(item));
    TORCH_CHECK_VALUE(t.size() == 3, "a padding nest is (ranges, strides, offset)");
    fills.push_back(Fill{int_vector(t[0]), int_vector(t[1]), int_value(t[2])});
    TORCH_CHECK_VALUE(fills.back().ranges.size() == fills.back().strides.size(),
                      "a padding nest needs as many strides as loop ranges");
  }
  return fills;
}

AddressTable address_from_python(const py::handle& table) {
  auto t = py::reinterpret_borrow<py::tuple>(table);
  TORCH_CHECK_VALUE(t.size() == 3, "an address table is (host_order, groups, broadcast copies)");
  AddressTable out;
  out.host_order = py::cast<std::vector<std::pair<int64_t, int64_t>>>(t[0]);
  for (const auto& item : t[1]) {
    auto g = py::reinterpret_borrow<py::tuple>(item);
    out.groups.push_back(AddressGroup{int_vector(g[0]), py::cast<std::vector<std::pair<int64_t, int64_t>>>(g[1])});
  }
  out.copies = py::cast<std::vector<std::pair<int64_t, int64_t>>>(t[2]);
  return out;
}

void check_address(const AddressTable& table, const std::vector<int64_t>& base_size) {
  const auto rank = static_cast<int64_t>(base_size.size());
  auto check_dim = [&](int64_t d) {
    TORCH_CHECK_VALUE(d >= 0 && d < rank, "address table names host dim ", d, " of a rank-", rank, " base");
  };
  for (const auto& [dim, stride] : table.host_order) {
    check_dim(dim);
    TORCH_CHECK_VALUE(stride > 0, "address table has host stride ", stride, " for dim ", dim, " (must be > 0)");
  }
  for (const auto& group : table.groups) {
    for (const auto d : group.host_dims) check_dim(d);
    for (const auto& [step, device_stride] : group.digits) {
      TORCH_CHECK_VALUE(step > 0 && device_stride >= 0, "address table has digit step ", step,
                        " and device stride ", device_stride, " (step must be > 0, stride >= 0)");
    }
  }
  for (const auto& [size, device_stride] : table.copies) {
    TORCH_CHECK_VALUE(size > 0 && device_stride > 0, "address table has a broadcast dim of size ", size,
                      " and device stride ", device_stride);
  }
}

LayoutPtr default_layout(c10::ScalarType dtype, c10::IntArrayRef size, c10::IntArrayRef stride) {
  DefaultKey key{static_cast<int>(dtype), size.vec(), stride.vec()};
  {
    std::lock_guard<std::mutex> lock(g_defaults_mutex);
    auto it = g_defaults.find(key);
    if (it != g_defaults.end()) return it->second;
  }
  LayoutPtr layout;
  {
    py::gil_scoped_acquire gil;
    py::handle dtype_obj(reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
    py::object info = layout_records().attr("default_bound_record")(dtype_obj, to_tuple(size), to_tuple(stride));
    layout = py::cast<std::shared_ptr<BoundLayout>>(info);
  }
  std::lock_guard<std::mutex> lock(g_defaults_mutex);
  if (g_defaults.size() >= kMaxDefaults) g_defaults.clear();
  g_defaults.emplace(std::move(key), layout);
  return layout;
}

namespace {
// Nests asked of Python, kept per layout(s) and host strides; the layouts are held while cached,
// so that the key's addresses stay theirs.
using NestKey = std::tuple<const BoundLayout*, const BoundLayout*, std::vector<int64_t>, int>;
struct NestEntry {
  LayoutPtr first, second;
  CachedNests nests;
};
std::mutex g_nests_mutex;
std::map<NestKey, NestEntry> g_nests;
constexpr size_t kMaxNests = 256;

template <typename Ask>
CachedNests cached_nests(NestKey key, const LayoutPtr& first, const LayoutPtr& second, Ask ask) {
  {
    std::lock_guard<std::mutex> lock(g_nests_mutex);
    auto it = g_nests.find(key);
    if (it != g_nests.end()) return it->second.nests;
  }
  CachedNests nests;
  {
    py::gil_scoped_acquire gil;
    nests = std::make_shared<const std::optional<std::vector<Transfer>>>(optional_nests(ask()));
  }
  std::lock_guard<std::mutex> lock(g_nests_mutex);
  if (g_nests.size() >= kMaxNests) g_nests.clear();
  g_nests.emplace(std::move(key), NestEntry{first, second, nests});
  return nests;
}
}  // namespace

CachedNests host_nests(const LayoutPtr& layout, c10::IntArrayRef host_stride, bool h2d) {
  return cached_nests({layout.get(), nullptr, host_stride.vec(), h2d ? 1 : 0}, layout, nullptr, [&] {
    return layout_records().attr("host_nests")(py::handle(layout->layout->get()), to_tuple(layout->base_size),
                                               to_tuple(layout->base_stride), to_tuple(host_stride), h2d);
  });
}

CachedNests relayout_nests(const LayoutPtr& src, const LayoutPtr& dst) {
  return cached_nests({src.get(), dst.get(), {}, 2}, src, dst, [&] {
    return layout_records().attr("relayout_nests")(py::handle(src->layout->get()), to_tuple(src->base_stride),
                                                   py::handle(dst->layout->get()), to_tuple(dst->base_stride),
                                                   to_tuple(dst->base_size));
  });
}

}  // namespace torch_layouts
