#include "gathers.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_tables.h"
#include "run_stretches.h"

namespace torch_layouts {
namespace {

// How far ahead the gather prefetches: the slices of the next indices, about this many bytes.
constexpr int64_t kAheadBytes = 4096;

// The index's entries, or none where one lies outside [0, size).
std::vector<int64_t> entries_of(const at::Tensor& index, int64_t size) {
  const int64_t n = index.numel();
  const int64_t step = index.dim() ? index.stride(0) : 0;
  const bool wide = index.scalar_type() == at::kLong;
  const int64_t* longs = wide ? index.const_data_ptr<int64_t>() : nullptr;
  const int32_t* ints = wide ? nullptr : index.const_data_ptr<int32_t>();
  std::vector<int64_t> got(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = wide ? longs[i * step] : ints[i * step];
    if (j < 0 || j >= size) return {};
    got[static_cast<size_t>(i)] = j;
  }
  return got;
}

// Asks for the lines of a run of `bytes` at p.
[[gnu::always_inline]] inline void prefetch_run(const char* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
}

// The runs of indices [begin, end), each `bytes` long, from its row of `from` (`self_step` apart)
// to its place in `to` (`out_step` apart), the run `ahead` indices on prefetched first.
void gather_runs(char* to, const char* from, const int64_t* rows, int64_t begin, int64_t end, int64_t out_step,
                 int64_t self_step, int64_t bytes, int64_t ahead) {
  for (int64_t i = begin; i < end; ++i) {
    if (i + ahead < end) prefetch_run(from + rows[i + ahead] * self_step, bytes);
    std::memcpy(to + i * out_step, from + rows[i] * self_step, static_cast<size_t>(bytes));
  }
}

// The same for runs of whole 64-byte lines up to kLineRunBytes (a stick or a few: a Spyre
// table's rows), a line a load and a store instead of a memcpy call per run (64 rows of 1024x256
// float32, 512 runs of 128 bytes: 3.1 -> 2.8 us, CPU 2.9); gather_runs where the CPU has no AVX-512.
constexpr int64_t kLineRunBytes = 512;
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void gather_line_runs(char* to, const char* from, const int64_t* rows,
                                                         int64_t begin, int64_t end, int64_t out_step,
                                                         int64_t self_step, int64_t bytes, int64_t ahead) {
  for (int64_t i = begin; i < end; ++i) {
    if (i + ahead < end) prefetch_run(from + rows[i + ahead] * self_step, bytes);
    const char* src = from + rows[i] * self_step;
    char* dst = to + i * out_step;
    for (int64_t k = 0; k < bytes; k += 64) _mm512_storeu_si512(dst + k, _mm512_loadu_si512(src + k));
  }
}
#endif

}  // namespace

bool gather_slices(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& out) {
  if (!self.device().is_cpu() || !out.device().is_cpu() || !index.device().is_cpu() ||
      self.scalar_type() != out.scalar_type() || self.dim() != out.dim() || self.dim() == 0 || index.dim() > 1 ||
      (index.scalar_type() != at::kLong && index.scalar_type() != at::kInt)) {
    return false;
  }
  dim = dim < 0 ? dim + self.dim() : dim;
  if (dim < 0 || dim >= self.dim() || out.size(dim) != index.numel() || index.numel() == 0) return false;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d != dim && self.size(d) != out.size(d)) return false;
  }
  // The slice's loops, outermost first (out's stride, self's), neighbours merged where both views
  // lay them out as one; the innermost one is the run, contiguous in both.
  std::vector<StridedLoop<2>> loops;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == dim || self.size(d) == 1) continue;
    push_merged<2>(loops, {self.size(d), {out.stride(d), self.stride(d)}});
  }
  const int64_t esize = static_cast<int64_t>(self.element_size());
  const bool contiguous_run = loops.empty() || (loops.back().strides[0] == 1 && loops.back().strides[1] == 1);
  const int64_t run = loops.empty() ? 1 : loops.back().size;
  if (!contiguous_run || run * esize < 32) return false;
  if (!loops.empty()) loops.pop_back();
  const std::vector<int64_t> rows = entries_of(index, self.size(dim));
  if (rows.empty()) return false;
  int64_t runs = 1;
  for (const auto& loop : loops) runs *= loop.size;
  auto* to = static_cast<char*>(out.data_ptr());
  const auto* from = static_cast<const char*>(self.const_data_ptr());
  const int64_t out_step = out.stride(dim) * esize;
  const int64_t self_step = self.stride(dim) * esize;
  const size_t bytes = static_cast<size_t>(run * esize);
  // A work item per index: its slice, runs * bytes. A thread's items are copied run by run, each
  // run for all its indices (the writes of a run go forward in the result), the source's run
  // `ahead` indices on prefetched: a table's rows are runs far apart in the device buffer (an
  // embedding of 32000x1024 float32: 16 sticks 8 MiB apart), which the hardware's prefetchers do
  // not follow.
  const int64_t ahead = std::max<int64_t>(1, kAheadBytes / static_cast<int64_t>(bytes));
  decltype(gather_runs)* const line_runs =
      TORCH_LAYOUTS_BEST_ISA_TABLE(gather_runs, gather_runs, gather_line_runs);
  const auto copy_runs = bytes % 64 == 0 && static_cast<int64_t>(bytes) <= kLineRunBytes ? line_runs : gather_runs;
  for_items(index.numel(), runs * run * esize, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> at(loops.size());
    int64_t oo = 0, so = 0;
    for (int64_t r = 0; r < runs; ++r) {
      copy_runs(to + oo * esize, from + so * esize, rows.data(), begin, end, out_step, self_step,
                static_cast<int64_t>(bytes), ahead);
      for (size_t k = loops.size(); k-- > 0;) {  // the next run: the loops as an odometer
        oo += loops[k].strides[0];
        so += loops[k].strides[1];
        if (++at[k] < loops[k].size) break;
        oo -= at[k] * loops[k].strides[0];
        so -= at[k] * loops[k].strides[1];
        at[k] = 0;
      }
    }
  });
  return true;
}

}  // namespace torch_layouts
