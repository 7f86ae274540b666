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

}  // namespace torch_layouts
