#include "dma_executor.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <cstring>

namespace torch_layouts {
namespace {

constexpr int64_t kParallelBytes = int64_t(1) << 18;

// [low, high) element offsets a nest touches; throws on overflow.
std::pair<int64_t, int64_t> span(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides,
                                 int64_t offset) {
  int64_t low = offset, high = offset;
  for (const auto k : c10::irange(ranges.size())) {
    TORCH_CHECK_VALUE(ranges[k] >= 0, "DMA nest has a negative loop range ", ranges[k]);
    if (ranges[k] == 0) return {offset, offset};
    int64_t reach = 0;
    TORCH_CHECK_VALUE(!__builtin_mul_overflow(ranges[k] - 1, strides[k], &reach),
                      "DMA nest loop of range ", ranges[k], " and stride ", strides[k], " overflows");
    TORCH_CHECK_VALUE(!__builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high),
                      "DMA nest addresses overflow");
  }
  return {low, high + 1};
}

void check_nest(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides, int64_t offset,
                int64_t numel, const char* what) {
  TORCH_CHECK_VALUE(strides.size() == ranges.size(), "DMA nest has ", ranges.size(), " loop ranges but ",
                    strides.size(), " ", what, " strides");
  auto [low, high] = span(ranges, strides, offset);
  bool empty = false;
  for (auto r : ranges) empty |= r == 0;
  TORCH_CHECK_INDEX(empty || (low >= 0 && high <= numel), "DMA nest ", what, " touches elements [", low, ", ",
                    high, ") outside its buffer of ", numel, " elements");
}

template <typename T>
inline void copy_strided(char* d, const char* s, int64_t n, int64_t ds, int64_t ss) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(d + i * ds * int64_t(sizeof(T)), s + i * ss * int64_t(sizeof(T)), sizeof(T));
  }
}

void copy_inner(char* d, const char* s, int64_t n, int64_t ds, int64_t ss, int64_t esize) {
  if (ds == 1 && ss == 1) {
    const int64_t bytes = n * esize;
    if (bytes == 128) {
      std::memcpy(d, s, 128);
    } else {
      std::memcpy(d, s, static_cast<size_t>(bytes));
    }
    return;
  }
  switch (esize) {
    case 1: copy_strided<uint8_t>(d, s, n, ds, ss); break;
    case 2: copy_strided<uint16_t>(d, s, n, ds, ss); break;
    case 4: copy_strided<uint32_t>(d, s, n, ds, ss); break;
    case 8: copy_strided<uint64_t>(d, s, n, ds, ss); break;
    default: TORCH_CHECK(false, "unsupported element size ", esize);
  }
}

void copy_nest(char* dst, const char* src, const Nest& nest, int64_t esize) {
  const int64_t nd = static_cast<int64_t>(nest.ranges.size());
  if (nd == 0) {
    std::memcpy(dst + nest.dst_offset * esize, src + nest.src_offset * esize, esize);
    return;
  }
  const int64_t inner = nest.ranges[nd - 1], dsi = nest.dst_strides[nd - 1], ssi = nest.src_strides[nd - 1];
  int64_t outer = 1;
  for (int64_t k = 0; k + 1 < nd; ++k) outer *= nest.ranges[k];
  const int64_t total_bytes = outer * inner * esize;

  if (outer == 1 && dsi == 1 && ssi == 1) {  // one contiguous run: split it across threads
    char* d = dst + nest.dst_offset * esize;
    const char* s = src + nest.src_offset * esize;
    at::parallel_for(0, total_bytes, total_bytes > kParallelBytes ? kParallelBytes : total_bytes + 1,
                     [&](int64_t begin, int64_t end) { std::memcpy(d + begin, s + begin, end - begin); });
    return;
  }
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd - 1);
    int64_t rem = begin, doff = nest.dst_offset, soff = nest.src_offset;
    for (int64_t k = nd - 2; k >= 0; --k) {
      idx[k] = rem % nest.ranges[k];
      rem /= nest.ranges[k];
      doff += idx[k] * nest.dst_strides[k];
      soff += idx[k] * nest.src_strides[k];
    }
    for (int64_t i = begin; i < end; ++i) {
      copy_inner(dst + doff * esize, src + soff * esize, inner, dsi, ssi, esize);
      for (int64_t k = nd - 2; k >= 0; --k) {
        doff += nest.dst_strides[k];
        soff += nest.src_strides[k];
        if (++idx[k] < nest.ranges[k]) break;
        doff -= nest.dst_strides[k] * nest.ranges[k];
        soff -= nest.src_strides[k] * nest.ranges[k];
        idx[k] = 0;
      }
    }
  };
  if (total_bytes >= 2 * kParallelBytes && outer > 1) {
    const int64_t grain = std::max<int64_t>(1, kParallelBytes / std::max<int64_t>(1, inner * esize));
    at::parallel_for(0, outer, grain, body);
  } else {
    body(0, outer);
  }
}

}  // namespace

void run_nests(const std::vector<Nest>& nests, void* dst, int64_t dst_numel, const void* src, int64_t src_numel,
               int64_t element_size) {
  for (const auto& nest : nests) {
    check_nest(nest.ranges, nest.dst_strides, nest.dst_offset, dst_numel, "destination");
    check_nest(nest.ranges, nest.src_strides, nest.src_offset, src_numel, "source");
  }
  for (const auto& nest : nests) {
    bool empty = false;
    for (auto r : nest.ranges) empty |= r == 0;
    if (!empty) copy_nest(static_cast<char*>(dst), static_cast<const char*>(src), nest, element_size);
  }
}

void run_fills(const std::vector<Fill>& fills, const at::Tensor& device_flat, const c10::Scalar& value) {
  for (const auto& fill : fills) check_nest(fill.ranges, fill.strides, fill.offset, device_flat.numel(), "padding");
  for (const auto& fill : fills) {
    device_flat.as_strided(fill.ranges, fill.strides, fill.offset).fill_(value);
  }
}

}  // namespace torch_layouts
