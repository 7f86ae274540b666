// Conversions between float32 and float16 or bfloat16 device buffers by nests whose innermost loop
// is a contiguous run on both sides (a stick of one layout into part of a stick of the other):
// each run converted where it lies into where it goes, in one pass over the intra-op threads.
#pragma once

#include <c10/core/ScalarType.h>

#include <vector>

#include "bound_layout.h"

namespace torch_layouts {

// Copies every nest (element offsets) from src, of src_type, to dst, of dst_type, converting:
// true when done; false, having moved nothing, where the pair is not float32 <-> float16 or
// bfloat16, this CPU has no AVX2 and F16C (whose rounding, and NaNs, are ATen's; float32 ->
// bfloat16 rounds as ATen's vectorized conversion: half_runs_x86.h), or a nest's innermost loop is
// not a run of at least 8 elements on both sides. Throws before moving a byte if a nest reaches
// outside either buffer.
bool run_converting_nests(const std::vector<Transfer>& nests, void* dst, int64_t dst_numel, c10::ScalarType dst_type,
                          const void* src, int64_t src_numel, c10::ScalarType src_type);

}  // namespace torch_layouts
