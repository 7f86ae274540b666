#include "dma_executor.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <cstring>

namespace torch_layouts {
namespace {

constexpr int64_t kParallelBytes = int64_t(1) << 18;

// [low, high] element offsets a nest touches (inclusive); throws on overflow.
std::pair<int64_t, int64_t> span(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides,
                                 int64_t offset) {
  int64_t low = offset, high = offset;
  for (const auto k : c10::irange(ranges.size())) {
    TORCH_CHECK_VALUE(ranges[k] >= 0, "DMA nest has a negative loop range ", ranges[k]);
    int64_t reach = 0;
    TORCH_CHECK_VALUE(ranges[k] == 0 || !__builtin_mul_overflow(ranges[k] - 1, strides[k], &reach),
                      "DMA nest loop of range ", ranges[k], " and stride ", strides[k], " overflows");
    TORCH_CHECK_VALUE(!__builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high),
                      "DMA nest addresses overflow");
  }
  return {low, high};
}

void check_nest(const std::vector<int64_t>& ranges, const std::vector<int64_t>& strides, int64_t offset,
                int64_t numel, const char* what) {
  TORCH_CHECK_VALUE(strides.size() == ranges.size(), "DMA nest has ", ranges.size(), " loop ranges but ",
                    strides.size(), " ", what, " strides");
  bool empty = false;
  for (auto r : ranges) empty |= r == 0;
  if (empty) return;
  auto [low, high] = span(ranges, strides, offset);
  TORCH_CHECK_INDEX(low >= 0 && high < numel, "DMA nest ", what, " touches elements [", low, ", ", high,
                    "] outside its buffer of ", numel, " elements");
}

template <typename T>
inline void copy_strided(char* d, const char* s, int64_t n, int64_t ds, int64_t ss) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(d + i * ds * int64_t(sizeof(T)), s + i * ss * int64_t(sizeof(T)), sizeof(T));
  }
}

template <int64_t Bytes>
inline void copy_runs(char* d, const char* s, int64_t n, int64_t ds, int64_t ss) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, Bytes);
}

// The two innermost loops of a nest: `n` runs of `run` contiguous bytes (or strided elements).
struct Inner {
  int64_t run_bytes;       // > 0: the innermost loop is contiguous on both sides
  int64_t n, dst, src;     // the loop over runs (byte strides), or over elements when run_bytes == 0
};

void copy_inner(char* d, const char* s, const Inner& in, int64_t esize) {
  if (in.run_bytes > 0) {
    switch (in.run_bytes) {
      case 8: return copy_runs<8>(d, s, in.n, in.dst, in.src);
      case 16: return copy_runs<16>(d, s, in.n, in.dst, in.src);
      case 32: return copy_runs<32>(d, s, in.n, in.dst, in.src);
      case 64: return copy_runs<64>(d, s, in.n, in.dst, in.src);
      case 128: return copy_runs<128>(d, s, in.n, in.dst, in.src);
      case 256: return copy_runs<256>(d, s, in.n, in.dst, in.src);
      default:
        for (int64_t i = 0; i < in.n; ++i) std::memcpy(d + i * in.dst, s + i * in.src, in.run_bytes);
        return;
    }
  }
  switch (esize) {
    case 1: return copy_strided<uint8_t>(d, s, in.n, in.dst, in.src);
    case 2: return copy_strided<uint16_t>(d, s, in.n, in.dst / 2, in.src / 2);
    case 4: return copy_strided<uint32_t>(d, s, in.n, in.dst / 4, in.src / 4);
    case 8: return copy_strided<uint64_t>(d, s, in.n, in.dst / 8, in.src / 8);
    default: TORCH_CHECK(false, "unsupported element size ", esize);
  }
}

struct Loop {
  int64_t size, dst, src;  // element strides
};

// dst[b*t + a] = src[a*s + b] for a < na, b < nb (element strides), in cache-sized tiles.
// The side with the larger stride is walked one full cache line at a time; the other
// side's lines stay in L1 across the tile (large power-of-two strides alias in cache sets).
template <typename E>
void transpose(char* dst, const char* src, int64_t na, int64_t nb, int64_t s, int64_t t) {
  constexpr int64_t kTile = 64 / sizeof(E) < 8 ? 8 : 64 / sizeof(E);
  auto* d = reinterpret_cast<E*>(dst);
  const auto* sp = reinterpret_cast<const E*>(src);
  const bool src_wide = std::abs(s) >= std::abs(t);
  for (int64_t a0 = 0; a0 < na; a0 += kTile) {
    const int64_t a1 = std::min(na, a0 + kTile);
    for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
      const int64_t b1 = std::min(nb, b0 + kTile);
      if (src_wide) {
        for (int64_t a = a0; a < a1; ++a)
          for (int64_t b = b0; b < b1; ++b) d[b * t + a] = sp[a * s + b];
      } else {
        for (int64_t b = b0; b < b1; ++b)
          for (int64_t a = a0; a < a1; ++a) d[b * t + a] = sp[a * s + b];
      }
    }
  }
}

void transpose_any(char* d, const char* s, const Loop& inner, const Loop& next, int64_t esize) {
  switch (esize) {
    case 1: return transpose<uint8_t>(d, s, inner.size, next.size, inner.src, next.dst);
    case 2: return transpose<uint16_t>(d, s, inner.size, next.size, inner.src, next.dst);
    case 4: return transpose<uint32_t>(d, s, inner.size, next.size, inner.src, next.dst);
    case 8: return transpose<uint64_t>(d, s, inner.size, next.size, inner.src, next.dst);
    default: TORCH_CHECK(false, "unsupported element size ", esize);
  }
}

// Loops in destination order (writes run sequentially), merged where both sides run on.
std::vector<Loop> destination_order(const Transfer& nest) {
  std::vector<Loop> loops;
  for (size_t k = 0; k < nest.ranges.size(); ++k) {
    if (nest.ranges[k] != 1) loops.push_back({nest.ranges[k], nest.dst_strides[k], nest.src_strides[k]});
  }
  std::stable_sort(loops.begin(), loops.end(),
                   [](const Loop& a, const Loop& b) { return std::abs(a.dst) > std::abs(b.dst); });
  std::vector<Loop> merged;
  for (const Loop& loop : loops) {
    if (!merged.empty() && merged.back().dst == loop.dst * loop.size && merged.back().src == loop.src * loop.size) {
      merged.back() = {merged.back().size * loop.size, loop.dst, loop.src};
    } else {
      merged.push_back(loop);
    }
  }
  if (merged.empty()) merged.push_back({1, 1, 1});
  return merged;
}

void copy_nest(char* dst, const char* src, const Transfer& nest, int64_t esize) {
  std::vector<Loop> loops = destination_order(nest);
  char* d0 = dst + nest.dst_offset * esize;
  const char* s0 = src + nest.src_offset * esize;
  Inner inner{0, loops.back().size, loops.back().dst * esize, loops.back().src * esize};
  if (loops.back().dst == 1 && loops.back().src == 1) {
    const int64_t run = loops.back().size * esize;
    loops.pop_back();
    if (loops.empty()) {  // one contiguous run: split it across threads
      at::parallel_for(0, run, run > 2 * kParallelBytes ? kParallelBytes : run + 1,
                       [&](int64_t begin, int64_t end) { std::memcpy(d0 + begin, s0 + begin, end - begin); });
      return;
    }
    inner = {run, loops.back().size, loops.back().dst * esize, loops.back().src * esize};
  }
  // Two innermost loops that swap contiguity (dst runs along one, src along the other): tiled transpose.
  const bool transposing = inner.run_bytes == 0 && loops.size() >= 2 && loops.back().dst == 1 &&
                           loops[loops.size() - 2].src == 1 && loops.back().size >= 8 &&
                           loops[loops.size() - 2].size >= 8;
  Loop t_inner{}, t_next{};
  if (transposing) {
    t_inner = loops.back();
    loops.pop_back();
    t_next = loops.back();
  }
  loops.pop_back();  // the loop `inner` (or the transpose's outer loop) runs
  const int64_t nd = static_cast<int64_t>(loops.size());
  int64_t outer = 1;
  for (const Loop& loop : loops) outer *= loop.size;
  const int64_t inner_bytes =
      transposing ? t_inner.size * t_next.size * esize : inner.n * std::max<int64_t>(inner.run_bytes, esize);

  auto body = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd);
    int64_t rem = begin, doff = 0, soff = 0;
    for (int64_t k = nd - 1; k >= 0; --k) {
      idx[k] = rem % loops[k].size;
      rem /= loops[k].size;
      doff += idx[k] * loops[k].dst;
      soff += idx[k] * loops[k].src;
    }
    for (int64_t i = begin; i < end; ++i) {
      if (transposing) {
        transpose_any(d0 + doff * esize, s0 + soff * esize, t_inner, t_next, esize);
      } else {
        copy_inner(d0 + doff * esize, s0 + soff * esize, inner, esize);
      }
      for (int64_t k = nd - 1; k >= 0; --k) {
        doff += loops[k].dst;
        soff += loops[k].src;
        if (++idx[k] < loops[k].size) break;
        doff -= loops[k].dst * loops[k].size;
        soff -= loops[k].src * loops[k].size;
        idx[k] = 0;
      }
    }
  };
  if (outer * inner_bytes >= 2 * kParallelBytes && outer > 1) {
    at::parallel_for(0, outer, std::max<int64_t>(1, kParallelBytes / std::max<int64_t>(1, inner_bytes)), body);
  } else {
    body(0, outer);
  }
}

}  // namespace

void run_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, const void* src, int64_t src_numel,
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
