// The runtime's mirror of a Python BoundLayout (torch_layouts/core/layout.py): a device
// buffer's layout object bound to the host tensor it holds, compiled into the DMA transfers
// (core/mapping.py's Transfer, Fill) that move that host tensor, and its view addressing.
#pragma once

#include <Python.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace torch_layouts {

// One loop nest of a copy (core/mapping.py's Transfer), in elements; loops ordered outermost first.
struct Transfer {
  std::vector<int64_t> ranges, dst_strides, src_strides;
  int64_t dst_offset = 0, src_offset = 0;
};

// One loop nest of device positions set to the pad value.
struct Fill {
  std::vector<int64_t> ranges, strides;
  int64_t offset = 0;
};

// An owned reference to a Python object; dropping it takes the GIL (never at shutdown).
class PyHandle {
 public:
  explicit PyHandle(PyObject* obj);
  ~PyHandle();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;
  PyObject* get() const { return obj_; }

 private:
  PyObject* obj_;
};

// How a host element's device offset is computed (the layout's resolution, flattened):
// split the base offset into host coordinates along `host_order` (largest stride first),
// then, per group of host dims, peel digits off the group coordinate, coarsest first.
struct AddressGroup {
  std::vector<int64_t> host_dims;                         // outer to inner
  std::vector<std::pair<int64_t, int64_t>> digits;        // (step, device stride), coarsest first
};

struct AddressTable {
  std::vector<std::pair<int64_t, int64_t>> host_order;    // (host dim, base stride), non-size-1 dims
  std::vector<AddressGroup> groups;
  std::vector<std::pair<int64_t, int64_t>> copies;        // broadcast dims: (size, device stride)
};

struct BoundLayout {
  std::shared_ptr<PyHandle> layout;   // the layout object users see
  std::vector<int64_t> base_size;     // the host tensor the layout holds
  std::vector<int64_t> base_stride;
  c10::ScalarType dtype;
  int64_t device_numel = 0;
  int64_t storage_nbytes = 0;         // device bytes, or the base's extent if larger
  std::vector<Transfer> h2d, d2h;         // base (strides base_stride, offset 0) <-> device
  std::vector<Fill> padding;
  c10::Scalar pad_value;
  bool identity = false;              // device order is the base's own dense order, no padding
  bool dtype_view = false;            // derived for another element size: no nests, copies by address
  AddressTable address;
  // This buffer's layout as seen through dtype views of another element size (dtype_views.cpp).
  mutable std::mutex dtype_views_mutex;
  mutable std::map<c10::ScalarType, std::shared_ptr<const BoundLayout>> dtype_views;
};

// Whether the buffer holds the base tensor's elements in row-major order and nothing else (no
// padding, no bytes past them): its bytes are those of a contiguous CPU tensor of the base.
bool row_major_only(const BoundLayout& layout);

}  // namespace torch_layouts
