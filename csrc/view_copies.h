// Kept plans of copies between parts of device buffers. ops/view_copy.py works a plan out once
// per geometry of (destination, source) and keeps it here; the runtime then replays it on later
// copies of that geometry without entering Python (docs/design.md, "Copies into and out of part
// of a buffer").
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace torch_layouts {

// One strided copy between the two raw buffers (elements of the tensors' dtype): sizes, and each
// side's strides and offset.
struct ViewCopyBox {
  std::vector<int64_t> sizes, dst_strides, src_strides;
  int64_t dst_offset = 0, src_offset = 0;
};

// The host dims of a tensor's base that are a device dim of their own without padding: (host dim,
// device stride). Moving a view along one moves every element by whole device strides.
using UntiledDims = std::vector<std::pair<int64_t, int64_t>>;

// Keeps `boxes` as the plan of copies from `src`'s geometry into `dst`'s (both device tensors
// with layouts); emptied when it holds kMaxViewCopies plans. With each side's untiled dims, the
// plan also serves copies that differ from it only in storage offsets stepping along those dims
// (a KV cache written at a new position each step), its boxes moved by the steps' device distance.
void keep_view_copy(const at::Tensor& dst, const at::Tensor& src, std::vector<ViewCopyBox> boxes,
                    std::optional<std::pair<UntiledDims, UntiledDims>> untiled = std::nullopt);

// Replays the kept plan of (dst, src)'s geometry, or a kept plan shifted to it: false (nothing
// written) when none serves or both share a buffer (those copy through ops/view_copy.py, which
// reads every source first).
bool replay_view_copy(const at::Tensor& dst, const at::Tensor& src);

// Keeps the coordinates (`staged`'s layout) that ops/view_copy.py stages a host side through for
// copies between the host and `device` (part of a device buffer), per geometry of `device`.
void keep_staging(const at::Tensor& device, const at::Tensor& staged);

// A copy between the host and part of a device buffer of a kept staging's geometry, without
// Python: the host side into (or out of) a new tensor in the staging coordinates (one
// whole-buffer DMA) and the kept plan between it and the device side, or, where those
// coordinates are row-major with nothing else and the host side is contiguous, that plan with the
// host side's own buffer in the staged one's place; false (nothing written to dst) where either
// is not kept.
bool replay_staged_copy(const at::Tensor& dst, const at::Tensor& src);

// Keeps how ops/view_copy.py copied `src` into `dst` (device tensors) where no coordinates read
// both: `src` first copied whole into `whole`'s layout (none where it is whole), then into
// `readable`'s, whose kept plan writes `dst`.
void keep_restaging(const at::Tensor& dst, const at::Tensor& src, const std::optional<at::Tensor>& whole,
                    const at::Tensor& readable);

// A copy of a kept restaging's geometry, without Python: the same copies through new tensors of
// those layouts (kept plans, then the runtime's copy_); false (dst not written) where a kept plan
// is missing or both share a buffer.
bool replay_restaged_copy(const at::Tensor& dst, const at::Tensor& src);

// Remembers that ops/view_copy.py found no plan for this copy's geometry, and asks whether it
// did: such copies go straight to the runtime's element path.
void decline_view_copy(const at::Tensor& dst, const at::Tensor& src);
bool declined_view_copy(const at::Tensor& dst, const at::Tensor& src);

// How many plans are kept, and forgetting them all (ops/view_copy.forget_plans).
int64_t kept_view_copies();
void forget_view_copies();

constexpr size_t kMaxViewCopies = 512;

}  // namespace torch_layouts
