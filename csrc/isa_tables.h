// Kernels compiled once per x86 instruction set (plain loops GCC vectorizes for each target, in
// `#pragma GCC target` regions) and gathered in one table per set: the table of the best set this
// CPU runs. Elsewhere than x86 only the portable table exists.
#pragma once

namespace torch_layouts {

#if defined(__x86_64__)
// avx512 where the CPU has AVX-512 F, BW and VL; else avx2 where it has AVX2; else portable.
template <typename Table>
Table* best_isa_table(Table* portable, Table* avx2, Table* avx512) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return avx512;
  }
  return __builtin_cpu_supports("avx2") ? avx2 : portable;
}
#define TORCH_LAYOUTS_BEST_ISA_TABLE(portable, avx2, avx512) ::torch_layouts::best_isa_table(portable, avx2, avx512)
#else
#define TORCH_LAYOUTS_BEST_ISA_TABLE(portable, avx2, avx512) (portable)
#endif

}  // namespace torch_layouts
