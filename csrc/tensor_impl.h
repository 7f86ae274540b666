// SpyreTensorImpl: a device tensor that carries the layout of its buffer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <memory>
#include <vector>

#include "bound_layout.h"

namespace torch_layouts {

using LayoutPtr = std::shared_ptr<const BoundLayout>;

class SpyreTensorImpl final : public c10::TensorImpl {
 public:
  SpyreTensorImpl(c10::Storage&& storage, c10::DispatchKeySet keys, const caffe2::TypeMeta dtype, LayoutPtr layout);
  SpyreTensorImpl(c10::TensorImpl::ImplType type, c10::Storage&& storage, c10::DispatchKeySet keys,
                  const caffe2::TypeMeta dtype, LayoutPtr layout);

  const LayoutPtr& layout() const { return layout_; }
  void set_layout(LayoutPtr layout) { layout_ = std::move(layout); }
  // A view (view, reshape, as_strided, view(dtype), ...) of a tensor of elements: its elements too,
  // even where its geometry matches the storage's raw bytes (a flat uint8 view of an unpadded buffer).
  bool elements_view() const { return elements_view_; }
  void set_elements_view(bool on) { elements_view_ = on; }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(const c10::VariableVersion& version_counter,
                                                              bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(c10::VariableVersion&& version_counter,
                                                              bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  template <typename VariableVersion>
  c10::intrusive_ptr<c10::TensorImpl> detach_core(VariableVersion&& version_counter,
                                                  bool allow_tensor_metadata_change) const;
  LayoutPtr layout_;
  bool elements_view_ = false;
};

// The layout of a device tensor's buffer: carried by its impl, else recorded with
// its storage; nullptr for raw device storage (bytes in host order).
LayoutPtr layout_of(const at::Tensor& tensor);

// What a kept plan for device tensor `tensor` depends on, as ints: its device, dtype, sizes,
// strides, storage offset, its buffer's layout object (by address) and that layout's base size
// and strides; empty when it carries no layout (ops/operands.geometry_key, csrc/view_copies.cpp).
std::vector<int64_t> geometry_key(const at::Tensor& tensor);
// The same appended to `key` (a call's key, built without a vector per tensor); false, and nothing
// appended, when the tensor carries no layout.
bool append_geometry_key(std::vector<int64_t>& key, const at::Tensor& tensor);

// The layout addressing this tensor's elements: the buffer's, or for a dtype view of another
// element size the buffer's layout seen through that size (dtype_views.h); nullptr when the
// bytes are in host order. Throws when a dtype view cannot address the buffer.
LayoutPtr element_layout_of(const at::Tensor& tensor);

// A fresh device tensor holding `layout`'s base, padding already set to the pad value (fill
// false: left as the allocator gave it, for a caller that writes the whole buffer).
at::Tensor new_device_tensor(const LayoutPtr& layout, c10::Device device, bool fill = true);
// A tensor of `layout` over `data`, a device block of at least the layout's bytes (an adopted
// CPU result: adopt_host_storage), its padding filled.
at::Tensor device_tensor_from(const LayoutPtr& layout, c10::DataPtr data);

// Sets every padding position of `tensor`'s buffer (laid out as `layout`) to the pad value.
void fill_padding(const at::Tensor& tensor, const BoundLayout& layout);

// A view of `self` (same storage, same layout), of `dtype`'s elements where given (a dtype view).
at::Tensor make_alias(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      int64_t storage_offset, std::optional<caffe2::TypeMeta> dtype = std::nullopt);

// True when `tensor` spans exactly the host tensor its layout holds.
bool is_whole_base(const at::Tensor& tensor, const BoundLayout& layout);

// Reads a device tensor (any view) into a fresh contiguous CPU tensor (kernels_copy.cpp).
at::Tensor to_host(const at::Tensor& src);

// A 1-D CPU tensor of `dtype` aliasing a device tensor's whole buffer, or its first `numel`
// elements (IndexError past the buffer).
at::Tensor raw_buffer(const at::Tensor& tensor, c10::ScalarType dtype, int64_t numel = -1);

// A strided CPU view of the device buffer in the tensor's own dtype, made without dispatching an
// op (no profiler event, no as_strided call); IndexError where it would reach outside the buffer.
// `owning`: the view holds the buffer; else it borrows it (a replay's views, used only while the
// call's tensors live, skip the deleter's allocation).
at::Tensor raw_view(const at::Tensor& tensor, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                    bool owning = true);

}  // namespace torch_layouts
