#include "gemm_recipe.h"

#include <c10/util/irange.h>

#include <mutex>

#include "tile_gemm.h"

namespace torch_layouts {
namespace {

class Gemm final : public Replay {
 public:
  GemmRead a, b;
  std::optional<std::pair<int64_t, BufferView>> bias;
  LayoutPtr c;
  std::vector<int64_t> c_sizes, c_batch, c_rows, c_cols;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 1;
  bool scaled = false;  // addmm: beta and alpha are its arguments 3 and 4
  std::vector<int64_t> restickify_bytes;

  bool accepts(c10::ArrayRef<c10::IValue> args) const override {
    return !scaled || (args[3].toScalar().toDouble() == beta && args[4].toScalar().toDouble() == alpha);
  }

  void run(c10::ArrayRef<c10::IValue> args, int64_t, std::vector<c10::IValue>& results) const override {
    for (int64_t nbytes : restickify_bytes) count_restickify(nbytes);
    auto operand = [&](const GemmRead& r) {
      const at::Tensor& t = args[r.arg].toTensor();
      if (!r.staged) return GemmOperand{borrowed_view_of(t, r.view), r.batch, r.rows, r.cols};  // t outlives the GEMM
      // a staged copy lives only in its (owning) view
      return GemmOperand{view_of(new_device_tensor(r.staged, t.device()).copy_(t), r.view), r.batch, r.rows, r.cols};
    };
    const at::Tensor& first = args[a.arg].toTensor();
    at::Tensor out = new_device_tensor(c, first.device());
    std::optional<at::Tensor> row;
    if (bias) row = borrowed_view_of(args[bias->first].toTensor(), bias->second);
    const GemmOperand oc{raw_view(out, c_sizes, c10::contiguous_strides(c_sizes), 0, /*owning=*/false), c_batch, c_rows,
                         c_cols};
    const GemmOperand oa = operand(a), ob = operand(b);
    // Every call's views have the same sizes and strides: the first call plans the GEMM for all.
    std::call_once(planned_, [&] { plan_ = plan_tile_gemm(oc, oa, ob, m, n, k); });
    run_tile_gemm(*plan_, oc.view, oa.view, ob.view, alpha, false, row, beta);
    results.emplace_back(std::move(out));
  }

 private:
  mutable std::once_flag planned_;
  mutable std::shared_ptr<const TileGemmPlan> plan_;
};

}  // namespace

bool offer_gemm(const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own, GemmRead a, GemmRead b,
                std::optional<std::pair<int64_t, BufferView>> bias, LayoutPtr c, std::vector<int64_t> c_sizes,
                std::vector<int64_t> c_batch, std::vector<int64_t> c_rows, std::vector<int64_t> c_cols, int64_t m,
                int64_t n, int64_t k, double alpha, double beta, std::vector<int64_t> restickify_bytes) {
  if (!c || !tile_gemm_available()) return false;
  auto r = std::make_shared<Gemm>();
  r->a = std::move(a);
  r->b = std::move(b);
  r->bias = std::move(bias);
  r->c = std::move(c);
  r->c_sizes = std::move(c_sizes);
  r->c_batch = std::move(c_batch);
  r->c_rows = std::move(c_rows);
  r->c_cols = std::move(c_cols);
  r->m = m;
  r->n = n;
  r->k = k;
  r->alpha = alpha;
  r->beta = beta;
  r->scaled = op == "aten::addmm";
  r->restickify_bytes = std::move(restickify_bytes);
  return offer_replay(std::move(r), op, own);
}

}  // namespace torch_layouts
