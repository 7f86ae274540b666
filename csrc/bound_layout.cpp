#include "bound_layout.h"

namespace torch_layouts {

PyHandle::PyHandle(PyObject* obj) : obj_(obj) { Py_XINCREF(obj_); }

PyHandle::~PyHandle() {
  if (obj_ == nullptr || !Py_IsInitialized() || _Py_IsFinalizing()) return;  // at shutdown: leak, never crash
  PyGILState_STATE state = PyGILState_Ensure();
  Py_DECREF(obj_);
  PyGILState_Release(state);
}

}  // namespace torch_layouts
