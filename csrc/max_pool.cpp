// 2-D max pooling on strided views: torch_layouts::max_pool2d.out and
// max_pool2d_backward.grad_input, ATen's max_pool2d_with_indices and its backward bit for bit on
// CPU tensors of any strides (ops/max_pool.py passes views of the device buffers; the runtime's
// front replays them as those ATen ops' computes). ATen's CPU kernel copies a strided input
// contiguous, writes through contiguous temporaries and compares element by element: 16x32x32x32
// float32 in Spyre's default layout, 2x2 windows, 1.1 ms at two threads.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "isa_tables.h"

namespace torch_layouts {
namespace {

// The 2x2, stride-2 rows of float32 planes whose rows run at stride 1 (max_pool_rows.h).
struct MaxPoolRows {
  void (*forward)(const float* r0, const float* r1, float* out, int64_t* index, int64_t n, int64_t i0, int64_t w);
  bool (*backward)(const float* grad, const int64_t* index, float* g0, float* g1, int64_t n, int64_t i0, int64_t w);
};

namespace portable {
#include "max_pool_rows.h"
}  // namespace portable

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "max_pool_rows.h"
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2")
namespace avx512 {
#include "max_pool_rows.h"
}  // namespace avx512
#pragma GCC pop_options
#endif

const MaxPoolRows& rows_table() {
  return *TORCH_LAYOUTS_BEST_ISA_TABLE(&portable::kTable, &avx2::kTable, &avx512::kTable);
}

// A pooling window per spatial dim (height, width), as ATen reads the int[2] arguments: one value
// serves both dims; an empty stride is the kernel's.
struct Window {
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  bool ceil;

  // The output size along dim d (0: height) of an input of `size` (ATen's pooling_output_shape).
  int64_t out(int64_t size, int d) const {
    const int64_t k = kernel[d], s = stride[d], p = padding[d], span = dilation[d] * (k - 1) + 1;
    const int64_t num = size + 2 * p - span + (ceil ? s - 1 : 0);
    int64_t n = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil && (n - 1) * s >= size + p) --n;
    return n;
  }

  // The 2x2 windows of stride 2 without padding or dilation (the rows' kernels).
  bool two_by_two() const {
    return kernel[0] == 2 && kernel[1] == 2 && stride[0] == 2 && stride[1] == 2 && padding[0] == 0 &&
           padding[1] == 0 && dilation[0] == 1 && dilation[1] == 1;
  }
};

Window window_of(c10::IntArrayRef kernel, c10::IntArrayRef stride, c10::IntArrayRef padding,
                 c10::IntArrayRef dilation, bool ceil) {
  auto pick = [](c10::IntArrayRef v, const char* name, c10::IntArrayRef fallback, int64_t d) {
    if (v.empty() && !fallback.empty()) return fallback[fallback.size() == 1 ? 0 : d];
    TORCH_CHECK_VALUE(v.size() == 1 || v.size() == 2, "max_pool2d: ", name, " must be one int or two, got ", v);
    return v[v.size() == 1 ? 0 : d];
  };
  Window w{};
  for (int d = 0; d < 2; ++d) {
    w.kernel[d] = pick(kernel, "kernel_size", {}, d);
    w.stride[d] = pick(stride, "stride", kernel, d);
    w.padding[d] = pick(padding, "padding", {}, d);
    w.dilation[d] = pick(dilation, "dilation", {}, d);
    TORCH_CHECK_VALUE(w.kernel[d] > 0 && w.stride[d] > 0 && w.dilation[d] > 0,
                      "max_pool2d: kernel_size, stride and dilation must be positive, got ", kernel, ", ", stride,
                      ", ", dilation);
    TORCH_CHECK_VALUE(w.padding[d] >= 0 && w.padding[d] <= w.kernel[d] / 2,
                      "max_pool2d: padding must be at least 0 and at most half the kernel size, got padding ",
                      padding, " for kernel_size ", kernel);
  }
  w.ceil = ceil;
  return w;
}

// A 3-D (C, H, W) or 4-D (N, C, H, W) operand's planes: count, and each plane's offset and the
// height's and width's strides, in elements.
struct Planes {
  int64_t count, channels, n_stride, c_stride, h, w, h_stride, w_stride;

  explicit Planes(const at::Tensor& t) {
    const bool batched = t.dim() == 4;
    channels = t.size(batched ? 1 : 0);
    count = (batched ? t.size(0) : 1) * channels;
    n_stride = batched ? t.stride(0) : 0;
    c_stride = t.stride(batched ? 1 : 0);
    h = t.size(-2), w = t.size(-1), h_stride = t.stride(-2), w_stride = t.stride(-1);
  }
  int64_t offset(int64_t plane) const { return plane / channels * n_stride + plane % channels * c_stride; }
};

// Checks an operand's rank, leading dims (those of `like`), plane size and dtype.
void check_operand(const char* op, const char* name, const at::Tensor& t, const at::Tensor& like, int64_t h, int64_t w,
                   at::ScalarType dtype) {
  TORCH_CHECK_VALUE(t.dim() == like.dim() && t.sizes().slice(0, t.dim() - 2) == like.sizes().slice(0, like.dim() - 2) &&
                        t.size(-2) == h && t.size(-1) == w && t.scalar_type() == dtype,
                    op, ": ", name, " must be a ", dtype, " tensor of ", like.sizes().slice(0, like.dim() - 2),
                    " planes of ", h, "x", w, ", got ", t.scalar_type(), " of size ", t.sizes());
}

template <typename T>
constexpr T lowest() {
  return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    return std::isnan(static_cast<double>(v));
  }
}

// One plane by ATen's loop (cpu_max_pool): per window, from the start index of its first row and
// column inside the input and ATen's lowest value, an element replaces the maximum where it is
// greater or NaN, rows then columns.
template <typename T>
void pool_plane(const T* in, const Planes& x, T* out, int64_t* index, const Planes& o, const Planes& k,
                const Window& w) {
  using Acc = at::opmath_type<T>;
  for (int64_t oh = 0; oh < o.h; ++oh) {
    int64_t h0 = oh * w.stride[0] - w.padding[0];
    const int64_t h1 = std::min(h0 + (w.kernel[0] - 1) * w.dilation[0] + 1, x.h);
    while (h0 < 0) h0 += w.dilation[0];
    for (int64_t ow = 0; ow < o.w; ++ow) {
      int64_t w0 = ow * w.stride[1] - w.padding[1];
      const int64_t w1 = std::min(w0 + (w.kernel[1] - 1) * w.dilation[1] + 1, x.w);
      while (w0 < 0) w0 += w.dilation[1];
      int64_t best = h0 * x.w + w0;
      Acc m = lowest<Acc>();
      for (int64_t ih = h0; ih < h1; ih += w.dilation[0]) {
        for (int64_t iw = w0; iw < w1; iw += w.dilation[1]) {
          const Acc v = static_cast<Acc>(in[ih * x.h_stride + iw * x.w_stride]);
          if (v > m || is_nan(v)) {
            m = v;
            best = ih * x.w + iw;
          }
        }
      }
      out[oh * o.h_stride + ow * o.w_stride] = static_cast<T>(m);
      index[oh * k.h_stride + ow * k.w_stride] = best;
    }
  }
}

// A plane's gradient by ATen's loop (cpu_max_pool_backward): zeros, then each output's gradient
// added at its index in output order (ATen skips -1); an index outside the plane is a ValueError.
template <typename T>
void backward_plane(const T* grad, const Planes& g, const int64_t* index, const Planes& k, T* gi, const Planes& x) {
  for (int64_t ih = 0; ih < x.h; ++ih) {
    for (int64_t iw = 0; iw < x.w; ++iw) gi[ih * x.h_stride + iw * x.w_stride] = T(0);
  }
  for (int64_t oh = 0; oh < g.h; ++oh) {
    for (int64_t ow = 0; ow < g.w; ++ow) {
      const int64_t at = index[oh * k.h_stride + ow * k.w_stride];
      if (at == -1) continue;
      TORCH_CHECK_VALUE(at >= 0 && at < x.h * x.w, "max_pool2d_backward: indices holds ", at,
                        ", outside the input's plane of ", x.h, "x", x.w, " (0 to ", x.h * x.w - 1, ", or -1)");
      gi[at / x.w * x.h_stride + at % x.w * x.w_stride] += grad[oh * g.h_stride + ow * g.w_stride];
    }
  }
}

// A float32 plane by the 2x2 rows (the callers check the geometry); other dtypes: false.
template <typename T>
bool pool_rows(const MaxPoolRows&, const T*, const Planes&, T*, const Planes&, int64_t*, const Planes&) {
  return false;
}
bool pool_rows(const MaxPoolRows& table, const float* in, const Planes& x, float* out, const Planes& o, int64_t* index,
               const Planes& k) {
  for (int64_t r = 0; r < o.h; ++r) {
    table.forward(in + 2 * r * x.h_stride, in + (2 * r + 1) * x.h_stride, out + r * o.h_stride, index + r * k.h_stride,
                  o.w, 2 * r * x.w, x.w);
  }
  return true;
}

// A float32 plane's gradient by the 2x2 rows; false where an index is outside its window (or for
// other dtypes).
template <typename T>
bool backward_rows(const MaxPoolRows&, const T*, const Planes&, const int64_t*, const Planes&, T*, const Planes&) {
  return false;
}
bool backward_rows(const MaxPoolRows& table, const float* grad, const Planes& g, const int64_t* index, const Planes& k,
                   float* gi, const Planes& x) {
  bool inside = true;
  for (int64_t r = 0; r < g.h; ++r) {
    inside &= table.backward(grad + r * g.h_stride, index + r * k.h_stride, gi + 2 * r * x.h_stride,
                             gi + (2 * r + 1) * x.h_stride, g.w, 2 * r * x.w, x.w);
  }
  return inside;
}

// Planes per work item: at least this many input elements each.
int64_t grain(int64_t plane_elements) { return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, plane_elements)); }

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_out(const at::Tensor& self, c10::IntArrayRef kernel_size,
                                                   c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                   c10::IntArrayRef dilation, bool ceil_mode, at::Tensor& out,
                                                   at::Tensor& indices) {
  TORCH_CHECK_VALUE(self.dim() == 3 || self.dim() == 4, "max_pool2d: self must be (C, H, W) or (N, C, H, W), got size ",
                    self.sizes());
  const Window w = window_of(kernel_size, stride, padding, dilation, ceil_mode);
  const int64_t oh = w.out(self.size(-2), 0), ow = w.out(self.size(-1), 1);
  TORCH_CHECK_VALUE(oh > 0 && ow > 0, "max_pool2d: the input's ", self.size(-2), "x", self.size(-1),
                    " planes give no output for kernel_size ", kernel_size, ", padding ", padding, ", dilation ",
                    dilation);
  check_operand("max_pool2d", "out", out, self, oh, ow, self.scalar_type());
  check_operand("max_pool2d", "indices", indices, self, oh, ow, at::kLong);
  const Planes x(self), o(out), k(indices);
  const bool rows = self.scalar_type() == at::kFloat && w.two_by_two() && x.w_stride == 1 && o.w_stride == 1 &&
                    k.w_stride == 1 && 2 * oh <= x.h && 2 * ow <= x.w;
  AT_DISPATCH_ALL_TYPES_AND2(at::kBFloat16, at::kHalf, self.scalar_type(), "max_pool2d", [&] {
    const MaxPoolRows& table = rows_table();
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* values = out.mutable_data_ptr<scalar_t>();
    int64_t* index = indices.mutable_data_ptr<int64_t>();
    at::parallel_for(0, x.count, grain(x.h * x.w), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const scalar_t* plane = in + x.offset(p);
        scalar_t* v = values + o.offset(p);
        int64_t* i = index + k.offset(p);
        if (rows && pool_rows(table, plane, x, v, o, i, k)) continue;
        pool_plane(plane, x, v, i, o, k, w);
      }
    });
  });
  return {out, indices};
}

at::Tensor& max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, c10::IntArrayRef kernel_size,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    bool ceil_mode, const at::Tensor& indices, at::Tensor& grad_input) {
  TORCH_CHECK_VALUE(self.dim() == 3 || self.dim() == 4,
                    "max_pool2d_backward: self must be (C, H, W) or (N, C, H, W), got size ", self.sizes());
  const Window w = window_of(kernel_size, stride, padding, dilation, ceil_mode);
  const int64_t oh = w.out(self.size(-2), 0), ow = w.out(self.size(-1), 1);
  const at::ScalarType dtype = grad_output.scalar_type();
  check_operand("max_pool2d_backward", "grad_output", grad_output, self, oh, ow, dtype);
  check_operand("max_pool2d_backward", "indices", indices, self, oh, ow, at::kLong);
  check_operand("max_pool2d_backward", "grad_input", grad_input, self, self.size(-2), self.size(-1), dtype);
  const Planes g(grad_output), k(indices), x(grad_input);
  const bool rows = dtype == at::kFloat && w.two_by_two() && g.w_stride == 1 && k.w_stride == 1 && x.w_stride == 1 &&
                    2 * oh == x.h && 2 * ow == x.w;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "max_pool2d_backward", [&] {
    const MaxPoolRows& table = rows_table();
    const scalar_t* grad = grad_output.const_data_ptr<scalar_t>();
    const int64_t* index = indices.const_data_ptr<int64_t>();
    scalar_t* gi = grad_input.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, x.count, grain(x.h * x.w), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const scalar_t* go = grad + g.offset(p);
        const int64_t* i = index + k.offset(p);
        scalar_t* plane = gi + x.offset(p);
        // (an index outside its window: ATen's loop redoes the plane)
        if (rows && backward_rows(table, go, g, i, k, plane, x)) continue;
        backward_plane(go, g, i, k, plane, x);
      }
    });
  });
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_layouts, m) {
  m.def(
      "max_pool2d.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, "
      "bool ceil_mode=False, *, Tensor(a!) out, Tensor(b!) indices) -> (Tensor(a!), Tensor(b!))");
  m.def(
      "max_pool2d_backward.grad_input(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, "
      "int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices, *, Tensor(a!) grad_input) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(torch_layouts, CPU, m) {
  m.impl("max_pool2d.out", max_pool2d_out);
  m.impl("max_pool2d_backward.grad_input", max_pool2d_backward_out);
}

}  // namespace torch_layouts
