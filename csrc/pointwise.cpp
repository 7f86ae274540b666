#include "pointwise.h"

#include <ATen/TensorIterator.h>
#include <c10/util/Exception.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

namespace torch_layouts {
namespace {

inline float as_float(float v) { return v; }
inline float as_float(uint8_t v) { return static_cast<float>(v); }  // a bool: 0 or 1

// TensorIterator's 2-D loop: size1 runs of size0 elements; a contiguous run is a plain loop the
// compiler vectorizes.
template <typename B>
void scaled_loop(char** data, const int64_t* strides, int64_t size0, int64_t size1, float scale) {
  const bool dense = strides[0] == sizeof(float) && strides[1] == sizeof(float) && strides[2] == sizeof(B);
  for (int64_t j = 0; j < size1; ++j) {
    char* o = data[0] + j * strides[3];
    const char* pa = data[1] + j * strides[4];
    const char* pb = data[2] + j * strides[5];
    if (dense) {
      auto* out = reinterpret_cast<float*>(o);
      const auto* a = reinterpret_cast<const float*>(pa);
      const auto* b = reinterpret_cast<const B*>(pb);
      for (int64_t i = 0; i < size0; ++i) out[i] = (a[i] * as_float(b[i])) * scale;
      continue;
    }
    for (int64_t i = 0; i < size0; ++i) {
      const float a = *reinterpret_cast<const float*>(pa + i * strides[1]);
      const B b = *reinterpret_cast<const B*>(pb + i * strides[2]);
      *reinterpret_cast<float*>(o + i * strides[0]) = (a * as_float(b)) * scale;
    }
  }
}

template <typename E>
void dropout_loop(char** data, const int64_t* strides, int64_t size0, int64_t size1, float scale) {
  constexpr int64_t U = sizeof(E);
  const bool dense = strides[0] == U && strides[1] == 1 && strides[2] == U && strides[3] == U;
  for (int64_t j = 0; j < size1; ++j) {
    char* o = data[0] + j * strides[4];
    char* k = data[1] + j * strides[5];
    const char* px = data[2] + j * strides[6];
    const char* pd = data[3] + j * strides[7];
    if (dense && std::is_same_v<E, float>) {  // a plain loop the compiler vectorizes
      auto* out = reinterpret_cast<float*>(o);
      auto* keep = reinterpret_cast<uint8_t*>(k);
      const auto* x = reinterpret_cast<const float*>(px);
      const auto* d = reinterpret_cast<const float*>(pd);
      for (int64_t i = 0; i < size0; ++i) {
        out[i] = (x[i] * d[i]) * scale;
        keep[i] = d[i] != 0.f;
      }
      continue;
    }
    for (int64_t i = 0; i < size0; ++i) {
      const float x = static_cast<float>(*reinterpret_cast<const E*>(px + i * strides[2]));
      const float d = static_cast<float>(*reinterpret_cast<const E*>(pd + i * strides[3]));
      // the CPU's mul of two E tensors (in float, rounded to E), then its mul_ by the float scale
      const float product = static_cast<float>(static_cast<E>(x * d));
      *reinterpret_cast<E*>(o + i * strides[0]) = static_cast<E>(product * scale);
      *reinterpret_cast<uint8_t*>(k + i * strides[1]) = d != 0.f;
    }
  }
}

}  // namespace

void scaled_product(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, double scale) {
  TORCH_CHECK_VALUE(out.device().is_cpu() && a.device().is_cpu() && b.device().is_cpu(),
                    "scaled_product: expected CPU views");
  TORCH_CHECK_VALUE(out.scalar_type() == at::kFloat && a.scalar_type() == at::kFloat,
                    "scaled_product: expected float32 a and out, got ", a.scalar_type(), " and ", out.scalar_type());
  TORCH_CHECK_VALUE(b.scalar_type() == at::kFloat || b.scalar_type() == at::kBool,
                    "scaled_product: expected a float32 or bool b, got ", b.scalar_type());
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_const_input(a)
                  .add_const_input(b)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .build();
  const float s = static_cast<float>(scale);
  if (b.scalar_type() == at::kFloat) {
    iter.for_each([s](char** data, const int64_t* strides, int64_t n0, int64_t n1) {
      scaled_loop<float>(data, strides, n0, n1, s);
    });
  } else {
    iter.for_each([s](char** data, const int64_t* strides, int64_t n0, int64_t n1) {
      scaled_loop<uint8_t>(data, strides, n0, n1, s);
    });
  }
}

void dropout_apply(const at::Tensor& out, const at::Tensor& keep, const at::Tensor& x, const at::Tensor& draws,
                   double scale) {
  TORCH_CHECK_VALUE(out.device().is_cpu() && keep.device().is_cpu() && x.device().is_cpu() && draws.device().is_cpu(),
                    "dropout_apply: expected CPU views");
  const at::ScalarType dtype = x.scalar_type();
  TORCH_CHECK_VALUE((dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16) &&
                        out.scalar_type() == dtype && draws.scalar_type() == dtype && keep.scalar_type() == at::kBool,
                    "dropout_apply: expected float32, float16 or bfloat16 out, x and draws of one dtype and a bool keep");
  auto iter = at::TensorIteratorConfig()
                  .add_output(out)
                  .add_output(keep)
                  .add_const_input(x)
                  .add_const_input(draws)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .build();
  const float s = static_cast<float>(scale);
  iter.for_each([s, dtype](char** data, const int64_t* strides, int64_t n0, int64_t n1) {
    if (dtype == at::kFloat) return dropout_loop<float>(data, strides, n0, n1, s);
    if (dtype == at::kHalf) return dropout_loop<c10::Half>(data, strides, n0, n1, s);
    dropout_loop<c10::BFloat16>(data, strides, n0, n1, s);
  });
}

}  // namespace torch_layouts
