#include "reduce_recipe.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "column_sums.h"
#include "device_memory.h"
#include "dma_executor.h"
#include "row_kernels.h"

namespace torch_layouts {
namespace {

// Whether `layout`'s padding is every element of its float32 buffer but those of `rows` (a
// strided dim over the rows): checked once, when the replay is offered, on a map of the buffer.
bool pads_all_but(const BoundLayout& layout, const BufferView& rows) {
  const int64_t numel = layout.storage_nbytes / static_cast<int64_t>(sizeof(float));
  const int64_t n = rows.sizes[0], step = rows.strides[0];
  if (layout.dtype != at::kFloat || layout.padding.empty() || numel > (int64_t(1) << 24) || n < 1 || step < 1 ||
      rows.offset < 0 || rows.offset + (n - 1) * step >= numel) {
    return false;
  }
  std::vector<uint8_t> map(static_cast<size_t>(numel), 0);
  run_fills(layout.padding, map.data(), numel, at::kByte, 1);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t& at = map[static_cast<size_t>(rows.offset + r * step)];
    if (at != 0) return false;
    at = 2;
  }
  return std::find(map.begin(), map.end(), uint8_t(0)) == map.end();
}

enum class Kind { kSum, kAmax, kAmin, kMean, kAll, kAny };

class ReduceReplay final : public Replay {
 public:
  BufferView input, result;
  std::vector<int64_t> order;
  Kind kind = Kind::kSum;
  std::optional<c10::ScalarType> dtype;  // a sum's (a mean's sums') dtype
  int64_t count = 1;                      // a mean's reduced elements
  c10::ScalarType out_dtype = at::kFloat;  // a mean's (and row sums') result dtype
  bool row_kernels = false;               // reduced over sticks by the row kernels
  int64_t length = -1;                    // their rows' real elements (-1: whole rows)
  LayoutPtr out;
  std::vector<ReducePiece> pieces;        // several boxes (no input and result view then)
  std::vector<int64_t> values_sizes;      // their values' shape (the reduced dims of size 1)
  std::vector<int64_t> reduced;           // row kernels: the reduced dims, ascending
  // Row kernels whose float32 values are the result's (a sum, mean, amax or amin of float32): the
  // result's view as one strided dim over the rows, which the kernels write in place.
  std::optional<BufferView> direct_rows;
  // Where the result's padding is every other element of its buffer (Spyre's sparse result, a
  // value per stick), the row kernels write the buffer whole, each thread its rows' values and the
  // padding after them in one pass (row_kernels.h, SparseRows), instead of filling the buffer and
  // then writing the values into it: sum(-1) of 1024x256 float32, a 128 KiB result, 13.2 -> 11.4 us
  // (CPU 8.6).
  bool sparse_rows = false;

  // The row kernels' sweep of v (as ops/reductions._row_reduce): the kept dims in order are the
  // rows, the reduced ones ascending a row; one float32 value per row into `rows_out`.
  void reduce_rows(const at::Tensor& v, const at::Tensor& rows_out, const SparseRows* sparse = nullptr) const {
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < v.dim(); ++d) {
      if (!std::binary_search(reduced.begin(), reduced.end(), d)) perm.push_back(d);
    }
    perm.insert(perm.end(), reduced.begin(), reduced.end());
    const int64_t width = static_cast<int64_t>(reduced.size());
    if (kind == Kind::kAmax || kind == Kind::kAmin) {
      rows_extreme(v.permute(perm), rows_out, width, kind == Kind::kAmax, sparse, length);
    } else {
      rows_sum(v.permute(perm), rows_out, width, kind == Kind::kMean ? count : 1, sparse, length);
    }
  }

  // Whether reduce_view would offer v to the column-sum kernel: a sum (a mean's sums) over two or
  // more dims (after merging) of float32, float16 or bfloat16, in its own dtype or float32.
  bool columns_apply(const at::Tensor& v) const {
    const c10::ScalarType t = v.scalar_type();
    return order.size() > 1 && (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) &&
           (!dtype || *dtype == at::kFloat);
  }

  // The per-dim reductions of v, as ops/reductions.reduce_view and _values make them (a sum over
  // two or more dims: the column-sum kernel where it applies; row kernels:
  // reduce_rows; `order` most contiguous first, the exact kinds walk it backwards); offer_reduce
  // merged the input view's end-to-end reduced dims once (the pieces' kinds, amax, amin, all and
  // any, give the same bits merged or not) and put a column sum's outermost dim first (sum_order).
  // `columns_declined`: the column-sum kernel already declined v (its geometry), not asked again.
  at::Tensor reduce(at::Tensor v, bool columns_declined = false) const {
    if (row_kernels) {
      std::vector<int64_t> shape;
      int64_t rows = 1;
      for (int64_t d = 0; d < v.dim(); ++d) {
        const bool kept = !std::binary_search(reduced.begin(), reduced.end(), d);
        shape.push_back(kept ? v.size(d) : 1);
        rows *= kept ? v.size(d) : 1;
      }
      at::Tensor rows_out = at::empty({rows}, v.options().dtype(at::kFloat));
      reduce_rows(v, rows_out);  // a mean's sums divided by its count
      return rows_out.view(shape).to(out_dtype);
    }
    if ((kind == Kind::kSum || kind == Kind::kMean) && !columns_declined && columns_apply(v)) {  // as reduce_view
      std::vector<int64_t> shape = v.sizes().vec();
      for (int64_t d : order) shape[static_cast<size_t>(d)] = 1;
      at::Tensor sums = at::empty(shape, v.options().dtype(dtype.value_or(v.scalar_type())));
      if (columns_sum(v, order, sums)) {
        return kind == Kind::kMean ? mean_of(std::move(sums), /*fresh=*/true) : sums;
      }
    }
    const bool exact = kind != Kind::kSum && kind != Kind::kMean;  // as reduce_view: outermost dim first
    for (size_t k = 0; k < order.size(); ++k) {
      const int64_t d = order[exact ? order.size() - 1 - k : k];
      switch (kind) {
        case Kind::kSum:
        case Kind::kMean: v = at::sum(v, {d}, true, dtype); break;
        case Kind::kAmax: v = at::amax(v, {d}, true); break;
        case Kind::kAmin: v = at::amin(v, {d}, true); break;
        case Kind::kAll: v = at::all(v, d, true); break;
        case Kind::kAny: v = at::any(v, d, true); break;
      }
    }
    if (kind == Kind::kMean) v = mean_of(std::move(v), /*fresh=*/!order.empty());
    return v;
  }

  // A mean from its sums, as ops/reductions._values: in float32, divided by the count, in the
  // result's dtype; in place where the sums are this call's own float32 tensor (as ATen's mean
  // divides its sums in place: no tensor per call for the quotient).
  at::Tensor mean_of(at::Tensor sums, bool fresh) const {
    if (fresh && sums.scalar_type() == at::kFloat && sums.is_contiguous()) {
      // ATen's div_ by the count: each sum over float(count), IEEE's one rounding (no
      // TensorIterator, nor the count's 0-dim tensor converted to float32, for a few sums).
      float* p = sums.data_ptr<float>();
      const float n = static_cast<float>(count);
      at::parallel_for(0, sums.numel(), 32768, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) p[i] /= n;
      });
      return sums.to(out_dtype);
    }
    return sums.to(at::kFloat).div(count).to(out_dtype);
  }

  // reduce(v) written into `out`, the result's view, by ATen's out= overload, where that gives the
  // bits reduce() does: a sum, amax or amin over one dim (after merging) in v's own dtype into a
  // contiguous view (ATen then walks it as it walks a fresh tensor). No result tensor to copy in:
  // a bias gradient's column sum of 8x128x256 float32 12.3 -> 9.5 us (ATen's own sum 7-7.7).
  bool reduce_into(const at::Tensor& v, at::Tensor out) const {
    if (row_kernels || order.size() != 1 || out.scalar_type() != v.scalar_type() ||
        (dtype && *dtype != v.scalar_type()) || !out.is_contiguous()) {
      return false;
    }
    switch (kind) {
      case Kind::kSum: at::sum_out(out, v, {order[0]}, true); return true;
      case Kind::kAmax: at::amax_out(out, v, {order[0]}, true); return true;
      case Kind::kAmin: at::amin_out(out, v, {order[0]}, true); return true;
      default: return false;
    }
  }

  void combine(at::Tensor& region, const at::Tensor& v) const {
    switch (kind) {
      case Kind::kAmax: at::maximum_out(region, region, v); break;
      case Kind::kAmin: at::minimum_out(region, region, v); break;
      case Kind::kAll: at::logical_and_out(region, region, v); break;
      case Kind::kAny: at::logical_or_out(region, region, v); break;
      default: TORCH_INTERNAL_ASSERT(false, "only amax, amin, all and any combine their boxes");
    }
  }

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    const at::Tensor& x = args[0].toTensor();
    at::Tensor r = new_device_tensor(out, x.device(), /*fill=*/!sparse_rows);
    if (pieces.empty()) {
      if (sparse_rows) {
        const SparseRows sparse{static_cast<float*>(r.storage().mutable_data()),
                                device_nbytes(r.storage()) / static_cast<int64_t>(sizeof(float)), direct_rows->offset,
                                direct_rows->strides[0], out->pad_value.toFloat()};
        reduce_rows(borrowed_view_of(x, input), at::Tensor(), &sparse);
      } else if (direct_rows) {  // the row kernels' values straight into the result
        reduce_rows(borrowed_view_of(x, input), borrowed_view_of(r, *direct_rows));
      } else {
        const at::Tensor v = borrowed_view_of(x, input);
        at::Tensor out_view = borrowed_view_of(r, result);
        const bool asked = kind == Kind::kSum && columns_apply(v);  // straight into the result
        if (!(asked && columns_sum(v, order, out_view)) && !reduce_into(v, out_view)) {
          out_view.copy_(reduce(v, asked));
        }
      }
      results.emplace_back(std::move(r));
      return;
    }
    at::Tensor values;  // ops/reductions._boxed_values: each box's values, combined where regions meet
    std::vector<at::Tensor> regions;
    for (const ReducePiece& p : pieces) {
      const at::Tensor v = reduce(borrowed_view_of(x, p.input));
      if (!values.defined()) values = at::zeros(values_sizes, v.options());
      at::Tensor& region = regions.emplace_back(values.as_strided(p.region.sizes, p.region.strides, p.region.offset));
      if (p.writes) {
        region.copy_(v);
      } else {
        combine(region, v);
      }
    }
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (pieces[k].writes) borrowed_view_of(r, pieces[k].result).copy_(regions[k]);
    }
    results.emplace_back(std::move(r));
  }
};

// The reduced dims of `view` that lie end to end in memory (a dim's stride the size times the
// stride of the one before it in `order`, most contiguous first) merged into the first of them, the
// others left of size 1 and dropped from `order`: as ops/reductions.merge_reduced does.
void merge_reduced(BufferView& view, std::vector<int64_t>& order) {
  std::vector<int64_t> dims;
  for (int64_t d : order) {
    if (!dims.empty() && view.strides[d] == view.sizes[dims.back()] * view.strides[dims.back()]) {
      view.sizes[dims.back()] *= view.sizes[d];
      view.sizes[d] = 1;
    } else {
      dims.push_back(d);
    }
  }
  order = std::move(dims);
}

// A sum's `order` as ops/reductions.sum_order arranges it: where `view`'s contiguous dim is kept
// (column sums), its least contiguous reduced dim (last) moves first.
void sum_order(const BufferView& view, std::vector<int64_t>& order) {
  for (size_t d = 0; d < view.sizes.size() && order.size() > 1; ++d) {
    const bool reduced = std::find(order.begin(), order.end(), static_cast<int64_t>(d)) != order.end();
    if (view.strides[d] == 1 && view.sizes[d] > 1 && !reduced) {
      std::rotate(order.begin(), order.end() - 1, order.end());
      return;
    }
  }
}

// The view `result` (size 1 along the ascending dims `reduced`) as one strided dim whose element
// i is row i of the row kernels (the kept dims row-major), or nullopt where its kept dims do not
// lie at one stride.
std::optional<BufferView> rows_view(const BufferView& result, const std::vector<int64_t>& reduced) {
  int64_t rows = 1, stride = 1;
  bool inner = true;
  for (size_t d = result.sizes.size(); d-- > 0;) {
    const int64_t size = result.sizes[d];
    if (size == 1 || std::binary_search(reduced.begin(), reduced.end(), static_cast<int64_t>(d))) continue;
    if (inner) {
      stride = result.strides[d];
      inner = false;
    } else if (result.strides[d] != rows * stride) {
      return std::nullopt;
    }
    rows *= size;
  }
  return BufferView{{rows}, {stride}, result.offset};
}

std::optional<Kind> kind_of(const std::string& kind) {
  if (kind == "sum") return Kind::kSum;
  if (kind == "amax") return Kind::kAmax;
  if (kind == "amin") return Kind::kAmin;
  if (kind == "all") return Kind::kAll;
  if (kind == "any") return Kind::kAny;
  if (kind == "mean") return Kind::kMean;
  return std::nullopt;
}

}  // namespace

bool offer_reduce(const std::string& kind, const at::Tensor& x, BufferView input, std::vector<int64_t> order,
                  std::optional<c10::ScalarType> dtype, LayoutPtr out, BufferView result, int64_t count,
                  std::optional<c10::ScalarType> out_dtype, bool row_kernels, int64_t length) {
  if (!out || (kind == "mean" && (count <= 0 || !out_dtype)) || input.sizes.size() != input.strides.size() ||
      (row_kernels && ((kind != "sum" && kind != "mean" && kind != "amax" && kind != "amin") || !out_dtype ||
                       order.empty())) ||
      (length != -1 && (!row_kernels || length < 1)) ||
      result.sizes.size() != result.strides.size() || result.sizes.size() != input.sizes.size()) {
    return false;
  }
  auto r = std::make_shared<ReduceReplay>();
  const std::optional<Kind> parsed = kind_of(kind);
  if (!parsed) return false;
  r->kind = *parsed;
  if (r->kind == Kind::kMean) r->count = count;
  if (r->kind == Kind::kMean || row_kernels) r->out_dtype = *out_dtype;
  r->row_kernels = row_kernels;
  r->length = length;
  for (size_t d = 0; d < input.sizes.size(); ++d) {  // the values' shape: the input's, 1 along the reduced dims
    const bool reduced = std::find(order.begin(), order.end(), static_cast<int64_t>(d)) != order.end();
    if (result.sizes[d] != (reduced ? 1 : input.sizes[d])) return false;
  }
  for (int64_t d : order) {
    if (d < 0 || static_cast<size_t>(d) >= input.sizes.size()) return false;
  }
  if (!row_kernels) {  // once here, not at every call
    merge_reduced(input, order);
    if (r->kind == Kind::kSum || r->kind == Kind::kMean) sum_order(input, order);
  }
  if (row_kernels) {
    r->reduced = order;
    std::sort(r->reduced.begin(), r->reduced.end());
    if (*out_dtype == at::kFloat) r->direct_rows = rows_view(result, r->reduced);
    r->sparse_rows = r->direct_rows && pads_all_but(*out, *r->direct_rows);
  }
  r->input = std::move(input);
  r->result = std::move(result);
  r->order = std::move(order);
  r->dtype = dtype;
  r->out = std::move(out);
  return offer_replay(std::move(r), "aten::" + kind, {{0, x}});
}

bool offer_reduce_pieces(const std::string& kind, const at::Tensor& x, std::vector<ReducePiece> pieces,
                         std::vector<int64_t> values_sizes, std::vector<int64_t> order, LayoutPtr out,
                         std::optional<c10::ScalarType> out_dtype, bool row_kernels) {
  const std::optional<Kind> parsed = kind_of(kind);
  if (!out || !parsed || pieces.empty() || !pieces.front().writes ||
      (*parsed != Kind::kAmax && *parsed != Kind::kAmin && *parsed != Kind::kAll && *parsed != Kind::kAny) ||
      (row_kernels && ((*parsed != Kind::kAmax && *parsed != Kind::kAmin) || !out_dtype || order.empty()))) {
    return false;
  }
  const int64_t numel = c10::multiply_integers(values_sizes);
  for (const ReducePiece& p : pieces) {  // one rank; each region within the values, the result's view its shape
    const size_t rank = values_sizes.size();
    if (p.input.sizes.size() != rank || p.input.strides.size() != rank || p.region.sizes.size() != rank ||
        p.region.strides.size() != rank || p.result.sizes != p.region.sizes || p.result.strides.size() != rank) {
      return false;
    }
    int64_t last = p.region.offset;
    for (size_t d = 0; d < rank; ++d) {
      if (p.region.sizes[d] < 1 || p.region.strides[d] < 0) return false;
      last += (p.region.sizes[d] - 1) * p.region.strides[d];
    }
    if (p.region.offset < 0 || last >= numel) return false;
  }
  for (int64_t d : order) {
    if (d < 0 || static_cast<size_t>(d) >= values_sizes.size()) return false;
  }
  auto r = std::make_shared<ReduceReplay>();
  r->kind = *parsed;
  r->pieces = std::move(pieces);
  r->values_sizes = std::move(values_sizes);
  if (row_kernels) {  // each box as ops/reductions._values takes it: the row kernels over its sticks
    r->row_kernels = true;
    r->out_dtype = *out_dtype;
    r->reduced = order;
    std::sort(r->reduced.begin(), r->reduced.end());
  }
  r->order = std::move(order);
  r->out = std::move(out);
  return offer_replay(std::move(r), "aten::" + kind, {{0, x}});
}

}  // namespace torch_layouts
