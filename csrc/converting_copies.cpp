#include "converting_copies.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>

#include "dma_executor.h"
#include "row_math.h"

namespace torch_layouts {
namespace {

// Runs per work item: about 64 KiB of float32, as the DMA executor's items.
constexpr int64_t kItemFloats = 16384;

struct Loop {
  int64_t size, dst, src;
};

// The nest's loops but its innermost run, outermost first by destination stride (writes run on),
// and the run's length; 0 where the innermost loop is no run of at least 8 elements on both sides.
int64_t outer_loops(const Transfer& nest, std::vector<Loop>& loops) {
  for (size_t k = 0; k < nest.ranges.size(); ++k) {
    if (nest.ranges[k] != 1) loops.push_back({nest.ranges[k], nest.dst_strides[k], nest.src_strides[k]});
  }
  std::stable_sort(loops.begin(), loops.end(), [](const Loop& a, const Loop& b) { return std::abs(a.dst) > std::abs(b.dst); });
  if (loops.empty()) return 1;
  const Loop run = loops.back();
  if (run.dst != 1 || run.src != 1 || run.size < 8) return 0;
  loops.pop_back();
  return run.size;
}

template <typename D, typename S, typename Convert>
void convert_nest(D* dst, const S* src, const Transfer& nest, const std::vector<Loop>& loops, int64_t run,
                  const Convert& convert) {
  int64_t positions = 1;
  for (const Loop& loop : loops) positions *= loop.size;
  const int64_t nd = static_cast<int64_t>(loops.size());
  at::parallel_for(0, positions, std::max<int64_t>(1, kItemFloats / run), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(nd);
    int64_t d = nest.dst_offset, s = nest.src_offset;
    for (int64_t k = nd - 1, rest = begin; k >= 0; --k) {  // position begin's offsets, then an odometer
      idx[k] = rest % loops[k].size;
      rest /= loops[k].size;
      d += idx[k] * loops[k].dst;
      s += idx[k] * loops[k].src;
    }
    for (int64_t i = begin; i < end; ++i) {
      convert(dst + d, src + s, run);
      for (int64_t k = nd - 1; k >= 0; --k) {
        d += loops[k].dst;
        s += loops[k].src;
        if (++idx[k] < loops[k].size) break;
        d -= loops[k].dst * loops[k].size;
        s -= loops[k].src * loops[k].size;
        idx[k] = 0;
      }
    }
  });
}

}  // namespace

bool run_converting_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, c10::ScalarType dst_type,
                          const void* src, int64_t src_numel, c10::ScalarType src_type) {
  const bool to_half = src_type == at::kFloat && dst_type == at::kHalf;
  if (!to_half && !(src_type == at::kHalf && dst_type == at::kFloat)) return false;
  const std::vector<std::string>& sets = row_math_sets();
  if (std::find(sets.begin(), sets.end(), "avx2") == sets.end()) return false;
  std::vector<std::vector<Loop>> loops(nests.size());
  std::vector<int64_t> runs(nests.size());
  for (size_t k = 0; k < nests.size(); ++k) {
    runs[k] = outer_loops(nests[k], loops[k]);
    if (runs[k] == 0) return false;
  }
  check_nests(nests, dst_numel, src_numel);
  const RowMath& m = row_math("avx2");  // F16C's conversions, ATen's bits
  for (size_t k = 0; k < nests.size(); ++k) {
    bool empty = false;
    for (int64_t r : nests[k].ranges) empty |= r == 0;
    if (empty) continue;
    if (to_half) {
      convert_nest(static_cast<uint16_t*>(dst), static_cast<const float*>(src), nests[k], loops[k], runs[k],
                   [&](uint16_t* d, const float* s, int64_t n) { m.store_half(d, s, n); });
    } else {
      convert_nest(static_cast<float*>(dst), static_cast<const uint16_t*>(src), nests[k], loops[k], runs[k],
                   [&](float* d, const uint16_t* s, int64_t n) { m.load_half(d, s, n); });
    }
  }
  return true;
}

}  // namespace torch_layouts
