// Backend tensor metadata (torch._C._get_tensor_metadata / _set_tensor_metadata) for spyre
// tensors, through PyTorch's BackendMeta serialization registry: a spyre tensor's metadata
// holds one key, "spyre.layout:<encoded layout record>" -> True, naming its buffer's layout.
// Encoding and applying the record is Python (torch_layouts/runtime/backend_meta.py).
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include "device_memory.h"
#include "tensor_impl.h"

namespace py = pybind11;

namespace torch_layouts {
namespace {

constexpr const char* kPrefix = "spyre.layout:";

py::object backend_meta_module() {
  return py::module_::import("torch_layouts.runtime.backend_meta");
}

void tensor_to_meta(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  LayoutPtr layout = layout_of(tensor);
  if (!layout) return;  // raw device storage: its bytes are in host order, nothing to record
  py::gil_scoped_acquire gil;
  py::object key = backend_meta_module().attr("encode")(py::reinterpret_borrow<py::object>(layout->layout->get()),
                                                         layout->base_size, layout->base_stride);
  metadata[key.cast<std::string>()] = true;
}

void meta_to_tensor(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  std::string key;
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (it->first.rfind(kPrefix, 0) != 0) {
      ++it;
      continue;
    }
    TORCH_CHECK_VALUE(key.empty(), "spyre tensor metadata names two layouts: ", key.substr(0, 60), "... and ",
                      it->first.substr(0, 60), "...");
    TORCH_CHECK_VALUE(it->second, "spyre tensor metadata key ", it->first.substr(0, 60), "... must map to True");
    key = it->first;
    it = metadata.erase(it);
  }
  if (key.empty()) return;
  py::gil_scoped_acquire gil;
  backend_meta_module().attr("apply")(tensor, key);
}

struct Register {
  Register() {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &tensor_to_meta, &meta_to_tensor);
  }
} g_register;

}  // namespace

void attach_layout(const at::Tensor& tensor, LayoutPtr layout) {
  TORCH_CHECK_VALUE(tensor.is_privateuseone() && tensor.has_storage(), "expected a spyre tensor with storage");
  TORCH_CHECK_VALUE(layout_of(tensor) == nullptr, "the spyre buffer already has a layout");
  const auto nbytes = static_cast<int64_t>(tensor.storage().nbytes());
  TORCH_CHECK_VALUE(nbytes >= layout->storage_nbytes, "a spyre buffer of ", nbytes, " bytes cannot hold a layout of ",
                    layout->storage_nbytes, " bytes");
  Block* block = block_of(tensor.storage().data_ptr());
  TORCH_CHECK_VALUE(block != nullptr, "the tensor's storage is not spyre device memory");
  block->layout = layout;
  if (auto* impl = dynamic_cast<SpyreTensorImpl*>(tensor.unsafeGetTensorImpl())) impl->set_layout(layout);
}

void adopt_buffer(const at::Tensor& tensor, const at::Tensor& fresh) {
  TORCH_CHECK_VALUE(tensor.is_privateuseone() && fresh.is_privateuseone() && tensor.device() == fresh.device(),
                    "adopt_buffer needs two spyre tensors on one device");
  LayoutPtr layout = layout_of(fresh);
  TORCH_CHECK_VALUE(layout != nullptr, "the new buffer has no layout");
  auto* source = fresh.storage().unsafeGetStorageImpl();
  const size_t nbytes = source->nbytes();
  c10::DataPtr data = source->set_data_ptr(c10::DataPtr(nullptr, fresh.device()));
  source->set_nbytes(0);
  auto* target = tensor.storage().unsafeGetStorageImpl();
  target->set_data_ptr_noswap(std::move(data));
  target->set_nbytes(nbytes);
  if (auto* impl = dynamic_cast<SpyreTensorImpl*>(tensor.unsafeGetTensorImpl())) impl->set_layout(layout);
}

}  // namespace torch_layouts
