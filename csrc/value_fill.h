// One value stored into adjacent elements, by memset where the value is one repeated byte (0, the
// usual pad): memset's stores are the CPU's widest, while std::fill_n compiles to 16-byte stores in
// this project's baseline build (a fresh 16x16 float32 result's 2 KiB: ~500 instructions; the
// 128 KiB sparse result of sum(-1) of 1024x256 float32: 42 thousand).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace torch_layouts {

// p[0 .. n) = v.
template <typename E>
inline void fill_value(E* p, int64_t n, E v) {
  unsigned char bytes[sizeof(E)];
  std::memcpy(bytes, &v, sizeof(E));
  if (std::all_of(bytes, bytes + sizeof(E), [&](unsigned char b) { return b == bytes[0]; })) {
    std::memset(p, bytes[0], static_cast<size_t>(n) * sizeof(E));
  } else {
    std::fill_n(p, n, v);
  }
}

// Rows [begin, end) of n adjacent elements each, `step` elements apart from p, set to v: one
// fill_value where the rows' runs are adjacent (step == n: a stick column's rows), else row by row
// (short runs: std::fill_n inline, where a memset call per row would cost more than it stores).
template <typename E>
inline void fill_rows(E* p, int64_t begin, int64_t end, int64_t step, int64_t n, E v) {
  if (step == n) return fill_value(p + begin * step, (end - begin) * n, v);
  for (int64_t k = begin; k < end; ++k) std::fill_n(p + k * step, n, v);
}

}  // namespace torch_layouts
