#include "arithmetic_runs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include <c10/util/SmallVector.h>

#include "isa_tables.h"
#include "run_stretches.h"

namespace torch_layouts {
namespace {

// Two loops of runs of `run` elements: for i1 < n1, i0 < n0, the runs of out, self and other at
// i1 * s1[k] + i0 * s0[k] (k = 0, 1, 2) from the pointers passed; alpha: the scaled add's.
struct RunNest {
  int64_t n1, n0, run;
  std::array<int64_t, 3> s1, s0;
  float alpha = 1.0f;
};

// The ops on two elements. ScaledAdd: self + alpha * other in one rounding, as ATen's AVX2 and
// AVX-512 kernels compute an add or sub with alpha (aten_fuses_scaled_add; sub's alpha negated).
struct Add {
  float alpha;
  float operator()(float x, float y) const { return x + y; }
};
struct Sub {
  float alpha;
  float operator()(float x, float y) const { return x - y; }
};
struct Mul {
  float alpha;
  float operator()(float x, float y) const { return x * y; }
};
struct Div {
  float alpha;
  float operator()(float x, float y) const { return x / y; }
};
struct ScaledAdd {
  float alpha;
  float operator()(float x, float y) const { return __builtin_fmaf(y, alpha, x); }
};

using ArithmeticRuns = void (*)(float* o, const float* a, const float* b, const RunNest& nest);

// a[j sa] += alpha * b[j sb] for j < n, ScaledAdd's rounding along one strided loop (the foreach
// SGD add's views): the unit-stride case apart, so that it vectorizes.
[[gnu::always_inline]] inline void strided_scaled_add(float* a, int64_t sa, const float* b, int64_t sb, float alpha,
                                                      int64_t n) {
  const ScaledAdd op{alpha};
  if (sa == 1 && sb == 1) {
    for (int64_t j = 0; j < n; ++j) a[j] = op(a[j], b[j]);
    return;
  }
  for (int64_t j = 0; j < n; ++j) a[j * sa] = op(a[j * sa], b[j * sb]);
}

// The loops written once; GCC vectorizes them for the target each instantiation is compiled for.
// An operand that does not vary along the run (AVaries, BVaries false) is one number a run. out may
// be self itself (in place): each element is read before its own place is written, no other.
template <typename Op, bool AVaries, bool BVaries>
inline void arithmetic_loop(float* o, const float* a, const float* b, const RunNest& nest) {
  const int64_t n = nest.run;
  const Op op{nest.alpha};
  for (int64_t i1 = 0; i1 < nest.n1; ++i1) {
    for (int64_t i0 = 0; i0 < nest.n0; ++i0) {
      float* to = o + i1 * nest.s1[0] + i0 * nest.s0[0];
      const float* x = a + i1 * nest.s1[1] + i0 * nest.s0[1];
      const float* y = b + i1 * nest.s1[2] + i0 * nest.s0[2];
      if constexpr (AVaries && BVaries) {
#pragma GCC ivdep
        for (int64_t i = 0; i < n; ++i) to[i] = op(x[i], y[i]);
      } else if constexpr (AVaries) {
        const float v = *y;
#pragma GCC ivdep
        for (int64_t i = 0; i < n; ++i) to[i] = op(x[i], v);
      } else {
        const float v = *x;
#pragma GCC ivdep
        for (int64_t i = 0; i < n; ++i) to[i] = op(v, y[i]);
      }
    }
  }
}

// The four ops and the scaled add, with both operands varying along the run, self only, other
// only: one table per instruction set (theirs with FMA: their scaled add one instruction); and
// the strided scaled add, compiled for each set alike.
#define TORCH_LAYOUTS_ARITHMETIC_TABLE(name)                                                             \
  template <typename Op, bool AVaries, bool BVaries>                                                      \
  void name##_runs(float* o, const float* a, const float* b, const RunNest& nest) {                      \
    arithmetic_loop<Op, AVaries, BVaries>(o, a, b, nest);                                                 \
  }                                                                                                       \
  template <typename Op>                                                                                  \
  constexpr std::array<ArithmeticRuns, 3> name##_variants = {name##_runs<Op, true, true>,                 \
                                                             name##_runs<Op, true, false>,                \
                                                             name##_runs<Op, false, true>};              \
  const std::array<ArithmeticRuns, 3> name##_table[5] = {name##_variants<Add>, name##_variants<Sub>,      \
                                                         name##_variants<Mul>, name##_variants<Div>,      \
                                                         name##_variants<ScaledAdd>};                     \
  void name##_strided_scaled_add(float* a, int64_t sa, const float* b, int64_t sb, float alpha, int64_t n) {    \
    strided_scaled_add(a, sa, b, sb, alpha, n);                                                           \
  }

TORCH_LAYOUTS_ARITHMETIC_TABLE(base)
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
TORCH_LAYOUTS_ARITHMETIC_TABLE(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma")
TORCH_LAYOUTS_ARITHMETIC_TABLE(avx512)
#pragma GCC pop_options
#endif
#undef TORCH_LAYOUTS_ARITHMETIC_TABLE

// The bytes a view's elements span: [first, last) from its data pointer.
std::pair<const char*, const char*> span_of(const at::Tensor& v) {
  const char* base = static_cast<const char*>(v.const_data_ptr());
  const c10::IntArrayRef sizes = v.sizes(), strides = v.strides();
  int64_t low = 0, high = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t reach = (sizes[d] - 1) * strides[d];
    (reach < 0 ? low : high) += reach;
  }
  const int64_t esize = static_cast<int64_t>(v.element_size());
  return {base + low * esize, base + (high + 1) * esize};
}

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  const auto [a0, a1] = span_of(a);
  const auto [b0, b1] = span_of(b);
  return a0 < b1 && b0 < a1;
}

// alpha as the kernel computes with it (ATen's Scalar::to<float>), 1 where absent; nullopt for
// another kind of scalar (complex, bool). negated: sub's, negated as ATen negates the Scalar before
// the cast (an integer 0 stays +0).
std::optional<float> alpha_of(const c10::IValue& alpha, bool negated) {
  if (alpha.isNone()) return negated ? -1.0f : 1.0f;
  if (alpha.isInt()) {
    const int64_t a = alpha.toInt();
    return a == 0 ? 0.0f : negated ? -static_cast<float>(a) : static_cast<float>(a);
  }
  if (alpha.isDouble()) return static_cast<float>(negated ? -alpha.toDouble() : alpha.toDouble());
  return std::nullopt;
}

// A 0-dim operand's number as the op computes with it: ATen casts a CPU scalar (a Python number
// it wraps, or a 0-dim tensor) to the computation's float32.
std::optional<float> number_of(const at::Tensor& t) {
  if (t.dim() != 0 || !t.device().is_cpu()) return std::nullopt;
  switch (t.scalar_type()) {
    case at::kFloat: return *t.const_data_ptr<float>();
    case at::kDouble: return static_cast<float>(*t.const_data_ptr<double>());
    case at::kLong: return static_cast<float>(*t.const_data_ptr<int64_t>());
    default: return std::nullopt;
  }
}

}  // namespace

StridedScaledAdd strided_scaled_add_kernel() {
  if (!aten_fuses_scaled_add()) return nullptr;
  return TORCH_LAYOUTS_BEST_ISA_TABLE(&base_strided_scaled_add, &avx2_strided_scaled_add, &avx512_strided_scaled_add);
}

std::optional<Arithmetic> arithmetic_of(const std::string& op) {
  static const std::pair<const char*, Arithmetic> names[] = {{"aten::add.out", Arithmetic::kAdd},
                                                            {"aten::sub.out", Arithmetic::kSub},
                                                            {"aten::mul.out", Arithmetic::kMul},
                                                            {"aten::div.out", Arithmetic::kDiv}};
  for (const auto& [name, a] : names) {
    if (op == name) return a;
  }
  return std::nullopt;
}

bool arithmetic_runs(Arithmetic op, const at::Tensor& self, const at::Tensor& other, const at::Tensor& out,
                     const c10::IValue& alpha) {
  if (out.scalar_type() != at::kFloat || !out.device().is_cpu() || out.numel() == 0) return false;
  // An add or sub with alpha other than 1: self + alpha * other fused, as ATen's AVX2 and AVX-512
  // kernels compute it (sub: alpha negated); under its DEFAULT kernels, or for mul and div (which
  // take no alpha), ATen's op.
  const bool sub = op == Arithmetic::kSub;
  const std::optional<float> factor = alpha_of(alpha, sub);
  if (!factor) return false;
  const bool scaled = *factor != (sub ? -1.0f : 1.0f);
  // A NaN alpha: which NaN the sum keeps where an operand is NaN too depends on the order of the
  // FMA's operands, which ATen's compiler chose.
  if (scaled && (!aten_fuses_scaled_add() || (op != Arithmetic::kAdd && !sub) || std::isnan(*factor))) return false;
  // Each operand: a float32 CPU view of out's shape, or a number (stride 0 along every dim).
  const std::optional<float> self_number = number_of(self), other_number = number_of(other);
  for (const auto& [t, number] : {std::pair{&self, self_number}, std::pair{&other, other_number}}) {
    if (!number && (t->scalar_type() != at::kFloat || !t->device().is_cpu() || t->sizes() != out.sizes())) return false;
  }
  const c10::IntArrayRef sizes = out.sizes(), so = out.strides();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && so[d] <= 0) return false;  // ATen's error: elements written twice
  }
  const bool in_place = self.const_data_ptr() == out.const_data_ptr() && self.strides() == out.strides();
  if (overlap(out, other) || (!in_place && overlap(out, self))) return false;
  // The run: the dim of stride 1 in out, of stride 1 or 0 in each operand; the other dims' loops,
  // least contiguous (in out) first (sorted by insertion, stably: a few dims), those that continue
  // each other in all three merged. Small vectors: a call on a 16x16 tensor allocates nothing.
  c10::SmallVector<StridedLoop<3>, 6> loops;
  int64_t run = 0;
  bool a_varies = false, b_varies = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t size = sizes[d];
    if (size == 1) continue;
    const int64_t sa = self_number ? 0 : self.strides()[d], sb = other_number ? 0 : other.strides()[d];
    if (run == 0 && size >= 8 && so[d] == 1 && (sa == 1 || sa == 0) && (sb == 1 || sb == 0) && (sa | sb) != 0) {
      run = size;
      a_varies = sa == 1;
      b_varies = sb == 1;
      continue;
    }
    StridedLoop<3> loop{size, {so[d], sa, sb}};
    size_t at = loops.size();
    loops.push_back(loop);
    for (; at > 0 && std::abs(loops[at - 1].strides[0]) < std::abs(loop.strides[0]); --at) loops[at] = loops[at - 1];
    loops[at] = loop;
  }
  // ATen fuses the scaled add where both operands vary along its inner loop; with one of them
  // broadcast along it (or a number), its scalar tail rounds some elements apart (in a pattern
  // that depends on the tail's length and alignment: add of 200x8, other broadcast along the 8).
  if (run == 0 || (scaled && !(a_varies && b_varies))) return false;
  c10::SmallVector<StridedLoop<3>, 6> merged;
  for (const StridedLoop<3>& loop : loops) push_merged(merged, loop);
  // The innermost loop that continues the run in all three (each operand by its run's length, or
  // not at all where it does not vary along it) makes it longer.
  while (!merged.empty()) {
    const StridedLoop<3>& inner = merged.back();
    if (inner.strides[0] != run || inner.strides[1] != (a_varies ? run : 0) ||
        inner.strides[2] != (b_varies ? run : 0)) {
      break;
    }
    run *= inner.size;
    merged.pop_back();
  }
  const std::array<ArithmeticRuns, 3>* const table =
      TORCH_LAYOUTS_BEST_ISA_TABLE(base_table, avx2_table, avx512_table);
  const ArithmeticRuns f = table[scaled ? 4 : static_cast<int>(op)][a_varies && b_varies ? 0 : a_varies ? 1 : 2];
  float* o = out.data_ptr<float>();
  const float* a = self_number ? &*self_number : self.const_data_ptr<float>();
  const float* b = other_number ? &*other_number : other.const_data_ptr<float>();
  constexpr int64_t kChunk = kParallelBytes / static_cast<int64_t>(sizeof(float));
  if (run > 2 * kChunk) {
    // Long runs (a dense 1024x256 tensor is one): work items of one chunk of kChunk elements, so
    // that the threads share them.
    const int64_t chunks = (run + kChunk - 1) / kChunk;
    for_items(positions_of(merged) * chunks, kParallelBytes, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t first = (item % chunks) * kChunk;
        std::array<int64_t, 3> at{first, a_varies ? first : 0, b_varies ? first : 0};
        add_position(at, merged, item / chunks);
        const RunNest nest{1, 1, std::min(kChunk, run - first), {}, {}, *factor};
        f(o + at[0], a + at[1], b + at[2], nest);
      }
    });
    return true;
  }
  // One loop left: it is n1, the loop the work items split (a part of a buffer along its rows, one
  // run a stick: 64 runs of 16 KiB were one item on one thread, 23 -> 12 us), under a loop of one.
  if (merged.size() == 1) merged.push_back(StridedLoop<3>{1, {0, 0, 0}});
  while (merged.size() < 2) merged.insert(merged.begin(), StridedLoop<3>{1, {0, 0, 0}});
  // Work items: a position of the outer loops and a stretch of loop n1 of about kParallelBytes.
  const StridedLoop<3> l0 = merged.back();
  const StridedLoop<3> l1 = merged[merged.size() - 2];
  merged.resize(merged.size() - 2);
  const int64_t positions = positions_of(merged);
  const int64_t row_bytes = l0.size * run * static_cast<int64_t>(sizeof(float));
  const int64_t stretch = std::clamp<int64_t>(kParallelBytes / row_bytes, 1, l1.size);
  const int64_t stretches = (l1.size + stretch - 1) / stretch;
  for_items(positions * stretches, stretch * row_bytes, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t first = (item % stretches) * stretch;
      std::array<int64_t, 3> at{};
      for (size_t k = 0; k < 3; ++k) at[k] = first * l1.strides[k];
      add_position(at, merged, item / stretches);
      const RunNest nest{std::min(stretch, l1.size - first), l0.size, run, l1.strides, l0.strides, *factor};
      f(o + at[0], a + at[1], b + at[2], nest);
    }
  });
  return true;
}

}  // namespace torch_layouts
