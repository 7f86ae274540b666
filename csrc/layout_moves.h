// Tensors made in a layout the caller gives (`x.to("spyre", device_layout=L)`, `torch.empty(...,
// device_layout=L)`): the runtime records kept per (layout object, size, strides, dtype), and
// `Tensor.to` as a C function whose common move (a host tensor into a kept layout) runs without
// Python (docs/design.md, "Moves into a caller's layout").
#pragma once

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

#include <optional>

#include "tensor_impl.h"

namespace torch_layouts {

// What a kept record was made for: a host tensor moved in (its size and strides), or a new
// tensor (its size, and its strides where the caller gave them).
enum class KeptKind : int8_t { Move, Empty };

// The record kept for `spec` (a layout or template object), or nullptr. Caller holds the GIL.
LayoutPtr kept_record(KeptKind kind, PyObject* spec, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                      c10::ScalarType dtype);

// Keeps `record` (holding `spec` alive while kept; the oldest of kMaxKept goes first). Caller holds the GIL.
void keep_record(KeptKind kind, pybind11::object spec, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                 c10::ScalarType dtype, LayoutPtr record);

// How many records are kept; drops them all.
size_t kept_records();
void clear_kept_records();

// `Tensor.to` with `device_layout=`: calls without it go to `original` (PyTorch's own method),
// a host tensor moved into a kept layout is moved here, anything else goes to `slow` (Python).
// Returns a new reference to a method object for `torch.Tensor.to`.
pybind11::object tensor_to_method(pybind11::object original, pybind11::object slow);

}  // namespace torch_layouts
