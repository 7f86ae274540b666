#include "comparisons.h"

#include <cstdint>
#include <functional>
#include <vector>

#include "isa_tables.h"
#include "run_stretches.h"

namespace torch_layouts {
namespace {

// count runs of n elements: run r of out at o + r * step[0], of self at a + r * step[1], of other
// at b + r * step[2] (a number: *b, step 0).
using CompareRuns = void (*)(bool* o, const float* a, const float* b, int64_t count, const int64_t* step, int64_t n);

// The loops written once; GCC vectorizes them for the target each instantiation is compiled for.
template <typename Op, bool Number>
inline void compare_loop(bool* o, const float* a, const float* b, int64_t count, const int64_t* step, int64_t n) {
  for (int64_t r = 0; r < count; ++r) {
    bool* to = o + r * step[0];
    const float* x = a + r * step[1];
    const float* y = b + r * step[2];
    if (Number) {
      const float v = *b;
      for (int64_t i = 0; i < n; ++i) to[i] = Op{}(x[i], v);
    } else {
      for (int64_t i = 0; i < n; ++i) to[i] = Op{}(x[i], y[i]);
    }
  }
}

// The six comparisons, against a view or a number, in one table per instruction set.
#define TORCH_LAYOUTS_COMPARE_TABLE(name)                                                                     \
  template <typename Op, bool Number>                                                                          \
  void name##_runs(bool* o, const float* a, const float* b, int64_t count, const int64_t* step, int64_t n) { \
    compare_loop<Op, Number>(o, a, b, count, step, n);                                                         \
  }                                                                                                            \
  const CompareRuns name##_table[2][6] = {                                                                     \
      {name##_runs<std::equal_to<float>, false>, name##_runs<std::not_equal_to<float>, false>,                 \
       name##_runs<std::less<float>, false>, name##_runs<std::less_equal<float>, false>,                       \
       name##_runs<std::greater<float>, false>, name##_runs<std::greater_equal<float>, false>},                \
      {name##_runs<std::equal_to<float>, true>, name##_runs<std::not_equal_to<float>, true>,                   \
       name##_runs<std::less<float>, true>, name##_runs<std::less_equal<float>, true>,                         \
       name##_runs<std::greater<float>, true>, name##_runs<std::greater_equal<float>, true>}};

TORCH_LAYOUTS_COMPARE_TABLE(base)
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2")
TORCH_LAYOUTS_COMPARE_TABLE(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2")
TORCH_LAYOUTS_COMPARE_TABLE(avx512)
#pragma GCC pop_options
#endif
#undef TORCH_LAYOUTS_COMPARE_TABLE

// A number to compare with as float32 (ATen casts it to the float32 common dtype); nullopt for
// any other kind (a complex number).
std::optional<float> number_of(const c10::IValue& v) {
  if (v.isDouble()) return static_cast<float>(v.toDouble());
  if (v.isInt()) return static_cast<float>(v.toInt());
  if (v.isBool()) return v.toBool() ? 1.0f : 0.0f;
  if (v.isTensor() && v.toTensor().dim() == 0 && v.toTensor().device().is_cpu()) {
    const at::Tensor& t = v.toTensor();
    if (t.scalar_type() == at::kDouble) return static_cast<float>(t.item<double>());
    if (t.scalar_type() == at::kFloat) return t.item<float>();
    if (t.scalar_type() == at::kLong) return static_cast<float>(t.item<int64_t>());
  }
  return std::nullopt;
}

}  // namespace

std::optional<Comparison> comparison_of(const std::string& op) {
  static const std::pair<const char*, Comparison> names[] = {{"eq", Comparison::kEq}, {"ne", Comparison::kNe},
                                                            {"lt", Comparison::kLt}, {"le", Comparison::kLe},
                                                            {"gt", Comparison::kGt}, {"ge", Comparison::kGe}};
  for (const auto& [name, c] : names) {
    for (const char* overload : {".Tensor_out", ".Scalar_out"}) {
      if (op == std::string("aten::") + name + overload) return c;
    }
  }
  return std::nullopt;
}

bool compare_runs(Comparison c, const at::Tensor& self, const c10::IValue& other, const at::Tensor& out) {
  if (self.scalar_type() != at::kFloat || out.scalar_type() != at::kBool || out.sizes() != self.sizes() ||
      !self.device().is_cpu() || !out.device().is_cpu()) {
    return false;
  }
  const bool tensor = other.isTensor() && other.toTensor().dim() > 0;
  std::optional<float> number;
  if (tensor) {
    const at::Tensor& t = other.toTensor();
    if (t.scalar_type() != at::kFloat || t.sizes() != self.sizes() || !t.device().is_cpu()) return false;
  } else {
    number = number_of(other);
    if (!number) return false;
  }
  // The run: a dim of stride 1 in all three (in the number's place, any); the other dims' loops.
  std::vector<StridedLoop<3>> loops;
  int64_t run = 0;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const int64_t size = self.size(d);
    if (size == 1) continue;
    const int64_t b = tensor ? other.toTensor().stride(d) : 0;
    if (run == 0 && size >= 8 && out.stride(d) == 1 && self.stride(d) == 1 && (!tensor || b == 1)) {
      run = size;
      continue;
    }
    loops.push_back({size, {out.stride(d), self.stride(d), b}});
  }
  if (run == 0) return false;
  const CompareRuns (*const table)[6] = TORCH_LAYOUTS_BEST_ISA_TABLE(base_table, avx2_table, avx512_table);
  const CompareRuns f = table[tensor ? 0 : 1][static_cast<int>(c)];
  bool* o = out.data_ptr<bool>();
  const float* a = self.const_data_ptr<float>();
  const float* b = tensor ? other.toTensor().const_data_ptr<float>() : &*number;
  for_stretches<3>(std::move(loops), {0, 0, 0}, run, sizeof(float),
                   [&](const std::array<int64_t, 3>& at, int64_t count, const StridedLoop<3>& inner) {
                     f(o + at[0], a + at[1], b + at[2], count, inner.strides.data(), run);
                   });
  return true;
}

}  // namespace torch_layouts
