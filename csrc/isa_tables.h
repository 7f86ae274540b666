// Kernels compiled once per x86 instruction set (plain loops GCC vectorizes for each target, in
// `#pragma GCC target` regions) and gathered in one table per set: each call takes the table of
// the best set this CPU runs, or of the set tests chose (set_isa_tables). Elsewhere than x86 only
// the portable table exists.
#pragma once

#include <string>
#include <vector>

namespace torch_layouts {

// The instruction sets whose tables this CPU runs, best first: "avx512" (AVX-512 F, BW and VL),
// "avx2", "portable".
const std::vector<std::string>& isa_table_sets();
// Every table lookup after this takes `set`'s tables (one of isa_table_sets(); ValueError naming
// any other); returns the set they took before. For tests: each set's kernels against ATen.
std::string set_isa_tables(const std::string& set);
// The chosen set: 2 avx512, 1 avx2, 0 portable.
int isa_level();

// Whether ATen's CPU kernels are its AVX2 or AVX-512 ones (at::get_cpu_capability(), which
// ATEN_CPU_CAPABILITY can lower): their float32 a + alpha * b is one fused multiply-add, in the
// vectorized loop (fmadd) and in the scalar one (contracted); the DEFAULT kernels round the product
// and the sum apart. Those capabilities need FMA, so that kernels fusing under it may use it.
bool aten_fuses_scaled_add();

#if defined(__x86_64__)
template <typename Table>
Table* best_isa_table(Table* portable, Table* avx2, Table* avx512) {
  const int level = isa_level();
  return level == 2 ? avx512 : level == 1 ? avx2 : portable;
}
#define TORCH_LAYOUTS_BEST_ISA_TABLE(portable, avx2, avx512) ::torch_layouts::best_isa_table(portable, avx2, avx512)
#else
#define TORCH_LAYOUTS_BEST_ISA_TABLE(portable, avx2, avx512) (portable)
#endif

}  // namespace torch_layouts
