#include "row_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "row_math.h"
#include "value_fill.h"

namespace torch_layouts {
namespace {

// A few dims or operands: held inline, so that setting up a call allocates nothing on the heap
// (a 16x16 softmax's set-up took ~20 allocations).
template <typename T>
using Small = c10::SmallVector<T, 6>;

constexpr int64_t kBlockFloats = 32768;  // floats of every operand's rows gathered at once (L1/L2)
// ... and of every operand's rows per block when all are read where they lie: a tile's rows of
// a block are then one stream of ~40 runs per operand (layer norm 1024x1024 float32: backward
// 1.43-1.69 -> 1.09-1.45x ATen, forward 0.77-1.09 -> 0.62-0.77x, interleaved in one process).
constexpr int64_t kDirectBlockFloats = 131072;
constexpr int64_t kParallelFloats = 32768;  // fewer elements than this per thread run on one thread
constexpr int64_t kSumRows = 4096;  // rows whose sums accumulate together (in L1)

std::atomic<const RowMath*> g_math{&row_math(row_math_sets().front())};  // the best this CPU runs

const RowMath& math() { return *g_math.load(std::memory_order_relaxed); }

struct Operand {
  char* data;
  at::ScalarType dtype;
  int64_t esize;
  Small<int64_t> outer_stride;       // per coalesced outer dim (elements)
  c10::SmallVector<int64_t, 32> run_offset;  // each run's offset within a row (elements)
  int64_t run_stride;                 // between elements of a run
  bool per_row = false;               // one value per row (stride 0 along the row): read, never blocked
};

// The rows of one or more views of one shape (see row_kernels.h), in the order the kernels
// visit them: the outer dims as coalesced, except that a dim along which every operand's rows
// continue each other's runs (a stick tile's rows) goes innermost, so that a block of rows is
// one stretch of each run. Row r of that order is host row index(r) (per-row results).
struct Rows {
  Small<int64_t> outer_size;
  Small<int64_t> index_stride;  // the host row index's stride per outer dim
  bool host_order = true;             // whether row r is host row r
  // len: a row's real elements; its runs of run_len but the last, of `last` (a padded stick);
  // span: a gathered row's floats (its runs whole)
  int64_t rows = 1, len = 1, run_len = 1, last = 1, span = 1;
  c10::SmallVector<Operand, 5> ops;

  // f(r, offset of row first + r along `strides`) for r < count: the first row's outer
  // coordinates by division, the others by stepping them (no division per row).
  template <typename F>
  void offsets(c10::ArrayRef<int64_t> strides, int64_t first, int64_t count, F f) const {
    const size_t nd = outer_size.size();
    c10::SmallVector<int64_t, 8> idx(nd);
    int64_t off = 0;
    for (size_t d = nd, row = first; d-- > 0;) {
      idx[d] = static_cast<int64_t>(row) % outer_size[d];
      off += idx[d] * strides[d];
      row /= outer_size[d];
    }
    if (nd == 0) {
      for (int64_t r = 0; r < count; ++r) f(r, off);
      return;
    }
    const int64_t inner = outer_size[nd - 1], step = strides[nd - 1];
    for (int64_t r = 0; r < count;) {
      // the rest of the innermost dim in one strided run (a tile's rows: most of a block)
      const int64_t run = std::min(count - r, inner - idx[nd - 1]);
      for (int64_t i = 0; i < run; ++i) f(r + i, off + i * step);
      r += run;
      off += run * step;
      idx[nd - 1] += run;
      for (size_t d = nd; d-- > 0 && idx[d] == outer_size[d];) {  // carry into the outer dims
        off -= strides[d] * outer_size[d];
        idx[d] = 0;
        if (d == 0) break;
        off += strides[d - 1];
        ++idx[d - 1];
      }
    }
  }

  // f(r, element offset of row first + r in op) for r < count.
  template <typename F>
  void row_offsets(const Operand& op, int64_t first, int64_t count, F f) const {
    offsets(op.outer_stride, first, count, f);
  }

  // f(r, host row index of row first + r) for r < count.
  template <typename F>
  void host_rows(int64_t first, int64_t count, F f) const {
    if (!host_order) return offsets(index_stride, first, count, f);
    for (int64_t r = 0; r < count; ++r) f(r, first + r);
  }
};

struct Dim {
  int64_t size;
  Small<int64_t> strides;  // one per view
};

// Dims [begin, end) of the views, size-1 dims dropped and dims merged where every view runs on.
Small<Dim> coalesce(c10::ArrayRef<at::Tensor> views, int64_t begin, int64_t end) {
  Small<Dim> dims;
  for (int64_t d = begin; d < end; ++d) {
    const int64_t size = views[0].size(d);
    if (size == 1) continue;
    Small<int64_t> strides;
    for (const auto& v : views) strides.push_back(v.stride(d));
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < views.size(); ++k) merge = dims.back().strides[k] == strides[k] * size;
    if (merge) {
      dims.back().size *= size;
      dims.back().strides = strides;
    } else {
      dims.push_back({size, strides});
    }
  }
  return dims;
}

// The last `per_row` views hold one value per row (a row view of layer norm's mean: stride 0 along
// the row dims): float32, read by their row offsets, and no part of the blocking or of the choice of
// the innermost outer dim.
Rows make_rows(c10::ArrayRef<at::Tensor> views, c10::ArrayRef<const char*> names, int64_t width,
               int64_t length, size_t per_row = 0) {
  const at::Tensor& first = views[0];
  TORCH_CHECK_VALUE(width >= 1 && width <= first.dim(), "row width ", width, " is outside [1, ", first.dim(),
                    "] for a ", first.dim(), "-dim view");
  for (size_t k = 0; k < views.size(); ++k) {
    const at::Tensor& v = views[k];
    TORCH_CHECK_VALUE(v.device().is_cpu(), names[k], " must be a CPU view of a device buffer, got one on ",
                      v.device());
    const auto t = v.scalar_type();
    TORCH_CHECK_VALUE(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                      "row kernels take float32, float16 or bfloat16; ", names[k], " is ", t);
    TORCH_CHECK_VALUE(v.sizes() == first.sizes(), names[k], " has shape ", v.sizes(), ", expected ", first.sizes());
    if (k + per_row >= views.size()) {
      TORCH_CHECK_VALUE(t == at::kFloat, names[k], " must be float32, got ", t);
      for (int64_t d = first.dim() - width; d < first.dim(); ++d) {
        TORCH_CHECK_VALUE(v.size(d) <= 1 || v.stride(d) == 0, names[k],
                          " must hold one value per row (stride 0 along the row dims), got strides ", v.strides());
      }
    }
  }
  Rows g;
  Small<Dim> outer = coalesce(views, 0, first.dim() - width);
  Small<Dim> row = coalesce(views, first.dim() - width, first.dim());
  if (row.empty()) row.push_back({1, Small<int64_t>(views.size(), 1)});
  Small<int64_t> index_stride(outer.size());
  for (size_t d = outer.size(); d-- > 0;) {
    index_stride[d] = g.rows;
    g.rows *= outer[d].size;
  }
  // The dim whose rows continue each other's runs in every view goes innermost.
  auto adjacent_rows = [&](const Dim& d) {
    for (size_t k = 0; k + per_row < views.size(); ++k) {
      if (d.strides[k] != row.back().size * row.back().strides[k]) return false;
    }
    return true;
  };
  if (!outer.empty() && !adjacent_rows(outer.back())) {
    for (size_t d = 0; d + 1 < outer.size(); ++d) {
      if (!adjacent_rows(outer[d])) continue;
      std::rotate(outer.begin() + d, outer.begin() + d + 1, outer.end());
      std::rotate(index_stride.begin() + d, index_stride.begin() + d + 1, index_stride.end());
      g.host_order = false;
      break;
    }
  }
  for (const Dim& d : outer) g.outer_size.push_back(d.size);
  g.index_stride = std::move(index_stride);
  g.run_len = row.back().size;
  g.len = 1;
  for (const Dim& d : row) g.len *= d.size;
  TORCH_CHECK_VALUE(length <= g.len && (length > 0 || length == -1), "a row's real length must be in [1, ", g.len,
                    "] (or -1: the whole row), got ", length);
  if (length > 0) g.len = length;
  // rows of no elements have no runs; a row of a real length ends within its last run
  const int64_t runs = g.run_len == 0 ? 0 : (g.len + g.run_len - 1) / g.run_len;
  g.last = runs == 0 ? g.run_len : g.len - (runs - 1) * g.run_len;
  g.span = runs * g.run_len;
  for (size_t k = 0; k < views.size(); ++k) {
    Operand op{static_cast<char*>(views[k].data_ptr()), views[k].scalar_type(),
               static_cast<int64_t>(views[k].element_size()), {}, {}, row.back().strides[k],
               k + per_row >= views.size()};
    for (const Dim& d : outer) op.outer_stride.push_back(d.strides[k]);
    op.run_offset.resize(runs);
    for (int64_t j = 0; j < runs; ++j) {  // j as a multi-index over the row dims but the last
      int64_t rest = j, off = 0;
      for (size_t d = row.size() - 1; d-- > 0;) {
        off += (rest % row[d].size) * row[d].strides[k];
        rest /= row[d].size;
      }
      op.run_offset[j] = off;
    }
    g.ops.push_back(std::move(op));
  }
  return g;
}

void load(float* d, const char* s, int64_t n, int64_t stride, at::ScalarType t, const RowMath& m) {
  if (t == at::kFloat) {
    if (stride == 1) {
      std::memcpy(d, s, n * sizeof(float));
    } else {
      const float* p = reinterpret_cast<const float*>(s);
      for (int64_t i = 0; i < n; ++i) d[i] = p[i * stride];
    }
  } else if (t == at::kHalf) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(s);
    if (stride == 1) {
      m.load_half(d, p, n);
    } else {
      for (int64_t i = 0; i < n; ++i) m.load_half(d + i, p + i * stride, 1);
    }
  } else {
    const c10::BFloat16* p = reinterpret_cast<const c10::BFloat16*>(s);
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(p[i * stride]);
  }
}

void store(char* d, const float* s, int64_t n, int64_t stride, at::ScalarType t, const RowMath& m) {
  if (t == at::kFloat) {
    if (stride == 1) {
      std::memcpy(d, s, n * sizeof(float));
    } else {
      float* p = reinterpret_cast<float*>(d);
      for (int64_t i = 0; i < n; ++i) p[i * stride] = s[i];
    }
  } else if (t == at::kHalf) {
    uint16_t* p = reinterpret_cast<uint16_t*>(d);
    if (stride == 1) {
      m.store_half(p, s, n);
    } else {
      for (int64_t i = 0; i < n; ++i) m.store_half(p + i * stride, s + i, 1);
    }
  } else {
    c10::BFloat16* p = reinterpret_cast<c10::BFloat16*>(d);
    for (int64_t i = 0; i < n; ++i) p[i * stride] = c10::BFloat16(s[i]);
  }
}

// Whether the rows starting at `base` continue each other's runs (a stick's rows in a tile): then
// the block's piece of every run is one contiguous stretch.
bool adjacent(const Rows& g, const Operand& op, c10::ArrayRef<int64_t> base) {
  for (size_t r = 1; r < base.size(); ++r) {
    if (base[r] != base[0] + static_cast<int64_t>(r) * g.run_len * op.run_stride) return false;
  }
  return true;
}

// f(position in a block buffer, device address, elements) for the pieces of the rows [first,
// first + count) of operand k in a block buffer laid out [run][row][element] (`block` rows): run
// by run, so that adjacent rows of a tile are visited one after another, and where the rows
// continue each other's runs a run's piece of the whole block at once (not a last run shorter
// than the others: its rows' pieces have padding between them).
template <typename F>
void for_pieces(const Rows& g, size_t k, int64_t first, int64_t count, int64_t block, F f) {
  const Operand& op = g.ops[k];
  c10::SmallVector<int64_t, kMaxBlockRows> base(count);
  g.row_offsets(op, first, count, [&](int64_t r, int64_t off) { base[r] = off; });
  const bool whole = adjacent(g, op, base);
  for (size_t j = 0; j < op.run_offset.size(); ++j) {
    const int64_t n = j + 1 < op.run_offset.size() ? g.run_len : g.last;
    if (whole && n == g.run_len) {
      f(j * block * g.run_len, op.data + (base[0] + op.run_offset[j]) * op.esize, count * n);
      continue;
    }
    for (int64_t r = 0; r < count; ++r) f((j * block + r) * g.run_len, op.data + (base[r] + op.run_offset[j]) * op.esize, n);
  }
}

void gather(const Rows& g, size_t k, int64_t first, int64_t count, int64_t block, float* buf, const RowMath& m) {
  const Operand& op = g.ops[k];
  for_pieces(g, k, first, count, block, [&](int64_t at, const char* p, int64_t n) {
    load(buf + at, p, n, op.run_stride, op.dtype, m);
  });
}

void scatter(const Rows& g, size_t k, int64_t first, int64_t count, int64_t block, const float* buf,
             const RowMath& m) {
  const Operand& op = g.ops[k];
  for_pieces(g, k, first, count, block, [&](int64_t at, char* p, int64_t n) {
    store(p, buf + at, n, op.run_stride, op.dtype, m);
  });
}

int64_t chunk_count(const Rows& g) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), g.rows * g.len / kParallelFloats));
}

// body(chunk, first, count) for fixed chunks of rows, one per thread.
template <typename Body>
void for_chunks(const Rows& g, Body body) {
  if (g.rows == 0 || g.len == 0) return;
  const int64_t chunks = chunk_count(g);
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t begin = g.rows * c / chunks, end = g.rows * (c + 1) / chunks;
      body(c, begin, end - begin);
    }
  });
}

// Operands the math reads and writes where they lie (float32 runs of stride 1); the others are
// gathered into (or scattered from) float32 block buffers.
struct Plan {
  RowShape shape;              // a row's runs, as the row math takes them
  Small<char> direct;
  c10::SmallVector<int64_t, 32> dense;  // run offsets of a gathered row: buffers hold [run][row][element]
  int64_t buffers = 0;
  int64_t block = 1;           // rows per block
};

Plan plan(const Rows& g) {
  Plan p{{static_cast<int64_t>(g.ops[0].run_offset.size()), g.run_len, g.last}};
  int64_t blocked = 0;  // operands whose rows a block holds (per-row ones are read a value a row)
  for (const Operand& op : g.ops) {
    p.direct.push_back(op.per_row || (op.dtype == at::kFloat && op.run_stride == 1));
    p.buffers += !p.direct.back();
    blocked += !op.per_row;
  }
  const int64_t budget = p.buffers == 0 ? kDirectBlockFloats : kBlockFloats;
  p.block = std::clamp<int64_t>(budget / (std::max<int64_t>(g.len, 1) * blocked), 1, kMaxBlockRows);
  // Where the innermost outer dim's rows continue each other's runs in every operand (a stick
  // tile's rows), a block is one such group when fewer than a block: each pass then reads the
  // tile in storage order (8 rows: 23 -> 17 us for a softmax backward over 8x64x128 float32).
  bool grouped = !g.outer_size.empty();
  for (const Operand& op : g.ops) {
    grouped = grouped && (op.per_row || op.outer_stride.back() == g.run_len * op.run_stride);
  }
  if (grouped && g.outer_size.back() >= 4 && g.outer_size.back() < p.block) p.block = g.outer_size.back();
  for (size_t j = 0; j < g.ops[0].run_offset.size(); ++j) p.dense.push_back(static_cast<int64_t>(j) * p.block * g.run_len);
  return p;
}

// The rows [first, first + count) of operand k (bufs: the block's buffers) as the row math's Row.
struct BlockRows {
  float* base[kMaxBlockRows];
  Row row;
  BlockRows(const Rows& g, const Plan& p, size_t k, int64_t first, int64_t count, float* const* bufs) {
    const Operand& op = g.ops[k];
    if (p.direct[k]) {
      float* data = reinterpret_cast<float*>(op.data);
      g.row_offsets(op, first, count, [&](int64_t r, int64_t off) { base[r] = data + off; });
      row = Row{base, op.run_offset.data()};
      return;
    }
    for (int64_t r = 0; r < count; ++r) base[r] = bufs[k] + r * g.run_len;
    row = Row{base, p.dense.data()};
  }
};

// body(chunk, block_first, block_count, bufs) for blocks of rows within each chunk (at most
// kMaxBlockRows, all operands' rows within kBlockFloats); bufs[k] holds the block's rows of
// operand k where it is not direct.
template <typename Body>
void for_blocks(const Rows& g, const Plan& p, Body body) {
  const int64_t block = p.block;
  for_chunks(g, [&](int64_t c, int64_t begin, int64_t count) {
    // Left unset: a block's pieces are gathered before the math reads them, and the padding
    // between a last run's pieces is never read (a NaN-filled buffer passes every test).
    const auto storage = p.buffers ? std::make_unique_for_overwrite<float[]>(block * g.span * p.buffers) : nullptr;
    Small<float*> bufs(g.ops.size(), nullptr);
    float* next = storage.get();
    for (size_t k = 0; k < g.ops.size(); ++k) {
      if (!p.direct[k]) {
        bufs[k] = next;
        next += block * g.span;
      }
    }
    for (int64_t b = begin; b < begin + count; b += block) body(c, b, std::min(block, begin + count - b), bufs.data());
  });
}

// Gathers the block's rows of the input operands that are not direct.
void gather_inputs(const Rows& g, const Plan& p, std::initializer_list<size_t> inputs, int64_t first, int64_t count,
                   float* const* bufs, const RowMath& m) {
  for (size_t k : inputs) {
    if (!p.direct[k]) gather(g, k, first, count, p.block, bufs[k], m);
  }
}

void scatter_output(const Rows& g, const Plan& p, size_t k, int64_t first, int64_t count, float* const* bufs,
                    const RowMath& m) {
  if (!p.direct[k]) scatter(g, k, first, count, p.block, bufs[k], m);
}

float* float_vector(const at::Tensor& t, int64_t n, const char* name) {
  TORCH_CHECK_VALUE(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() && t.numel() == n,
                    name, " must be a contiguous float32 CPU tensor of ", n, " elements, got ", t.scalar_type(),
                    " of ", t.numel(), " on ", t.device());
  return t.data_ptr<float>();
}

const float* optional_vector(const std::optional<at::Tensor>& t, int64_t n, const char* name) {
  return t.has_value() && t->defined() ? float_vector(*t, n, name) : nullptr;
}

// acc + x with acc the first operand, as ATen's `cum_number += x` compiles: where both are NaN,
// x86's addition returns the first one's, so the order fixes the bits; a compiler may commute a
// plain `+` (the ASan build did: +NaN where ATen gives -NaN), so on x86 the instruction is written
// out (elsewhere a NaN sum is kept as it is, as that order gives).
template <typename Acc>
inline Acc add_in_order(Acc acc, Acc x) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Acc, double>) {
    asm("addsd %1, %0" : "+x"(acc) : "x"(x));
  } else {
    asm("addss %1, %0" : "+x"(acc) : "x"(x));
  }
  return acc;
#else
  return acc != acc ? acc : acc + x;
#endif
}

// out := the running sums of rows [first, first + G) of x (Acc accumulating): ATen's cumsum,
// which adds each element in order into an accumulator of its acc_type (double for float32,
// float for float16 and bfloat16) and rounds each sum to the dtype. The G rows run side by side,
// their accumulators in registers, so that their additions do not wait on each other (1024x256
// float32: 144 us with every row of a block side by side through memory, 59 in groups of 8, ATen 68).
template <typename Acc, int64_t G>
void scan_group(RowShape s, int64_t first, Row x, Row out) {
  Acc acc[G] = {};
  for (int64_t j = 0; j < s.runs; ++j) {
    const float* xs[G];
    float* os[G];
    for (int64_t q = 0; q < G; ++q) {
      xs[q] = x.base[first + q] + x.off[j];
      os[q] = out.base[first + q] + out.off[j];
    }
    for (int64_t i = 0; i < run_length(s, j); ++i) {
      for (int64_t q = 0; q < G; ++q) {
        acc[q] = add_in_order(acc[q], static_cast<Acc>(xs[q][i]));
        os[q][i] = static_cast<float>(acc[q]);
      }
    }
  }
}

template <typename Acc>
void scan_rows(RowShape s, int64_t count, Row x, Row out) {
  int64_t k = 0;
  for (; k + 8 <= count; k += 8) scan_group<Acc, 8>(s, k, x, out);
  for (; k < count; ++k) scan_group<Acc, 1>(s, k, x, out);
}

}  // namespace

void rows_cumsum(const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t length) {
  const Rows g = make_rows({x, out}, {"input", "out"}, width, length);
  TORCH_CHECK_VALUE(x.scalar_type() == out.scalar_type(), "out must be of the input's dtype ", x.scalar_type(),
                    ", got ", out.scalar_type());
  const Plan p = plan(g);
  const RowMath& m = math();
  const bool wide = x.scalar_type() == at::kFloat;
  for_blocks(g, p, [&](int64_t, int64_t first, int64_t count, float* const* bufs) {
    gather_inputs(g, p, {0}, first, count, bufs, m);
    const BlockRows xs(g, p, 0, first, count, bufs), os(g, p, 1, first, count, bufs);
    wide ? scan_rows<double>(p.shape, count, xs.row, os.row) : scan_rows<float>(p.shape, count, xs.row, os.row);
    scatter_output(g, p, 1, first, count, bufs, m);
  });
}

void rows_softmax(const at::Tensor& x, const at::Tensor& out, int64_t width, bool log, bool safe, int64_t length) {
  const Rows g = make_rows({x, out}, {"input", "out"}, width, length);
  const Plan p = plan(g);
  const RowMath& m = math();
  for_blocks(g, p, [&](int64_t, int64_t first, int64_t count, float* const* bufs) {
    gather_inputs(g, p, {0}, first, count, bufs, m);
    m.softmax(p.shape, count, BlockRows(g, p, 0, first, count, bufs).row, BlockRows(g, p, 1, first, count, bufs).row,
              log, safe);
    scatter_output(g, p, 1, first, count, bufs, m);
  });
}

void rows_softmax_backward(const at::Tensor& grad, const at::Tensor& output, const at::Tensor& out, int64_t width,
                           bool log, int64_t length) {
  const Rows g = make_rows({grad, output, out}, {"grad_output", "output", "out"}, width, length);
  const Plan p = plan(g);
  const RowMath& m = math();
  for_blocks(g, p, [&](int64_t, int64_t first, int64_t count, float* const* bufs) {
    gather_inputs(g, p, {0, 1}, first, count, bufs, m);
    m.softmax_backward(p.shape, count, BlockRows(g, p, 0, first, count, bufs).row,
                       BlockRows(g, p, 1, first, count, bufs).row, BlockRows(g, p, 2, first, count, bufs).row, log);
    scatter_output(g, p, 2, first, count, bufs, m);
  });
}

void rows_layer_norm(const at::Tensor& x, const at::Tensor& out, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps, const at::Tensor& mean,
                     const at::Tensor& rstd, int64_t width, int64_t length, bool rms) {
  const Rows g = make_rows({x, out}, {"input", "out"}, width, length);
  const float* w = optional_vector(weight, g.len, "weight");
  const float* b = optional_vector(bias, g.len, "bias");
  float* mu = float_vector(mean, g.rows, "mean");
  float* rs = float_vector(rstd, g.rows, "rstd");
  const Plan p = plan(g);
  const RowMath& m = math();
  for_blocks(g, p, [&](int64_t, int64_t first, int64_t count, float* const* bufs) {
    gather_inputs(g, p, {0}, first, count, bufs, m);
    float mean_rows[kMaxBlockRows], rstd_rows[kMaxBlockRows];
    m.layer_norm(p.shape, count, BlockRows(g, p, 0, first, count, bufs).row, BlockRows(g, p, 1, first, count, bufs).row,
                 w, b, static_cast<float>(eps), mean_rows, rstd_rows, rms);
    g.host_rows(first, count, [&](int64_t r, int64_t row) {
      mu[row] = mean_rows[r];
      rs[row] = rstd_rows[r];
    });
    scatter_output(g, p, 1, first, count, bufs, m);
  });
}

void rows_layer_norm_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& mean,
                              const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
                              const std::optional<at::Tensor>& grad_input,
                              const std::optional<at::Tensor>& grad_weight,
                              const std::optional<at::Tensor>& grad_bias, int64_t width, int64_t length, bool rms) {
  const bool dx = grad_input.has_value() && grad_input->defined();
  Small<at::Tensor> views{grad, x};
  if (dx) views.push_back(*grad_input);
  // mean and rstd as row views of grad's shape (one value per row, where the forward left them),
  // or as contiguous vectors in host row order
  const bool row_views = mean.sizes() == grad.sizes();
  if (row_views) {
    views.push_back(mean);
    views.push_back(rstd);
  }
  const size_t stats = views.size() - 2;  // mean's operand, rstd's after it (row views)
  const Rows g = make_rows(views, {"grad_out", "input", dx ? "grad_input" : "mean", dx ? "mean" : "rstd", "rstd"},
                           width, length, row_views ? 2 : 0);
  const float* w = optional_vector(weight, g.len, "weight");
  const auto stat = [&](const at::Tensor& t, size_t k, const char* name) -> const float* {
    return row_views ? reinterpret_cast<const float*>(g.ops[k].data) : float_vector(t, g.rows, name);
  };
  const float* mu = stat(mean, stats, "mean");
  const float* rs = stat(rstd, stats + 1, "rstd");
  float* dgamma = grad_weight.has_value() && grad_weight->defined() ? float_vector(*grad_weight, g.len, "grad_weight")
                                                                    : nullptr;
  float* dbeta = grad_bias.has_value() && grad_bias->defined() ? float_vector(*grad_bias, g.len, "grad_bias")
                                                               : nullptr;
  const int64_t chunks = chunk_count(g);
  // per-chunk column sums, added in chunk order at the end
  std::vector<float> acc((dgamma ? chunks * g.len : 0) + (dbeta ? chunks * g.len : 0), 0.0f);
  float* gamma_acc = dgamma ? acc.data() : nullptr;
  float* beta_acc = dbeta ? acc.data() + (dgamma ? chunks * g.len : 0) : nullptr;
  const Plan p = plan(g);
  const RowMath& m = math();
  for_blocks(g, p, [&](int64_t c, int64_t first, int64_t count, float* const* bufs) {
    gather_inputs(g, p, {0, 1}, first, count, bufs, m);
    float mean_rows[kMaxBlockRows], rstd_rows[kMaxBlockRows];
    if (row_views) {
      g.row_offsets(g.ops[stats], first, count, [&](int64_t r, int64_t off) { mean_rows[r] = mu[off]; });
      g.row_offsets(g.ops[stats + 1], first, count, [&](int64_t r, int64_t off) { rstd_rows[r] = rs[off]; });
    } else {
      g.host_rows(first, count, [&](int64_t r, int64_t row) {
        mean_rows[r] = mu[row];
        rstd_rows[r] = rs[row];
      });
    }
    if (rms) std::fill(mean_rows, mean_rows + count, 0.0f);  // RMS norm: no mean, whatever `mean` holds
    m.layer_norm_backward(p.shape, count, BlockRows(g, p, 0, first, count, bufs).row,
                          BlockRows(g, p, 1, first, count, bufs).row,
                          dx ? BlockRows(g, p, 2, first, count, bufs).row : Row{nullptr, nullptr}, mean_rows,
                          rstd_rows, w,
                          gamma_acc ? gamma_acc + c * g.len : nullptr, beta_acc ? beta_acc + c * g.len : nullptr, rms);
    if (dx) scatter_output(g, p, 2, first, count, bufs, m);
  });
  for (auto [target, part] : {std::pair{dgamma, gamma_acc}, std::pair{dbeta, beta_acc}}) {
    if (!target) continue;
    std::fill(target, target + g.len, 0.0f);
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t i = 0; i < g.len; ++i) target[i] += part[c * g.len + i];
    }
  }
}

namespace {

// Rows [first, first + count) of a sparse result written whole: each row's part of the buffer
// (its value and the padding after it; the buffer's head before row 0 and its tail after the last
// row with those rows), a block of kSparseBlock floats at a time, filled and then its values
// written while it is in L1. The pad by fill_value (memset for 0.0: against std::fill's 16-byte
// stores, sum(-1) of 1024x256 float32 against the CPU's, builds alternated three times: 1.19-1.22 ->
// 1.09-1.22x, amax 0.99-1.08 -> 0.86-0.99).
constexpr int64_t kSparseBlock = 4096;
void write_sparse(const SparseRows& s, int64_t rows, int64_t first, int64_t count, const float* values) {
  const int64_t begin = first == 0 ? 0 : s.offset + first * s.step;
  const int64_t end = first + count == rows ? s.numel : s.offset + (first + count) * s.step;
  int64_t i = first;
  for (int64_t b = begin; b < end; b += kSparseBlock) {
    const int64_t e = std::min(end, b + kSparseBlock);
    fill_value(s.buffer + b, e - b, s.pad);
    for (; i < first + count && s.offset + i * s.step < e; ++i) s.buffer[s.offset + i * s.step] = values[i - first];
  }
}

// Per-row folds of x's rows into out (rows_sum, rows_extreme): run by run into per-row values,
// kSumRows of a thread's rows at once, starting from `init`: no gather, and the buffer is read in
// storage order where rows are adjacent within a tile. `strided(acc, first, step, count, n, half)`
// and `runs(acc, ptrs, count, n, half)` fold float32 or float16 runs in place (the row math's);
// `gathered(acc, floats, n)` one row's run gathered into float32 (bfloat16, strided runs). Each
// value is divided by `divisor` as it is written (a mean's count; 1: as it is).
template <typename Strided, typename Runs, typename Gathered>
void fold_rows(const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t length, float init, float divisor,
               const SparseRows* sparse, const Strided& strided, const Runs& runs_of, const Gathered& gathered) {
  const Rows g = make_rows({x}, {"input"}, width, length);
  if (sparse) {
    TORCH_CHECK_VALUE(g.rows > 0 && sparse->step > 0 && sparse->offset >= 0 &&
                          sparse->offset + (g.rows - 1) * sparse->step < sparse->numel,
                      "a sparse result of ", sparse->numel, " floats cannot hold ", g.rows, " rows at offset ",
                      sparse->offset, " and step ", sparse->step);
  } else {
    TORCH_CHECK_VALUE(out.device().is_cpu() && out.scalar_type() == at::kFloat && out.dim() == 1 &&
                          out.numel() == g.rows,
                      "out must be a 1-dim float32 CPU tensor of ", g.rows, " elements, got ", out.scalar_type(),
                      " of ", out.sizes(), " on ", out.device());
  }
  // A strided out (a reduction's result in Spyre's sparse layout, freshly filled by this thread)
  // is written from this thread after the sweep: written from the others, each line would move
  // between cores (amax(-1) of 1024x256 float32: 12 -> 28 us). A sparse result is written whole
  // by the thread whose rows it holds (in host order), nothing filled before: sum(-1) of
  // 1024x256 float32, a 128 KiB result, 12.7 -> 11.4 us (amax(-1) 14.1 -> 12.7).
  const bool own_rows = sparse && g.host_order && g.len > 0;
  const int64_t step = sparse ? 0 : out.stride(0);
  std::vector<float> dense(step == 1 || own_rows ? 0 : g.rows);
  float* values = step == 1 ? out.data_ptr<float>() : dense.data();
  const Operand& op = g.ops[0];
  const RowMath& m = math();
  const bool direct = op.run_stride == 1 && op.dtype != at::kBFloat16;
  if (g.len == 0) std::fill(values, values + g.rows, init / divisor);  // rows of no elements
  for_chunks(g, [&](int64_t, int64_t begin, int64_t rows) {
    // Each is written before it is read (no zeroing: 20 KiB a call for 1024 rows on one thread).
    const int64_t rows_at_once = std::min(rows, kSumRows);
    const auto scratch = std::make_unique_for_overwrite<float[]>(direct ? 0 : g.run_len);
    const auto base = std::make_unique_for_overwrite<int64_t[]>(rows_at_once);
    const auto runs = std::make_unique_for_overwrite<const char*[]>(rows_at_once);
    const auto block = std::make_unique_for_overwrite<float[]>(rows_at_once);
    for (int64_t first = begin; first < begin + rows; first += kSumRows) {
      const int64_t count = std::min(kSumRows, begin + rows - first);
      g.row_offsets(op, first, count, [&](int64_t r, int64_t off) { base[r] = off; });
      std::fill_n(block.get(), count, init);
      // Rows equally spaced (a stick's): runs by their step, no array of pointers to write and
      // read back per run (the float16 stick sum of 4096x4096: 17-20% less time).
      bool even = count > 1;
      for (int64_t r = 2; even && r < count; ++r) even = base[r] - base[r - 1] == base[1] - base[0];
      for (size_t j = 0; j < op.run_offset.size(); ++j) {
        const int64_t run = op.run_offset[j];
        const int64_t n = j + 1 < op.run_offset.size() ? g.run_len : g.last;  // (a real length: ends within it)
        if (direct && even) {
          const char* start = op.data + (base[0] + run) * op.esize;
          strided(block.get(), start, (base[1] - base[0]) * op.esize, count, n, op.dtype == at::kHalf);
          continue;
        }
        for (int64_t r = 0; r < count; ++r) runs[r] = op.data + (base[r] + run) * op.esize;
        if (direct) {
          runs_of(block.get(), runs.get(), count, n, op.dtype == at::kHalf);
          continue;
        }
        for (int64_t r = 0; r < count; ++r) {
          load(scratch.get(), runs[r], n, op.run_stride, op.dtype, m);
          gathered(block[r], scratch.get(), n);
        }
      }
      if (divisor != 1.0f) {
        for (int64_t r = 0; r < count; ++r) block[r] /= divisor;
      }
      if (own_rows) {
        write_sparse(*sparse, g.rows, first, count, block.get());
        continue;
      }
      g.host_rows(first, count, [&](int64_t r, int64_t row) { values[row] = block[r]; });
    }
  });
  if (sparse && !own_rows) {
    write_sparse(*sparse, g.rows, 0, g.rows, dense.data());
  } else if (!sparse && step != 1) {
    float* to = out.data_ptr<float>();
    for (int64_t r = 0; r < g.rows; ++r) to[r * step] = dense[r];
  }
}

}  // namespace

void rows_sum(const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t divisor, const SparseRows* sparse,
              int64_t length) {
  TORCH_CHECK_VALUE(divisor >= 0, "divisor must not be negative, got ", divisor);
  const RowMath& m = math();
  fold_rows(x, out, width, length, 0.0f, static_cast<float>(divisor), sparse, m.add_strided_run_sums, m.add_run_sums,
            [&](float& sum, const float* run, int64_t n) { sum += m.sum(run, n); });
}

void rows_extreme(const at::Tensor& x, const at::Tensor& out, int64_t width, bool max, const SparseRows* sparse,
                  int64_t length) {
  const RowMath& m = math();
  const float init = max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  fold_rows(
      x, out, width, length, init, 1.0f, sparse,
      [&](float* acc, const char* first, int64_t step, int64_t count, int64_t n, bool half) {
        m.fold_strided_run_extremes(acc, first, step, count, n, half, max);
      },
      [&](float* acc, const char* const* runs, int64_t count, int64_t n, bool half) {
        m.fold_run_extremes(acc, runs, count, n, half, max);
      },
      [&](float& acc, const float* run, int64_t n) {
        const char* p = reinterpret_cast<const char*>(run);
        m.fold_run_extremes(&acc, &p, 1, n, false, max);
      });
}

void rows_arg_extreme(const at::Tensor& x, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                      int64_t width, int64_t length, bool max) {
  const Rows g = make_rows({x}, {"input"}, width, length);
  auto check = [&](const at::Tensor& t, at::ScalarType type, const char* name) {
    TORCH_CHECK_VALUE(t.device().is_cpu() && t.scalar_type() == type && t.dim() == 1 && t.numel() == g.rows &&
                          t.is_contiguous(),
                      name, " must be a contiguous 1-dim ", type, " CPU tensor of ", g.rows, " elements, got ",
                      t.scalar_type(), " of ", t.sizes(), " on ", t.device());
  };
  check(indices, at::kLong, "indices");
  if (values) check(*values, at::kFloat, "values");
  TORCH_CHECK_VALUE(g.len > 0, "rows of no elements have no extreme");
  const Operand& op = g.ops[0];
  const RowMath& m = math();
  const float init = max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const int64_t runs = static_cast<int64_t>(op.run_offset.size());
  int64_t* index_out = indices.data_ptr<int64_t>();
  float* value_out = values ? values->data_ptr<float>() : nullptr;
  for_chunks(g, [&](int64_t, int64_t begin, int64_t rows) {
    const int64_t at_once = std::min(rows, kSumRows);
    const auto base = std::make_unique_for_overwrite<int64_t[]>(at_once);
    const auto ptrs = std::make_unique_for_overwrite<const char*[]>(at_once);
    const auto run_max = std::make_unique_for_overwrite<float[]>(at_once);
    const auto best = std::make_unique_for_overwrite<float[]>(at_once);
    const auto best_run = std::make_unique_for_overwrite<int64_t[]>(at_once);
    std::vector<float> scratch(g.run_len);
    for (int64_t first = begin; first < begin + rows; first += kSumRows) {
      const int64_t count = std::min(kSumRows, begin + rows - first);
      g.row_offsets(op, first, count, [&](int64_t r, int64_t off) { base[r] = off; });
      std::fill_n(best.get(), count, init);
      std::fill_n(best_run.get(), count, int64_t{0});
      // Each run's extreme for the block's rows (the vector fold, NaN where a run holds one); a
      // row keeps the first run holding its extreme, or its first NaN.
      for (int64_t j = 0; j < runs; ++j) {
        const int64_t n = j + 1 < runs ? g.run_len : g.last;
        for (int64_t r = 0; r < count; ++r) ptrs[r] = op.data + (base[r] + op.run_offset[j]) * op.esize;
        std::fill_n(run_max.get(), count, init);
        if (op.run_stride == 1 && op.dtype != at::kBFloat16) {
          m.fold_run_extremes(run_max.get(), ptrs.get(), count, n, op.dtype == at::kHalf, max);
        } else {
          for (int64_t r = 0; r < count; ++r) {
            load(scratch.data(), ptrs[r], n, op.run_stride, op.dtype, m);
            const char* p = reinterpret_cast<const char*>(scratch.data());
            m.fold_run_extremes(&run_max[r], &p, 1, n, false, max);
          }
        }
        for (int64_t r = 0; r < count; ++r) {
          const float v = run_max[r], b = best[r];
          if (std::isnan(b)) continue;
          if (std::isnan(v) || (max ? v > b : v < b)) best[r] = v, best_run[r] = j;
        }
      }
      // The first element of that run equal to it (or NaN): ATen's index among ties.
      g.host_rows(first, count, [&](int64_t r, int64_t row) {
        const int64_t j = best_run[r], n = j + 1 < runs ? g.run_len : g.last;
        load(scratch.data(), op.data + (base[r] + op.run_offset[j]) * op.esize, n, op.run_stride, op.dtype, m);
        const float b = best[r];
        int64_t i = 0;
        while (i + 1 < n && !(std::isnan(b) ? std::isnan(scratch[i]) : scratch[i] == b)) ++i;
        index_out[row] = j * g.run_len + i;
        if (value_out) value_out[row] = b;
      });
    }
  });
}

const RowMath& rows_math() { return math(); }

std::string rows_set_math(const std::string& set) { return g_math.exchange(&row_math(set))->set; }

}  // namespace torch_layouts
