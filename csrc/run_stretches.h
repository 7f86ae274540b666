// Work items over the intra-op threads (the DMA executor's copies), and over a loop nest whose
// innermost loop is a contiguous run on every operand (a converting copy's two buffers, a
// comparison's three views): a position of the outer loops and a stretch of the largest of them.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace torch_layouts {

// Work items of about 64 KiB: a copy of n bytes takes min(threads, n / 64 KiB) threads, as
// PyTorch's own copy (32768 elements a grain) does. With 256 KiB items a 1 MiB copy took 4 of 16
// threads (Intel, 16 threads, 1 MiB, the 75 benchmark copies: 1.91 -> 1.01x memcpy, 5 -> 48
// meeting both goals), and one of 256-384 KiB a single thread at 2 (Spyre default float16 H2D,
// 256 KiB: 6.2-6.9 -> 4.7 us); 1 and 32 MiB at 2 threads as fast either way.
constexpr int64_t kParallelBytes = int64_t(1) << 16;

// body(begin, end) over [0, items) work items of item_bytes each: split over the intra-op threads
// where there are at least two items' worth of kParallelBytes, else on this thread.
template <typename Body>
void for_items(int64_t items, int64_t item_bytes, const Body& body) {
  if (items > 1 && items * item_bytes >= 2 * kParallelBytes) {
    at::parallel_for(0, items, std::max<int64_t>(1, kParallelBytes / item_bytes), body);
  } else {
    body(0, items);
  }
}

// One outer loop: its size and each operand's stride (elements).
template <size_t N>
struct StridedLoop {
  int64_t size;
  std::array<int64_t, N> strides;
};

// Appends `loop`, the next one inward, to loops: merged into loops.back() where that one continues
// it on every operand (its stride there is loop's size times loop's stride), else after it.
// (loops: a std::vector or c10::SmallVector of StridedLoop<N>.)
template <size_t N, typename Loops>
void push_merged(Loops& loops, const StridedLoop<N>& loop) {
  if (!loops.empty()) {
    StridedLoop<N>& outer = loops.back();
    bool continues = true;
    for (size_t k = 0; k < N; ++k) continues = continues && outer.strides[k] == loop.size * loop.strides[k];
    if (continues) {
      outer = {outer.size * loop.size, loop.strides};
      return;
    }
  }
  loops.push_back(loop);
}

// The positions of loops' nest: the product of their sizes (1 for none).
template <typename Loops>
int64_t positions_of(const Loops& loops) {
  int64_t positions = 1;
  for (const auto& loop : loops) positions *= loop.size;
  return positions;
}

// Adds to `at` each operand's element offset of position `index` of loops' nest (the last loop
// the fastest), its digits read by division.
template <size_t N, typename Loops>
void add_position(std::array<int64_t, N>& at, const Loops& loops, int64_t index) {
  for (size_t k = loops.size(); k-- > 0;) {
    const int64_t idx = index % loops[k].size;
    index /= loops[k].size;
    for (size_t n = 0; n < N; ++n) at[n] += idx * loops[k].strides[n];
  }
}

// body(offsets, count, inner) per work item: each operand's element offset (from `base`) of the
// item's first run, how many runs of the largest loop (`inner`, the last of the largest: the
// innermost of equals) it takes, about kParallelBytes of runs of `run` elements of `esize` bytes a
// stretch; for_items splits them (a small nest runs on this thread: a float16 cast of 32x64 took
// 2.7 us with both threads woken, 1.3 without).
template <size_t N, typename Body>
void for_stretches(std::vector<StridedLoop<N>> loops, const std::array<int64_t, N>& base, int64_t run,
                   int64_t esize, const Body& body) {
  if (loops.empty()) loops.push_back({1, {}});
  size_t largest = 0;
  for (size_t k = 1; k < loops.size(); ++k) largest = loops[k].size >= loops[largest].size ? k : largest;
  const StridedLoop<N> inner = loops[largest];
  loops.erase(loops.begin() + static_cast<std::ptrdiff_t>(largest));
  const int64_t positions = positions_of(loops);
  const int64_t run_bytes = std::max<int64_t>(run, 1) * esize;
  const int64_t stretch = std::max<int64_t>(1, kParallelBytes / run_bytes);
  const int64_t stretches = (inner.size + stretch - 1) / stretch;
  for_items(positions * stretches, std::min(stretch, inner.size) * run_bytes, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t first = (i % stretches) * stretch;
      std::array<int64_t, N> at = base;
      for (size_t n = 0; n < N; ++n) at[n] += first * inner.strides[n];
      add_position(at, loops, i / stretches);
      body(at, std::min(stretch, inner.size - first), inner);
    }
  });
}

}  // namespace torch_layouts
