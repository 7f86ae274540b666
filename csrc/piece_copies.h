// Copies between two device buffers by pieces (a clone's, a conversion's, cat's and stack's
// replays): each piece a strided view of the source's buffer and one of the result's.
#pragma once

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "kernel_front.h"

namespace torch_layouts {

// Copies each (from, to) piece of `src`'s buffer into `result`'s: ATen's copies between the
// pieces' views, except for conversions. float32 <-> float16 pieces in runs are converted run by
// run (converting_copies.h). Other conversions whose pieces read at least half of the span of
// `src`'s buffer they lie in: that span converted at once (one contiguous ATen conversion, the
// same rounding per element) into a scratch buffer, whose pieces the DMA executor's nests then move.
void copy_pieces(const at::Tensor& result, const at::Tensor& src,
                 const std::vector<std::pair<BufferView, BufferView>>& pieces);

}  // namespace torch_layouts
