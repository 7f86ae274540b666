#include "bound_layout.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/accumulate.h>
#include <c10/util/strides.h>

namespace torch_layouts {

PyHandle::PyHandle(PyObject* obj) : obj_(obj) { Py_XINCREF(obj_); }

PyHandle::~PyHandle() {
  if (obj_ == nullptr || !Py_IsInitialized() || _Py_IsFinalizing()) return;  // at shutdown: leak, never crash
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(obj_);
  PyGILState_Release(state);
}

bool row_major_only(const BoundLayout& layout) {
  const int64_t numel = c10::multiply_integers(layout.base_size);
  return layout.identity && layout.padding.empty() && !layout.dtype_view &&
         c10::IntArrayRef(layout.base_stride) == c10::IntArrayRef(c10::contiguous_strides(layout.base_size)) &&
         layout.storage_nbytes == numel * static_cast<int64_t>(c10::elementSize(layout.dtype));
}

}  // namespace torch_layouts
