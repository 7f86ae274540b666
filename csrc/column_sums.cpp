#include "column_sums.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "half_runs_x86.h"
#include "row_math.h"

namespace torch_layouts {
namespace {

constexpr int64_t kMinRun = 16;                       // the run (stride-1 dims merged) at least this long
constexpr int64_t kMaxResults = int64_t(1) << 14;     // at most this many results (64 KiB of sums)
constexpr int64_t kChunkBytes = int64_t(128) << 10;   // about this much of the input per partial sum
constexpr int64_t kMaxChunks = 16;
constexpr int64_t kMaxPartials = int64_t(1) << 16;    // chunks * results at most
constexpr int64_t kTail = 8;                          // a run's last sums, under 8, take arrays this long

// n2 x n1 runs of `len` elements, run (i, k) at x + i * step2 + k * step1, added into acc + i * acc2
// (acc2 0: all into the same sums). x's elements are float32, float16 or bfloat16 (a function per
// dtype), read as float32. Each block of up to 64 sums is kept in registers over the runs it takes,
// in four interleaved sets (k modulo 4; the last n1 % 4 runs of each i in the first), added at the
// end as (s0 + s2) + (s1 + s3), s0 starting from acc. Four sets: sum((0, 1)) of 8x128x256 float32
// at one thread 11.6 -> 9.2 us (two sets; ATen's 10.9). The loops are column_sums_kernels.h's.
using AddRuns = void (*)(float* acc, const void* x, int64_t n2, int64_t step2, int64_t acc2, int64_t n1,
                         int64_t step1, int64_t len);

// The three dtypes' functions of one instruction set.
struct AddRunsTable {
  AddRuns f32, f16, bf16;
};

namespace portable {
constexpr int64_t kWidth = 8;
namespace half_runs {
inline void half_to_float(float* d, const uint16_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c10::detail::fp16_ieee_to_fp32_value(s[i]);
}
inline void bf16_to_float(float* d, const uint16_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c10::detail::f32_from_bits(s[i]);
}
}  // namespace half_runs
#include "column_sums_kernels.h"
}  // namespace portable

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace avx2 {
constexpr int64_t kWidth = 16;
namespace half_runs = avx2_half;  // 8 at a time
#include "column_sums_kernels.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,f16c")
namespace avx512 {
constexpr int64_t kWidth = 64;
namespace half_runs = avx512_half;  // 16 at a time
#include "column_sums_kernels.h"
}  // namespace avx512
#pragma GCC pop_options
#endif

// The column sums in the row kernels' instruction set (rows_set_math picks it; tests run each):
// AVX-512's or AVX2's loops (both sets include F16C), else the portable ones.
const AddRunsTable& add_runs_table() {
  const std::string_view set = rows_math().set;
#if defined(__x86_64__)
  if (set == "avx512") return avx512::kTable;
  if (set == "avx2") return avx2::kTable;
#endif
  return portable::kTable;
}

// A dim of v (size > 1) and its place in the merged loops.
struct Dim {
  int64_t size, stride, out_stride, index;
  bool reduced;
};

// Dims that continue each other in memory, merged: `stride` in v, `acc` in the dense partial sums
// (0: reduced), `out` in out where the merged dims continue each other there too (`out_regular`).
struct Loop {
  int64_t size, stride, acc, out;
  bool reduced, out_regular;
};

}  // namespace

bool columns_sum(const at::Tensor& v, c10::IntArrayRef reduced, const at::Tensor& out) {
  const c10::ScalarType t = v.scalar_type();
  if ((t != at::kFloat && t != at::kHalf && t != at::kBFloat16) ||
      (out.scalar_type() != t && out.scalar_type() != at::kFloat) || !v.device().is_cpu() || !out.device().is_cpu() ||
      out.dim() != v.dim() || v.numel() == 0) {
    return false;
  }
  if (out.scalar_type() != at::kFloat) {  // float16 or bfloat16 sums: in float32, rounded once into out
    const at::Tensor sums = at::empty_strided(out.sizes(), out.strides(), out.options().dtype(at::kFloat));
    if (!columns_sum(v, reduced, sums)) return false;
    out.copy_(sums);
    return true;
  }
  std::vector<bool> is_reduced(static_cast<size_t>(v.dim()), false);
  for (int64_t d : reduced) {
    if (d < 0 || d >= v.dim()) return false;
    is_reduced[static_cast<size_t>(d)] = true;
  }
  std::vector<Dim> dims;
  bool has_run = false;
  for (int64_t d = 0; d < v.dim(); ++d) {
    const bool r = is_reduced[static_cast<size_t>(d)];
    if (out.size(d) != (r ? 1 : v.size(d))) return false;
    if (v.size(d) == 1) continue;
    if (v.stride(d) <= 0) return false;  // a broadcast or reversed view
    dims.push_back({v.size(d), v.stride(d), out.stride(d), d, r});
    if (v.stride(d) == 1) {
      if (r || has_run) return false;  // a sum over the contiguous dim (row sums), or overlapping dims
      has_run = true;
    }
  }
  if (!has_run) return false;
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  for (size_t k = 1; k < dims.size(); ++k) {
    if (dims[k].stride == dims[k - 1].stride) return false;
  }
  // Merge, innermost outwards; `loop_of` is each dim's loop (counted from the innermost).
  std::vector<Loop> loops;
  std::vector<size_t> loop_of(dims.size());
  for (size_t k = dims.size(); k-- > 0;) {
    const Dim& x = dims[k];
    Loop* cur = loops.empty() ? nullptr : &loops.back();
    if (cur && x.reduced == cur->reduced && x.stride == cur->size * cur->stride) {
      if (!x.reduced && x.out_stride != cur->size * cur->out) cur->out_regular = false;
      cur->size *= x.size;
    } else {
      loops.push_back({x.size, x.stride, 0, x.out_stride, x.reduced, true});
    }
    loop_of[k] = loops.size() - 1;
  }
  const Loop run = loops.front();
  if (run.reduced || run.stride != 1 || run.size < kMinRun) return false;
  int64_t results = 1;
  bool any_reduced = false;
  for (Loop& l : loops) {
    if (l.reduced) {
      any_reduced = true;
    } else {
      l.acc = results;
      results *= l.size;
    }
  }
  if (!any_reduced || results > kMaxResults) return false;
  // Walked outermost first, the kept loops outside the reduced ones (each block of sums stays in
  // registers over all the runs it takes), each group in memory order; the run last.
  const size_t n_loops = loops.size();
  std::vector<size_t> order;  // loop indices (counted from the innermost) in walking order
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t l = n_loops; l-- > 1;) {
      if (loops[l].reduced == (pass == 1)) order.push_back(l);
    }
  }
  order.push_back(0);
  std::vector<size_t> place(n_loops);
  std::vector<Loop> walk;
  for (size_t k = 0; k < n_loops; ++k) {
    place[order[k]] = k;
    walk.push_back(loops[order[k]]);
  }
  loops = std::move(walk);
  for (size_t& l : loop_of) l = place[l];

  // Chunks of the outermost reduced loop, from v's size alone.
  size_t split = 0;
  while (!loops[split].reduced) ++split;
  int64_t chunks = std::clamp<int64_t>(v.numel() * 4 / kChunkBytes, 1, kMaxChunks);
  chunks = std::min({chunks, loops[split].size, std::max<int64_t>(1, kMaxPartials / results)});
  std::vector<float> partials(static_cast<size_t>(chunks * results));
  const AddRunsTable& table = add_runs_table();
  const AddRuns add_runs = t == at::kFloat ? table.f32 : t == at::kHalf ? table.f16 : table.bf16;
  const char* base = static_cast<const char*>(v.const_data_ptr());
  const int64_t esize = static_cast<int64_t>(v.element_size());
  const int64_t len = run.size;
  // The loops outside the run: the innermost one or two go to add_runs, the rest are walked here.
  const size_t inner1 = n_loops - 2;
  const bool two = n_loops >= 3;
  const size_t walked = two ? n_loops - 3 : n_loops - 2;

  const auto chunk_sums = [&](int64_t c) {
    float* acc = partials.data() + c * results;
    std::fill(acc, acc + results, 0.0f);
    const int64_t lo = loops[split].size * c / chunks, hi = loops[split].size * (c + 1) / chunks;
    std::vector<int64_t> first(n_loops, 0), count(n_loops);
    for (size_t k = 0; k < n_loops; ++k) count[k] = loops[k].size;
    first[split] = lo;
    count[split] = hi - lo;
    std::vector<int64_t> idx(walked, 0);
    while (true) {
      int64_t xo = 0, ao = 0;
      for (size_t k = 0; k < walked; ++k) {
        xo += (first[k] + idx[k]) * loops[k].stride;
        ao += (first[k] + idx[k]) * loops[k].acc;
      }
      const Loop& l1 = loops[inner1];
      xo += first[inner1] * l1.stride;
      ao += first[inner1] * l1.acc;
      if (two) {
        const Loop& l2 = loops[inner1 - 1];
        xo += first[inner1 - 1] * l2.stride;
        ao += first[inner1 - 1] * l2.acc;
        add_runs(acc + ao, base + xo * esize, count[inner1 - 1], l2.stride, l2.acc, count[inner1], l1.stride, len);
      } else {
        add_runs(acc + ao, base + xo * esize, 1, 0, 0, count[inner1], l1.stride, len);
      }
      size_t k = walked;
      while (k > 0 && ++idx[k - 1] == count[k - 1]) idx[--k] = 0;
      if (k == 0) break;
    }
  };
  if (chunks > 1) {
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) chunk_sums(c);
    });
  } else {
    chunk_sums(0);
  }
  // The partials added in chunk order, into out where its strides follow the merged loops, else
  // into a dense tensor copied into out.
  bool regular = true;
  for (const Loop& l : loops) regular = regular && (l.reduced || l.out_regular);
  at::Tensor dense;
  float* dst = nullptr;
  std::vector<int64_t> out_step;  // per kept loop, outermost first; the run last
  std::vector<int64_t> kept;
  for (size_t k = 0; k < n_loops; ++k) {
    if (!loops[k].reduced) kept.push_back(static_cast<int64_t>(k));
  }
  if (regular) {
    dst = out.mutable_data_ptr<float>();
    for (int64_t k : kept) out_step.push_back(loops[static_cast<size_t>(k)].out);
  } else {
    dense = at::empty({results}, out.options());
    dst = dense.mutable_data_ptr<float>();
    for (int64_t k : kept) out_step.push_back(loops[static_cast<size_t>(k)].acc);
  }
  const int64_t run_out = out_step.back();
  std::vector<int64_t> idx(kept.size() - 1, 0);
  while (true) {
    int64_t ao = 0, oo = 0;
    for (size_t k = 0; k + 1 < kept.size(); ++k) {
      ao += idx[k] * loops[static_cast<size_t>(kept[k])].acc;
      oo += idx[k] * out_step[k];
    }
    for (int64_t j = 0; j < len; ++j) {
      float s = partials[static_cast<size_t>(ao + j)];
      for (int64_t c = 1; c < chunks; ++c) s += partials[static_cast<size_t>(c * results + ao + j)];
      dst[oo + j * run_out] = s;
    }
    size_t k = idx.size();
    while (k > 0 && ++idx[k - 1] == loops[static_cast<size_t>(kept[k - 1])].size) idx[--k] = 0;
    if (k == 0) break;
  }
  if (!regular) {  // each dim of out at its place in the dense sums
    std::vector<int64_t> strides(static_cast<size_t>(v.dim()), 1);
    for (size_t k = 0; k < dims.size(); ++k) {
      const Loop& l = loops[loop_of[k]];
      if (!dims[k].reduced) strides[static_cast<size_t>(dims[k].index)] = dims[k].stride / l.stride * l.acc;
    }
    out.copy_(dense.as_strided(out.sizes(), strides));
  }
  return true;
}

}  // namespace torch_layouts
