// The bridge to the Python layout records (torch_layouts/runtime/layout_records.py): layout
// logic and DMA nests live in Python; the runtime asks for them here and caches the answers.
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <optional>

#include "tensor_impl.h"

namespace torch_layouts {

void set_layout_records(pybind11::object records);

// The ops layer's on-device dtype conversion (keeps the layout's dim order), if installed.
void set_converter(pybind11::object converter);
std::optional<at::Tensor> convert_on_device(const at::Tensor& self, c10::ScalarType dtype);

// The ops layer's copy into or out of a view of a device buffer (strided copies between the
// buffers, ops/view_copy.py), if installed: whether it copied `src` into `dst` (same dtype).
void set_view_copier(pybind11::object copier);
bool copy_view_planned(const at::Tensor& src, const at::Tensor& dst);

// The default layout for a host tensor of this dtype, size and strides (memoised).
LayoutPtr default_layout(c10::ScalarType dtype, c10::IntArrayRef size, c10::IntArrayRef stride);

// Nests asked of the Python records, kept per layout(s) and host strides (the layouts held
// while cached), so a repeated copy asks Python once. nullopt: no direct program exists.
using CachedNests = std::shared_ptr<const std::optional<std::vector<Transfer>>>;

// Nests between the layout's device buffer (dst for h2d) and a host tensor of the base's
// size with other strides.
CachedNests host_nests(const LayoutPtr& layout, c10::IntArrayRef host_stride, bool h2d);

// Nests copying src's device buffer into dst's (same host tensor).
CachedNests relayout_nests(const LayoutPtr& src, const LayoutPtr& dst);

// Converts Python nest descriptions (tuples) to C++.
std::vector<Transfer> nests_from_python(const pybind11::handle& seq);
std::vector<Fill> fills_from_python(const pybind11::handle& seq);
AddressTable address_from_python(const pybind11::handle& table);
// Throws ValueError unless every dim, stride and step of the table is usable for this base.
void check_address(const AddressTable& table, const std::vector<int64_t>& base_size);

}  // namespace torch_layouts
