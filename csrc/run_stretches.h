// Work items over a loop nest whose innermost loop is a contiguous run on every operand (a
// converting copy's two buffers, a comparison's three views): a position of the outer loops and
// a stretch of the largest of them, over the intra-op threads.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace torch_layouts {

// One outer loop: its size and each operand's stride (elements).
template <size_t N>
struct StridedLoop {
  int64_t size;
  std::array<int64_t, N> strides;
};

// body(offsets, count, inner) per work item: each operand's element offset (from `base`) of the
// item's first run, how many runs of the largest loop (`inner`, the last of the largest: the
// innermost of equals) it takes, about `item_elements` elements of runs of `run` a stretch.
template <size_t N, typename Body>
void for_stretches(std::vector<StridedLoop<N>> loops, const std::array<int64_t, N>& base, int64_t run,
                   int64_t item_elements, const Body& body) {
  if (loops.empty()) loops.push_back({1, {}});
  size_t largest = 0;
  for (size_t k = 1; k < loops.size(); ++k) largest = loops[k].size >= loops[largest].size ? k : largest;
  const StridedLoop<N> inner = loops[largest];
  loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(largest));
  int64_t positions = 1;
  for (const auto& loop : loops) positions *= loop.size;
  const int64_t stretch = std::max<int64_t>(1, item_elements / std::max<int64_t>(run, 1));
  const int64_t stretches = (inner.size + stretch - 1) / stretch;
  at::parallel_for(0, positions * stretches, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t first = (i % stretches) * stretch;
      std::array<int64_t, N> at = base;
      for (size_t n = 0; n < N; ++n) at[n] += first * inner.strides[n];
      int64_t rest = i / stretches;
      for (size_t k = loops.size(); k-- > 0;) {
        const int64_t idx = rest % loops[k].size;
        rest /= loops[k].size;
        for (size_t n = 0; n < N; ++n) at[n] += idx * loops[k].strides[n];
      }
      body(at, std::min(stretch, inner.size - first), inner);
    }
  });
}

}  // namespace torch_layouts
