#include "tensor_impl.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>

#include <array>

#include "device_memory.h"
#include "dma_executor.h"
#include "dtype_views.h"

namespace torch_layouts {

SpyreTensorImpl::SpyreTensorImpl(c10::Storage&& storage, c10::DispatchKeySet keys, const caffe2::TypeMeta dtype,
                                 LayoutPtr layout)
    : c10::TensorImpl(std::move(storage), keys, dtype), layout_(std::move(layout)) {}

SpyreTensorImpl::SpyreTensorImpl(c10::TensorImpl::ImplType type, c10::Storage&& storage, c10::DispatchKeySet keys,
                                 const caffe2::TypeMeta dtype, LayoutPtr layout)
    : c10::TensorImpl(type, std::move(storage), keys, dtype), layout_(std::move(layout)) {}

template <typename VariableVersion>
c10::intrusive_ptr<c10::TensorImpl> SpyreTensorImpl::detach_core(VariableVersion&& version_counter,
                                                                 bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<SpyreTensorImpl>(c10::Storage(storage_), key_set_, data_type_, layout_);
  impl->elements_view_ = elements_view_;
  copy_tensor_metadata(this, impl.get(), std::forward<VariableVersion>(version_counter),
                       allow_tensor_metadata_change);
  impl->refresh_numel();
  impl->refresh_contiguous();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> SpyreTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  return detach_core(version_counter, allow_tensor_metadata_change);
}

c10::intrusive_ptr<c10::TensorImpl> SpyreTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  return detach_core(std::move(version_counter), allow_tensor_metadata_change);
}

void SpyreTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  copy_tensor_metadata(impl.get(), this, version_counter(), allow_tensor_metadata_change());
  if (auto* other = dynamic_cast<SpyreTensorImpl*>(impl.get())) {
    layout_ = other->layout_;
    elements_view_ = other->elements_view_;
  } else if (Block* block = block_of(storage_.data_ptr())) {
    layout_ = block->layout;
  }
  refresh_numel();
  refresh_contiguous();
}

LayoutPtr layout_of(const at::Tensor& tensor) {
  // The storage's block wins: resize_ may re-lay a buffer that other views share.
  if (tensor.has_storage()) {
    if (Block* block = block_of(tensor.storage().data_ptr()); block && block->layout) return block->layout;
  }
  if (auto* impl = dynamic_cast<SpyreTensorImpl*>(tensor.unsafeGetTensorImpl())) return impl->layout();
  return nullptr;
}

bool append_geometry_key(std::vector<int64_t>& key, const at::Tensor& tensor) {
  const LayoutPtr layout = tensor.is_privateuseone() ? layout_of(tensor) : nullptr;
  if (!layout) return false;
  key.insert(key.end(), {tensor.device().index(), static_cast<int64_t>(tensor.scalar_type()), tensor.dim()});
  key.insert(key.end(), tensor.sizes().begin(), tensor.sizes().end());
  key.insert(key.end(), tensor.strides().begin(), tensor.strides().end());
  key.insert(key.end(), {tensor.storage_offset(), static_cast<int64_t>(reinterpret_cast<intptr_t>(layout->layout->get())),
                         static_cast<int64_t>(layout->base_size.size())});
  key.insert(key.end(), layout->base_size.begin(), layout->base_size.end());
  key.insert(key.end(), layout->base_stride.begin(), layout->base_stride.end());
  return true;
}

std::vector<int64_t> geometry_key(const at::Tensor& tensor) {
  std::vector<int64_t> key;
  key.reserve(32);
  append_geometry_key(key, tensor);  // appends nothing to a tensor without a layout
  return key;
}

// A byte tensor spanning its whole storage from offset 0 that is not the layout's own base nor a
// view of elements (make_alias): the storage itself (UntypedStorage.cpu(), copy_, clone, which
// set_ a byte tensor onto it), read and written raw, padding included.
bool is_storage_bytes(const at::Tensor& tensor, const BoundLayout& layout) {
  const auto* impl = dynamic_cast<const SpyreTensorImpl*>(tensor.unsafeGetTensorImpl());
  if (impl != nullptr && impl->elements_view()) return false;
  if (tensor.scalar_type() != at::kByte || tensor.dim() != 1 || tensor.storage_offset() != 0 ||
      tensor.stride(0) != 1 || tensor.numel() != static_cast<int64_t>(tensor.storage().nbytes())) {
    return false;
  }
  return !(layout.dtype == at::kByte && is_whole_base(tensor, layout));
}

LayoutPtr element_layout_of(const at::Tensor& tensor) {
  LayoutPtr layout = layout_of(tensor);
  if (layout && is_storage_bytes(tensor, *layout)) return nullptr;  // raw device bytes, in device order
  if (!layout || static_cast<int64_t>(c10::elementSize(layout->dtype)) == tensor.element_size()) return layout;
  if (layout->identity) return nullptr;  // the bytes are in host order: any element size reads them
  LayoutPtr view = dtype_view_layout(*layout, tensor.scalar_type());
  TORCH_CHECK(view != nullptr, "a ", tensor.scalar_type(), " view cannot address a spyre buffer laid out for ",
              layout->dtype, ": the ", tensor.element_size(), "-byte elements' parts are not adjacent on the device "
              "(copy it to a strided layout first, e.g. .cpu().view(dtype))");
  return view;
}

namespace {

// A tensor of `layout` over `storage`, a device buffer of its bytes; its padding set to the pad
// value where `fill`.
at::Tensor tensor_on(const LayoutPtr& layout, c10::Storage storage, bool fill) {
  if (Block* block = block_of(storage.data_ptr())) block->layout = layout;
  auto tensor = at::detail::make_tensor<SpyreTensorImpl>(std::move(storage),
                                                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                         c10::scalarTypeToTypeMeta(layout->dtype), layout);
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(layout->base_size, layout->base_stride);
  if (fill && !layout->padding.empty()) {
    const c10::Storage& buffer = tensor.storage();
    fill_fresh(layout->padding, buffer.mutable_data(),
               device_nbytes(buffer) / static_cast<int64_t>(c10::elementSize(layout->dtype)), layout->dtype,
               layout->pad_value);
  }
  return tensor;
}

}  // namespace

at::Tensor new_device_tensor(const LayoutPtr& layout, c10::Device device, bool fill) {
  check_device_index(device.index());
  c10::DeviceGuard guard(device);
  return tensor_on(layout, c10::Storage(c10::Storage::use_byte_size_t(), layout->storage_nbytes, device_allocator(),
                                        /*resizable=*/true),
                   fill);
}

at::Tensor device_tensor_from(const LayoutPtr& layout, c10::DataPtr data) {
  TORCH_INTERNAL_ASSERT(block_of(data) != nullptr && block_of(data)->nbytes >= layout->storage_nbytes,
                        "device_tensor_from needs a device block of the layout's bytes");
  return tensor_on(layout, c10::Storage(c10::Storage::use_byte_size_t(), layout->storage_nbytes, std::move(data),
                                        device_allocator(), /*resizable=*/true),
                   /*fill=*/true);
}

void fill_padding(const at::Tensor& tensor, const BoundLayout& layout) {
  if (layout.padding.empty()) return;
  const c10::Storage& storage = tensor.storage();
  run_fills(layout.padding, storage.mutable_data(),
            device_nbytes(storage) / static_cast<int64_t>(c10::elementSize(layout.dtype)), layout.dtype,
            layout.pad_value);
}

at::Tensor make_alias(const at::Tensor& self, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                      int64_t storage_offset, std::optional<caffe2::TypeMeta> dtype) {
  LayoutPtr layout = layout_of(self);
  auto impl = c10::make_intrusive<SpyreTensorImpl>(c10::TensorImpl::VIEW, c10::Storage(self.storage()),
                                                   self.key_set(), dtype.value_or(self.dtype()), layout);
  impl->set_elements_view(!(layout && is_storage_bytes(self, *layout)));  // a view of raw bytes stays raw
  at::Tensor result(std::move(impl));
  at::native::setStrided(result, sizes, strides, storage_offset);
  return result;
}

bool is_whole_base(const at::Tensor& tensor, const BoundLayout& layout) {
  if (layout.dtype_view) return false;  // dtype views have no DMA nests: copies go by address
  if (tensor.storage_offset() != 0 || tensor.sizes() != c10::IntArrayRef(layout.base_size)) return false;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.size(d) > 1 && tensor.stride(d) != layout.base_stride[d]) return false;
  }
  return true;
}

at::Tensor raw_buffer(const at::Tensor& tensor, c10::ScalarType dtype, int64_t numel) {
  c10::Storage storage = tensor.storage();
  const int64_t capacity = device_nbytes(storage) / static_cast<int64_t>(c10::elementSize(dtype));
  TORCH_CHECK_INDEX(numel <= capacity, "raw buffer of ", numel, " elements is longer than its device buffer of ",
                    capacity);
  if (numel < 0) numel = capacity;
  return at::from_blob(
      storage.mutable_data(), {numel}, [storage](void*) mutable { storage = c10::Storage(); },
      at::TensorOptions().dtype(dtype).device(at::kCPU));
}

namespace {

// A replay's borrowed views, kept per thread and handed out again for the same dtype and geometry
// while no one else holds them: a new CPU tensor costs ~1000 instructions (its storage, its impl,
// its contiguity flags), two or three per replayed call. A kept view borrows no memory: one of the
// same bytes is handed out as it is; one of other bytes (a fresh result's buffer, which the
// allocator hands out at another address from step to step) is pointed at the new bytes where
// nothing else shares its storage (a view of it would see the change), as its storage is its own.
struct KeptView {
  at::Tensor view;    // its dtype and geometry are the key; its storage's bytes, where it points
  bool inference = false;
  uint64_t used = 0;  // the thread's lend count when it was last lent (the oldest of a set is replaced)
  uint64_t hash = 0;  // of the key, compared before the key itself
};
constexpr size_t kKeptWays = 4;    // views per set: an op's operands often share one geometry
constexpr size_t kKeptSets = 128;  // the top 7 bits of a hash of the geometry pick the set

// Whether `k` views elements so, held by no one else (the computes it was lent to are done).
bool same_geometry(const KeptView& k, c10::ScalarType dtype, bool inference, c10::IntArrayRef sizes,
                   c10::IntArrayRef strides, int64_t offset) {
  const at::Tensor& v = k.view;
  return v.defined() && v.use_count() == 1 && k.inference == inference && v.scalar_type() == dtype &&
         v.storage_offset() == offset && v.sizes() == sizes && v.strides() == strides;
}

at::Tensor borrowed_view(const c10::Storage& storage, int64_t nbytes, const caffe2::TypeMeta dtype,
                         c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  thread_local std::array<KeptView, kKeptSets * kKeptWays> kept;  // a thread's views, released when it ends
  thread_local uint64_t lent = 0;
  const void* data = storage.data();
  const bool inference = c10::InferenceMode::is_enabled();
  const c10::ScalarType type = dtype.toScalarType();
  uint64_t h = static_cast<uint64_t>(offset) * 64 + static_cast<uint64_t>(type) * 2 + inference;
  for (size_t d = 0; d < sizes.size(); ++d) h = h * 31 + static_cast<uint64_t>(sizes[d] * 7 + strides[d]);
  h *= 0x9E3779B97F4A7C15ull;  // the high bits mix every input bit
  KeptView* set = &kept[(h >> 57) * kKeptWays];
  ++lent;
  KeptView *spare = nullptr, *oldest = set;
  for (KeptView* k = set; k < set + kKeptWays; ++k) {
    if (k->used < oldest->used) oldest = k;
    if (k->hash != h || !same_geometry(*k, type, inference, sizes, strides, offset)) continue;
    const c10::Storage& held = k->view.storage();
    if (held.data() == data && static_cast<int64_t>(held.nbytes()) == nbytes) {
      k->used = lent;
      return k->view;
    }
    if (spare == nullptr && held.use_count() == 1) spare = k;
  }
  if (spare != nullptr) {
    spare->view.storage().unsafeGetStorageImpl()->UniqueStorageShareExternalPointer(
        c10::DataPtr(const_cast<void*>(data), c10::Device(c10::kCPU)), static_cast<size_t>(nbytes));
    spare->used = lent;
    return spare->view;
  }
  c10::Storage cpu(c10::Storage::use_byte_size_t{}, nbytes,
                   c10::DataPtr(const_cast<void*>(data), c10::Device(c10::kCPU)), /*allocator=*/nullptr,
                   /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(cpu), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
  impl->set_sizes_and_strides(sizes, strides, offset);
  *oldest = KeptView{at::Tensor(std::move(impl)), inference, lent, h};
  return oldest->view;
}

}  // namespace

at::Tensor raw_view(const at::Tensor& tensor, c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                    bool owning) {
  TORCH_CHECK_VALUE(sizes.size() == strides.size(), "raw view has ", sizes.size(), " sizes but ", strides.size(),
                    " strides");
  const c10::Storage& storage = tensor.storage();
  const int64_t numel = device_nbytes(storage) / static_cast<int64_t>(tensor.element_size());
  int64_t last = offset;
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    TORCH_CHECK_VALUE(sizes[d] >= 0 && strides[d] >= 0, "raw view dim ", d, " has size ", sizes[d], " and stride ",
                      strides[d], " (both must be >= 0)");
    empty |= sizes[d] == 0;
    if (sizes[d] > 0) last += (sizes[d] - 1) * strides[d];
  }
  TORCH_CHECK_INDEX(offset >= 0 && (empty || last < numel), "raw view of elements [", offset, ", ", last,
                    "] reaches outside its device buffer of ", numel, " elements");
  if (!owning) return borrowed_view(storage, numel * static_cast<int64_t>(tensor.element_size()), tensor.dtype(), sizes,
                                    strides, offset);
  auto maker = at::for_blob(static_cast<char*>(storage.mutable_data()), sizes);
  maker.strides(strides).storage_offset(offset).options(at::TensorOptions().dtype(tensor.scalar_type()).device(at::kCPU));
  maker.deleter([held = storage](void*) mutable { held = c10::Storage(); });
  return maker.make_tensor();
}

}  // namespace torch_layouts
