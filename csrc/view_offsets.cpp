#include "view_offsets.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Exception.h>

#include <atomic>

namespace torch_layouts {

at::Tensor view_offsets(const BoundLayout& layout, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                        int64_t storage_offset) {
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(at::kLong));
  int64_t* result = out.mutable_data_ptr<int64_t>();
  const int64_t nd = static_cast<int64_t>(sizes.size());
  const auto& table = layout.address;
  const auto& base = layout.base_size;
  std::atomic<int64_t> bad{-1};

  auto device_offset = [&](int64_t v, std::vector<int64_t>& coord) -> int64_t {
    const int64_t original = v;
    for (const auto& [dim, stride] : table.host_order) {
      int64_t c = v >= 0 ? v / stride : 0;
      if (c >= base[dim]) c = base[dim] - 1;
      coord[dim] = c;
      v -= c * stride;
    }
    if (v != 0) {
      bad = original;
      return 0;
    }
    int64_t offset = 0;
    for (const auto& group : table.groups) {
      int64_t h = 0;
      for (const int64_t d : group.host_dims) h = h * base[d] + coord[d];
      for (const auto& [step, device_stride] : group.digits) {
        const int64_t q = h / step;
        h -= q * step;
        offset += q * device_stride;
      }
    }
    return offset;
  };

  at::parallel_for(0, out.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd), coord(base.size(), 0);
    int64_t rem = begin, v = storage_offset;
    for (int64_t k = nd - 1; k >= 0; --k) {
      idx[k] = rem % sizes[k];
      rem /= sizes[k];
      v += idx[k] * strides[k];
    }
    for (int64_t i = begin; i < end; ++i) {
      result[i] = device_offset(v, coord);
      for (int64_t k = nd - 1; k >= 0; --k) {
        v += strides[k];
        if (++idx[k] < sizes[k]) break;
        v -= strides[k] * sizes[k];
        idx[k] = 0;
      }
    }
  });
  TORCH_CHECK_INDEX(bad.load() < 0, "a view reaches element offset ", bad.load(),
                    ", which is not an element of its base tensor (size ", c10::IntArrayRef(base), ", stride ",
                    c10::IntArrayRef(layout.base_stride), ")");
  return out;
}

at::Tensor copy_offsets(const BoundLayout& layout) {
  std::vector<int64_t> offsets{0};
  for (const auto& [size, device_stride] : layout.address.copies) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * size);
    for (const int64_t base : offsets)
      for (int64_t k = 0; k < size; ++k) next.push_back(base + k * device_stride);
    offsets = std::move(next);
  }
  return at::tensor(offsets, at::TensorOptions().dtype(at::kLong));
}

}  // namespace torch_layouts
