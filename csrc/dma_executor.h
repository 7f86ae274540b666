// Runs DMA nests between raw buffers: bounds-checked, multi-threaded strided copies.
#pragma once

#include <ATen/core/Tensor.h>

#include "bound_layout.h"

namespace torch_layouts {

// Which buffer's halves (thirds, ...) the threads of a tiled copy take: the source's, or the
// destination's. The host side's, so that each thread moves the part of the host tensor that the
// same thread of PyTorch's CPU kernels (and of memcpy) reads or writes: its cache lines are then in
// that core's cache, not another's (a D2H writing lines another core holds must take them over).
enum class Split { kSource, kDestination };

// Throws unless every nest stays within [0, dst_numel) of the destination and [0, src_numel) of
// the source.
void check_nests(const std::vector<Transfer>& nests, int64_t dst_numel, int64_t src_numel);

// Copies every nest from src to dst (element offsets). Throws before moving a byte
// if any nest reaches outside [0, numel) of either buffer.
void run_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, const void* src,
               int64_t src_numel, int64_t element_size, Split split = Split::kSource);

// Sets the copy size (bytes) from which nests write with non-temporal stores; returns the old one.
int64_t set_stream_bytes(int64_t bytes);

// Sets every position the fills cover in a device buffer of numel elements of dtype (at base) to value.
void run_fills(const std::vector<Fill>& fills, void* base, int64_t numel, c10::ScalarType dtype,
               const c10::Scalar& value);

// A fresh buffer's run_fills: where the fills cover at least half of it (a reduction's result of
// one element per stick), every element is set instead, its real positions too (whose contents a
// fresh buffer does not define), in one contiguous fill.
void fill_fresh(const std::vector<Fill>& fills, void* base, int64_t numel, c10::ScalarType dtype,
                const c10::Scalar& value);

}  // namespace torch_layouts
