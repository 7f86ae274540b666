// Python bindings of the runtime (torch_layouts._C). Kept to bindings only.
#include <ATen/Context.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include "arithmetic_runs.h"
#include "backend_meta.h"
#include "column_sums.h"
#include "device_guard.h"
#include "device_memory.h"
#include "dma_executor.h"
#include "dma_tiles.h"
#include "embedding_rows.h"
#include "gemm_recipe.h"
#include "dropout_recipe.h"
#include "fill_recipe.h"
#include "foreach_recipe.h"
#include "reduce_recipe.h"
#include "view_backward_recipe.h"
#include "generator.h"
#include "int64_format.h"
#include "kernel_front.h"
#include "layout_moves.h"
#include "layout_records.h"
#include "pointwise.h"
#include "nll_loss_rows.h"
#include "row_kernels.h"
#include "isa_tables.h"
#include "row_math.h"
#include "row_recipes.h"
#include "runtime_stats.h"
#include "tensor_impl.h"
#include "tile_gemm.h"
#include "tile_tuning.h"
#include "view_copies.h"
#include "view_offsets.h"

namespace py = pybind11;
using namespace torch_layouts;
// A GEMM operand's dim groups: (batch dims, row dims, column dims).
using GemmGroups = std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>>;

namespace {

// A (sizes, strides, offset) tuple as a BufferView.
BufferView buffer_view(const py::handle& v) {
  auto t = py::cast<py::tuple>(v);
  TORCH_CHECK_VALUE(t.size() == 3, "a buffer view is (sizes, strides, offset)");
  return BufferView{py::cast<std::vector<int64_t>>(t[0]), py::cast<std::vector<int64_t>>(t[1]), py::cast<int64_t>(t[2])};
}

// A copy's source and destination views, where both are given.
std::optional<std::pair<BufferView, BufferView>> copy_views(const py::object& src, const py::object& dst) {
  if (src.is_none() || dst.is_none()) return std::nullopt;
  return std::make_pair(buffer_view(src), buffer_view(dst));
}

// [(view, view), ...] as pairs of BufferViews (a copy's pieces); `what` names a malformed pair.
std::vector<std::pair<BufferView, BufferView>> view_pairs(const py::handle& pieces, const char* what) {
  std::vector<std::pair<BufferView, BufferView>> views;
  for (const auto& piece : py::cast<py::list>(pieces)) {
    auto pair = py::cast<py::tuple>(piece);
    TORCH_CHECK_VALUE(pair.size() == 2, what);
    views.emplace_back(buffer_view(pair[0]), buffer_view(pair[1]));
  }
  return views;
}

// "move" or "empty", the kind of a kept layout record.
KeptKind kept_kind(const std::string& kind) {
  TORCH_CHECK_VALUE(kind == "move" || kind == "empty", "a kept record's kind is 'move' or 'empty', got '", kind, "'");
  return kind == "move" ? KeptKind::Move : KeptKind::Empty;
}

std::optional<c10::IntArrayRef> optional_ref(const std::optional<std::vector<int64_t>>& v) {
  if (!v) return std::nullopt;
  return c10::IntArrayRef(*v);
}

std::optional<BufferView> optional_view(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  return buffer_view(v);
}

// (layout record, [(target view, source view), ...]) as a Placed; None stays absent.
std::optional<Placed> placed(const py::object& p) {
  if (p.is_none()) return std::nullopt;
  auto t = py::cast<py::tuple>(p);
  TORCH_CHECK_VALUE(t.size() == 2, "a placement is (layout record, pieces)");
  return Placed{py::cast<std::shared_ptr<BoundLayout>>(t[0]),
                view_pairs(t[1], "a placement piece is (target view, source view)")};
}

std::shared_ptr<BoundLayout> make_bound_layout(py::object layout, std::vector<int64_t> base_size,
                                             std::vector<int64_t> base_stride, at::ScalarType dtype,
                                             int64_t device_numel, int64_t storage_nbytes, py::object h2d,
                                             py::object d2h, py::object padding, py::object pad_value,
                                             bool identity, py::object address) {
  TORCH_CHECK_VALUE(base_size.size() == base_stride.size(), "base size and stride differ in length");
  const int64_t esize = static_cast<int64_t>(c10::elementSize(dtype));
  TORCH_CHECK_VALUE(device_numel >= 0 && storage_nbytes >= 0 && device_numel <= storage_nbytes / esize,
                    "storage of ", storage_nbytes, " bytes cannot hold ", device_numel, " device elements of ",
                    esize, " bytes");
  for (const auto d : base_size) TORCH_CHECK_VALUE(d >= 0, "base size ", c10::IntArrayRef(base_size), " is negative");
  auto info = std::make_shared<BoundLayout>();
  info->layout = std::make_shared<PyHandle>(layout.ptr());
  info->base_size = std::move(base_size);
  info->base_stride = std::move(base_stride);
  info->dtype = dtype;
  info->device_numel = device_numel;
  info->storage_nbytes = storage_nbytes;
  info->h2d = nests_from_python(h2d);
  info->d2h = nests_from_python(d2h);
  info->padding = fills_from_python(padding);
  if (py::isinstance<py::bool_>(pad_value)) {
    info->pad_value = c10::Scalar(pad_value.cast<bool>());
  } else if (py::isinstance<py::int_>(pad_value)) {
    info->pad_value = c10::Scalar(pad_value.cast<int64_t>());
  } else {
    info->pad_value = c10::Scalar(pad_value.cast<double>());
  }
  info->identity = identity;
  info->address = address_from_python(address);
  check_address(info->address, info->base_size);
  return info;
}

py::object layout_object(const at::Tensor& t) {
  LayoutPtr layout = t.is_privateuseone() ? layout_of(t) : nullptr;
  if (!layout) return py::none();
  return py::reinterpret_borrow<py::object>(layout->layout->get());
}

void run_nests_py(py::object nests, const at::Tensor& dst, const at::Tensor& src, const std::string& split) {
  TORCH_CHECK_VALUE(dst.is_cpu() && src.is_cpu() && dst.dim() == 1 && src.dim() == 1 && dst.is_contiguous() &&
                        src.is_contiguous(),
                    "run_nests needs 1-D contiguous CPU buffers");
  TORCH_CHECK_VALUE(dst.element_size() == src.element_size(), "run_nests buffers differ in element size");
  TORCH_CHECK_VALUE(split == "source" || split == "destination",
                    "run_nests splits its work by the 'source' or the 'destination', got '", split, "'");
  auto parsed = nests_from_python(nests);
  py::gil_scoped_release release;
  run_nests(parsed, dst.mutable_data_ptr(), dst.numel(), src.const_data_ptr(), src.numel(), dst.element_size(),
            split == "source" ? Split::kSource : Split::kDestination);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<BoundLayout, std::shared_ptr<BoundLayout>>(m, "BoundLayout")
      .def(py::init(&make_bound_layout))
      .def_property_readonly("layout", [](const BoundLayout& i) {
        return py::reinterpret_borrow<py::object>(i.layout->get());
      })
      .def_readonly("base_size", &BoundLayout::base_size)
      .def_readonly("base_stride", &BoundLayout::base_stride)
      .def_readonly("device_numel", &BoundLayout::device_numel)
      .def_readonly("storage_nbytes", &BoundLayout::storage_nbytes)
      .def_readonly("identity", &BoundLayout::identity);

  m.def("_set_layout_records", &set_layout_records);
  m.def("_set_converter", &set_converter);
  m.def("_set_view_copier", &set_view_copier);
  m.def("_keep_view_copy", [](const at::Tensor& dst, const at::Tensor& src, const py::list& boxes,
                              std::optional<std::pair<UntiledDims, UntiledDims>> untiled) {
    std::vector<ViewCopyBox> parsed;
    for (const auto& item : boxes) {
      auto t = py::cast<py::tuple>(item);
      TORCH_CHECK_VALUE(t.size() == 5, "a view copy box is (sizes, dst_strides, src_strides, dst_offset, src_offset)");
      parsed.push_back(ViewCopyBox{py::cast<std::vector<int64_t>>(t[0]), py::cast<std::vector<int64_t>>(t[1]),
                                   py::cast<std::vector<int64_t>>(t[2]), py::cast<int64_t>(t[3]),
                                   py::cast<int64_t>(t[4])});
    }
    keep_view_copy(dst, src, std::move(parsed), std::move(untiled));
  }, py::arg("dst"), py::arg("src"), py::arg("boxes"), py::arg("untiled") = py::none());
  m.def("_replay_view_copy", &replay_view_copy);
  m.def("_keep_staging", &keep_staging);
  m.def("_keep_restaging", &keep_restaging);
  m.def("_kept_view_copies", &kept_view_copies);
  m.def("_register_kernel", &register_front, py::arg("name"), py::arg("fn"), py::arg("counted") = true);
  m.def(
      "_offer_recipe",
      [](const std::vector<std::optional<at::Tensor>>& args, const py::list& reads, const py::object& out,
         const py::object& result_view, const std::vector<std::pair<int64_t, py::object>>& overrides,
         const std::string& compute, const std::vector<std::vector<std::pair<int64_t, int64_t>>>& boxes,
         const py::list& pieces, const std::vector<std::shared_ptr<BoundLayout>>& staged_outs,
         const std::vector<int64_t>& dense, int64_t classes, const std::vector<bool>& kept,
         const std::optional<std::vector<std::pair<int64_t, py::object>>>& whole_if) {
        // out: None, a record or a list of records; result_view: None, a (sizes, strides, offset)
        // tuple or a list of them
        std::vector<LayoutPtr> outs;
        if (py::isinstance<py::list>(out)) {
          for (const auto& o : py::cast<py::list>(out)) outs.push_back(py::cast<std::shared_ptr<BoundLayout>>(o));
        } else if (!out.is_none()) {
          outs.push_back(py::cast<std::shared_ptr<BoundLayout>>(out));
        }
        std::vector<BufferView> results;
        if (py::isinstance<py::list>(result_view)) {
          for (const auto& v : py::cast<py::list>(result_view)) results.push_back(buffer_view(v));
        } else if (!result_view.is_none()) {
          results.push_back(buffer_view(result_view));
        }
        auto parse = [](const py::list& items) {
          std::vector<RecipeRead> parsed;
          for (const auto& item : items) {
            auto t = py::cast<py::tuple>(item);
            TORCH_CHECK_VALUE(t.size() == 4 || t.size() == 6,
                              "a recipe read is (argument, sizes, strides, offset[, staged record, restickify bytes])");
            parsed.push_back(RecipeRead{py::cast<int64_t>(t[0]), BufferView{py::cast<std::vector<int64_t>>(t[1]),
                                        py::cast<std::vector<int64_t>>(t[2]), py::cast<int64_t>(t[3])}});
            if (t.size() == 6) {
              parsed.back().staged = py::cast<std::shared_ptr<BoundLayout>>(t[4]);
              TORCH_CHECK_VALUE(parsed.back().staged, "a staged recipe read needs its record, got None");
              parsed.back().restickify_bytes = py::cast<int64_t>(t[5]);
            }
          }
          return parsed;
        };
        std::vector<std::pair<std::vector<RecipeRead>, std::vector<BufferView>>> parts;
        for (const auto& piece : pieces) {  // (reads, result views)
          auto pair = py::cast<py::tuple>(piece);
          TORCH_CHECK_VALUE(pair.size() == 2, "a recipe piece is (reads, result views)");
          std::vector<BufferView> views;
          for (const auto& v : py::cast<py::list>(pair[1])) views.push_back(buffer_view(v));
          parts.emplace_back(parse(py::cast<py::list>(pair[0])), std::move(views));
        }
        std::vector<RecipeRead> parsed = parse(reads);
        TORCH_CHECK_VALUE(dense.empty() || dense.size() == parsed.size(), "dense gives ", dense.size(),
                          " blocks for ", parsed.size(), " recipe reads");
        for (size_t i = 0; i < dense.size(); ++i) {
          TORCH_CHECK_VALUE(dense[i] < static_cast<int64_t>(parsed[i].view.sizes.size()), "dense block from dim ",
                            dense[i], " of a view of ", parsed[i].view.sizes.size(), " dims");
          parsed[i].dense_from = dense[i];
        }
        std::optional<std::vector<std::pair<int64_t, c10::Scalar>>> scalars;
        if (whole_if) {  // (position, Python bool, int or float)
          scalars.emplace();
          for (const auto& [i, v] : *whole_if) {
            TORCH_CHECK_VALUE(py::isinstance<py::bool_>(v) || py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v),
                              "whole_if values are Python numbers, got ", std::string(py::str(v.get_type())));
            scalars->emplace_back(i, py::isinstance<py::bool_>(v)  ? c10::Scalar(py::cast<bool>(v))
                                     : py::isinstance<py::int_>(v) ? c10::Scalar(py::cast<int64_t>(v))
                                                                   : c10::Scalar(py::cast<double>(v)));
          }
        }
        return offer_recipe(args, std::move(parsed), std::move(outs), std::move(results), overrides, compute, boxes,
                            std::move(parts), {staged_outs.begin(), staged_outs.end()}, classes, kept, scalars);
      },
      py::arg("args"), py::arg("reads"), py::arg("out"), py::arg("result_view"), py::arg("overrides"),
      py::arg("compute"), py::arg("boxes") = std::vector<std::vector<std::pair<int64_t, int64_t>>>{},
      py::arg("pieces") = py::list(), py::arg("staged_outs") = std::vector<std::shared_ptr<BoundLayout>>{},
      py::arg("dense") = std::vector<int64_t>{}, py::arg("classes") = -1, py::arg("kept") = std::vector<bool>{},
      py::arg("whole_if") = py::none());
  m.def(
      "_offer_clone_recipe",
      [](const at::Tensor& src, std::shared_ptr<BoundLayout> out, const py::list& pieces) {
        return offer_clone_recipe(src, std::move(out), view_pairs(pieces, "a clone piece is (source view, result view)"));
      },
      py::arg("src"), py::arg("out"), py::arg("pieces") = py::list());
  m.def(
      "_offer_concat_recipe",
      [](const std::string& op, const std::vector<at::Tensor>& inputs, std::shared_ptr<BoundLayout> out,
         const py::list& pieces) {
        std::vector<std::vector<std::pair<BufferView, BufferView>>> parts;
        for (const auto& part : pieces) parts.push_back(view_pairs(part, "a concat piece is (input view, result view)"));
        return offer_concat_recipe(op, inputs, std::move(out), std::move(parts));
      },
      py::arg("op"), py::arg("inputs"), py::arg("out"), py::arg("pieces"));
  m.def(
      "_keep_conversion",
      [](const at::Tensor& src, at::ScalarType dtype, std::shared_ptr<BoundLayout> out, const py::list& pieces) {
        return keep_conversion(src, dtype, std::move(out),
                               view_pairs(pieces, "a conversion piece is (source view, result view)"));
      },
      py::arg("src"), py::arg("dtype"), py::arg("out"), py::arg("pieces"));
  m.def("_offer_softmax", [](const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own,
                             const py::list& rows, std::shared_ptr<BoundLayout> out, int64_t width, int64_t length,
                             bool log, bool safe) {
    std::vector<BufferView> views;
    for (const auto& v : rows) views.push_back(buffer_view(v));
    return offer_softmax(op, own, std::move(views), std::move(out), width, length, log, safe);
  });
  m.def("_offer_cumsum", [](const at::Tensor& input, const py::object& input_rows, std::shared_ptr<BoundLayout> out,
                            const py::object& out_rows, int64_t width, int64_t length) {
    return offer_cumsum(input, buffer_view(input_rows), std::move(out), buffer_view(out_rows), width, length);
  });
  m.def("_offer_layer_norm", [](const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                const std::optional<at::Tensor>& bias, const py::object& input_rows,
                                const py::object& weight_cols, const py::object& bias_cols,
                                std::shared_ptr<BoundLayout> out, const py::object& out_rows, int64_t rows,
                                int64_t width, int64_t length, const py::object& stats, std::optional<double> rms_eps) {
    std::optional<Placed> where = placed(stats);
    TORCH_CHECK_VALUE(where.has_value(), "layer norm's offer needs where mean and rstd go");
    return offer_layer_norm(input, weight, bias, buffer_view(input_rows), optional_view(weight_cols),
                            optional_view(bias_cols), std::move(out), buffer_view(out_rows), rows, width, length,
                            std::move(*where), rms_eps);
  }, py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("input_rows"), py::arg("weight_cols"),
        py::arg("bias_cols"), py::arg("out"), py::arg("out_rows"), py::arg("rows"), py::arg("width"), py::arg("length"),
        py::arg("stats"), py::arg("rms_eps") = py::none());
  m.def("_offer_layer_norm_backward",
        [](const std::vector<std::pair<int64_t, at::Tensor>>& own, const py::object& grad_rows,
           const py::object& input_rows, const py::object& mean_values, const py::object& rstd_values,
           const py::object& weight_cols, std::shared_ptr<BoundLayout> grad_input, const py::object& grad_input_rows,
           const py::object& grad_weight, const py::object& grad_bias, int64_t length, int64_t width) {
          return offer_layer_norm_backward(own, buffer_view(grad_rows), buffer_view(input_rows),
                                           optional_view(mean_values), buffer_view(rstd_values),
                                           optional_view(weight_cols), std::move(grad_input),
                                           optional_view(grad_input_rows), placed(grad_weight), placed(grad_bias),
                                           length, width);
        });
  m.def("_offer_gemm", [](const std::string& op, const std::vector<std::pair<int64_t, at::Tensor>>& own,
                          const py::tuple& a, const py::tuple& b, const py::object& bias,
                          std::shared_ptr<BoundLayout> c, std::vector<int64_t> c_sizes, const GemmGroups& c_groups,
                          int64_t m, int64_t n, int64_t k, double alpha, double beta,
                          std::vector<int64_t> restickify_bytes) {
    auto read = [](const py::tuple& t) {  // (argument, view, groups, staging layout or None)
      TORCH_CHECK_VALUE(t.size() == 4, "a GEMM operand is (argument, view, groups, staging layout or None)");
      auto groups = py::cast<GemmGroups>(t[2]);
      return GemmRead{py::cast<int64_t>(t[0]), buffer_view(t[1]), std::get<0>(groups), std::get<1>(groups),
                      std::get<2>(groups), py::cast<std::shared_ptr<BoundLayout>>(t[3])};
    };
    std::optional<std::pair<int64_t, BufferView>> row;
    if (!bias.is_none()) {
      auto t = py::cast<py::tuple>(bias);
      row.emplace(py::cast<int64_t>(t[0]), buffer_view(t[1]));
    }
    return offer_gemm(op, own, read(a), read(b), std::move(row), std::move(c), std::move(c_sizes),
                      std::get<0>(c_groups), std::get<1>(c_groups), std::get<2>(c_groups), m, n, k, alpha, beta,
                      std::move(restickify_bytes));
  });
  m.def("_offer_dropout", [](const at::Tensor& x, const py::object& x_view, std::vector<int64_t> draws_sizes,
                             std::vector<int64_t> draws_strides, std::shared_ptr<BoundLayout> values,
                             std::shared_ptr<BoundLayout> mask,
                             std::vector<std::vector<std::pair<int64_t, int64_t>>> boxes) {
    return offer_dropout(x, buffer_view(x_view), std::move(draws_sizes), std::move(draws_strides), std::move(values),
                         std::move(mask), std::move(boxes));
  });
  m.def("_offer_dropout_backward", [](const at::Tensor& grad, const at::Tensor& mask, const py::object& grad_view,
                                      const py::object& mask_view, std::shared_ptr<BoundLayout> out,
                                      const py::object& out_view) {
    return offer_dropout_backward(grad, mask, buffer_view(grad_view), buffer_view(mask_view), std::move(out),
                                  buffer_view(out_view));
  });
  m.def("_offer_foreach", [](const std::string& op, const std::vector<std::pair<int64_t, std::vector<at::Tensor>>>& lists,
                             const py::sequence& views,
                             const std::vector<std::tuple<int64_t, int64_t, std::shared_ptr<BoundLayout>>>& copies,
                             std::vector<int64_t> padded) {
    std::vector<std::vector<BufferView>> parsed_views;
    for (const auto& list : views) {
      parsed_views.emplace_back();
      for (const auto& v : py::cast<py::sequence>(list)) parsed_views.back().push_back(buffer_view(v));
    }
    std::vector<ForeachCopy> parsed;
    for (const auto& [arg, index, layout] : copies) parsed.push_back(ForeachCopy{arg, index, layout});
    return offer_foreach(op, lists, std::move(parsed_views), std::move(parsed), std::move(padded));
  });
  m.def("_offer_foreach_unary", [](const std::string& op, const std::vector<at::Tensor>& tensors, const py::sequence& views,
                                   std::vector<std::shared_ptr<BoundLayout>> results, const std::string& out_op,
                                   std::vector<int64_t> padded) {
    std::vector<BufferView> parsed;
    for (const auto& v : views) parsed.push_back(buffer_view(v));
    return offer_foreach_unary(op, tensors, std::move(parsed), {results.begin(), results.end()}, out_op,
                               std::move(padded));
  });
  m.def(
      "_offer_reduce",
      [](const std::string& kind, const at::Tensor& x, const py::object& input, std::vector<int64_t> order,
         std::optional<at::ScalarType> dtype, std::shared_ptr<BoundLayout> out, const py::object& result, int64_t count,
         std::optional<at::ScalarType> out_dtype, bool row_kernels, int64_t length) {
        return offer_reduce(kind, x, buffer_view(input), std::move(order), dtype, std::move(out), buffer_view(result),
                            count, out_dtype, row_kernels, length);
      },
      py::arg("kind"), py::arg("x"), py::arg("input"), py::arg("order"), py::arg("dtype"), py::arg("out"),
      py::arg("result"), py::arg("count") = 1, py::arg("out_dtype") = py::none(), py::arg("row_kernels") = false,
      py::arg("length") = -1);
  m.def("_offer_reduce_pieces", [](const std::string& kind, const at::Tensor& x, const py::list& pieces,
                                   std::vector<int64_t> values_sizes, std::vector<int64_t> order,
                                   std::shared_ptr<BoundLayout> out, std::optional<c10::ScalarType> out_dtype,
                                   bool row_kernels) {
    std::vector<ReducePiece> parsed;
    for (const auto& piece : pieces) {  // (input view, region view, result view, writes)
      auto t = py::cast<py::tuple>(piece);
      TORCH_CHECK_VALUE(t.size() == 4, "a reduction piece is (input view, region view, result view, writes)");
      parsed.push_back(ReducePiece{buffer_view(t[0]), buffer_view(t[1]), buffer_view(t[2]), py::cast<bool>(t[3])});
    }
    return offer_reduce_pieces(kind, x, std::move(parsed), std::move(values_sizes), std::move(order), std::move(out),
                               out_dtype, row_kernels);
  }, py::arg("kind"), py::arg("x"), py::arg("pieces"), py::arg("values_sizes"), py::arg("order"), py::arg("out"),
        py::arg("out_dtype") = py::none(), py::arg("row_kernels") = false);
  m.def(
      "_offer_view_backward",
      [](const std::string& op, const at::Tensor& grad, std::shared_ptr<BoundLayout> out, std::vector<int64_t> sizes,
         std::vector<int64_t> strides, int64_t offset, const py::object& grad_read, const py::object& view_read) {
        return offer_view_backward(op, grad, std::move(out), std::move(sizes), std::move(strides), offset,
                                   copy_views(grad_read, view_read));
      },
      py::arg("op"), py::arg("grad"), py::arg("out"), py::arg("sizes"), py::arg("strides"), py::arg("offset"),
      py::arg("grad_read") = py::none(), py::arg("view_read") = py::none());
  m.def("_offer_fill", [](const std::string& op, const at::Tensor& x, const py::list& boxes, bool restore_padding) {
    std::vector<BufferView> parsed;
    for (const auto& b : boxes) parsed.push_back(buffer_view(b));
    return offer_fill(op, x, std::move(parsed), restore_padding);
  });
  m.def("_restickify_counts", &restickify_counts);
  m.def("_kept_recipes", &kept_recipes);
  m.def("_forget_recipes", &forget_recipes);
  m.def("_kernel_counts", &kernel_counts);
  m.def("_reset_kernel_counts", &reset_kernel_counts);
  m.def("_set_strict", &set_strict);
  m.def("_forget_view_copies", &forget_view_copies);
  m.def("_empty_with_layout", [](std::shared_ptr<BoundLayout> info, c10::DeviceIndex device) {
    return new_device_tensor(info, c10::Device(c10::DeviceType::PrivateUse1, device));
  });
  m.def("_layout_of", &layout_object);
  // runtime/tensor_methods.py: the records kept per layout object, and Tensor.to's C method.
  m.def("_kept_record", [](const std::string& kind, const py::object& spec, std::vector<int64_t> size,
                           std::optional<std::vector<int64_t>> stride, at::ScalarType dtype) -> py::object {
    LayoutPtr record = kept_record(kept_kind(kind), spec.ptr(), size, optional_ref(stride), dtype);
    if (!record) return py::none();
    return py::cast(std::const_pointer_cast<BoundLayout>(record));
  });
  m.def("_keep_record", [](const std::string& kind, py::object spec, std::vector<int64_t> size,
                           std::optional<std::vector<int64_t>> stride, at::ScalarType dtype,
                           std::shared_ptr<BoundLayout> record) {
    keep_record(kept_kind(kind), std::move(spec), size, optional_ref(stride), dtype, std::move(record));
  });
  m.def("_kept_records", &kept_records);
  m.def("_clear_kept_records", &clear_kept_records);
  m.def("_tensor_to_method", &tensor_to_method);
  m.def("_bound_layout_of", [](const at::Tensor& t) -> py::object {
    LayoutPtr layout = t.is_privateuseone() ? layout_of(t) : nullptr;
    if (!layout) return py::none();
    return py::cast(std::const_pointer_cast<BoundLayout>(layout));
  });
  m.def("_geometry_key", [](const at::Tensor& t) -> py::object {  // see ops/operands.geometry_key
    std::vector<int64_t> key = geometry_key(t);
    if (key.empty()) return py::none();
    return py::tuple(py::cast(key));
  });
  // ops/foreach.py: one key for the tensors of a _foreach call's lists (each tensor's geometry key
  // and whether it shares the first list's tensor's buffer), None if one carries no layout; and
  // views of the tensors' buffers, (sizes, strides, offset) each.
  m.def("_foreach_key", [](const std::vector<std::vector<at::Tensor>>& lists) -> py::object {
    // how many lists of how many tensors: [a, b] and [a], [b] are different calls
    std::vector<int64_t> key{static_cast<int64_t>(lists.size()), lists.empty() ? 0 : static_cast<int64_t>(lists[0].size())};
    for (size_t k = 0; k < lists.size(); ++k) {
      TORCH_CHECK_VALUE(lists[k].size() == lists[0].size(), "_foreach lists differ in length: ", lists[0].size(),
                        " and ", lists[k].size());
      for (size_t i = 0; i < lists[k].size(); ++i) {
        const at::Tensor& t = lists[k][i];
        std::vector<int64_t> g = t.defined() && t.is_privateuseone() ? geometry_key(t) : std::vector<int64_t>{};
        if (g.empty()) return py::none();
        key.push_back(static_cast<int64_t>(g.size()));
        key.insert(key.end(), g.begin(), g.end());
        key.push_back(k > 0 && t.storage().data() == lists[0][i].storage().data());
      }
    }
    return py::tuple(py::cast(key));
  });
  m.def("_raw_views", [](const std::vector<at::Tensor>& tensors, const py::sequence& views) {
    TORCH_CHECK_VALUE(tensors.size() == views.size(), "_raw_views: ", tensors.size(), " tensors, ", views.size(),
                      " views");
    std::vector<at::Tensor> out;
    out.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      TORCH_CHECK_VALUE(tensors[i].is_privateuseone(), "expected a spyre tensor, got one on ", tensors[i].device());
      out.push_back(view_of(tensors[i], buffer_view(views[i])));
    }
    return out;
  });
  m.def("_impl_carries_layout", [](const at::Tensor& t) {
    auto* impl = dynamic_cast<SpyreTensorImpl*>(t.unsafeGetTensorImpl());
    return impl != nullptr && impl->layout() != nullptr;
  });
  m.def("_attach_layout", [](const at::Tensor& t, std::shared_ptr<BoundLayout> info) { attach_layout(t, info); });
  m.def("_adopt_buffer", &adopt_buffer);
  m.def("_raw_buffer", [](const at::Tensor& t) {
    TORCH_CHECK_VALUE(t.is_privateuseone(), "expected a spyre tensor, got one on ", t.device());
    LayoutPtr layout = layout_of(t);
    return layout ? raw_buffer(t, layout->dtype, layout->device_numel) : raw_buffer(t, t.scalar_type());
  });
  m.def(
      "_raw_view",
      [](const at::Tensor& t, std::vector<int64_t> sizes, std::optional<std::vector<int64_t>> strides,
         int64_t offset) {
        TORCH_CHECK_VALUE(t.is_privateuseone(), "expected a spyre tensor, got one on ", t.device());
        if (!strides) {  // contiguous
          strides.emplace(sizes.size());
          for (size_t d = sizes.size(), step = 1; d-- > 0;) {
            (*strides)[d] = static_cast<int64_t>(step);
            step *= static_cast<size_t>(std::max<int64_t>(sizes[d], 1));
          }
        }
        return raw_view(t, sizes, *strides, offset);
      },
      py::arg("t"), py::arg("sizes"), py::arg("strides") = py::none(), py::arg("offset") = 0);
  m.def("_to_host", &to_host, py::call_guard<py::gil_scoped_release>());
  m.def("_fill_padding", [](const at::Tensor& t) {
    LayoutPtr layout = t.is_privateuseone() ? layout_of(t) : nullptr;
    TORCH_CHECK_VALUE(layout != nullptr, "expected a spyre tensor with a layout");
    fill_padding(t, *layout);
  });
  m.def("_run_nests", &run_nests_py, py::arg("nests"), py::arg("dst"), py::arg("src"), py::arg("split") = "source");
  m.def("_set_stream_bytes", &set_stream_bytes);
  m.def("_line_blocks_available", &line_blocks_available);
  m.def("_set_line_blocks", &set_line_blocks);
  // Tile tuning (tile_tuning.h).
  m.def("_set_tile_tuning", &set_tile_tuning);
  m.def(
      "_force_tile_shape",
      [](int64_t a, int64_t b, bool extended, bool plain) {
        force_tile_shape(extended ? TileKind::kExtended : TileKind::kTiles, a, b, plain);
      },
      py::arg("a"), py::arg("b"), py::arg("extended") = false, py::arg("plain") = false);
  m.def("_tile_trial_calls", &tile_trial_calls);
  m.def("_forget_tile_tunings", &forget_tile_tunings);
  m.def("_tile_tunings", [] {
    py::list out;
    for (const TuningState& t : tile_tunings()) {
      py::list shapes;
      for (const TileShape& s : t.shapes) shapes.append(py::make_tuple(s.a, s.b, s.plain));
      py::dict d;
      d["shapes"] = shapes;
      d["best"] = t.best;
      d["chosen"] = t.chosen >= 0 ? py::object(shapes[t.chosen]) : py::object(py::none());
      out.append(d);
    }
    return out;
  });
  m.def("_view_offsets", [](std::shared_ptr<BoundLayout> info, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t offset) { return view_offsets(*info, sizes, strides, offset); });

  // Row kernels (row_kernels.h): compute only, so the GIL is released.
  auto nogil = py::call_guard<py::gil_scoped_release>();
  m.def("_embedding_backward_rows", &embedding_backward_rows, py::arg("grad"), py::arg("indices"),
        py::arg("padding_idx"), py::arg("grad_weight"));
  m.def("_nll_loss_rows", &nll_loss_rows, py::arg("self"), py::arg("target"), py::arg("reduction"),
        py::arg("ignore_index"), py::arg("output"), py::arg("total_weight"), py::arg("classes") = -1);
  m.def("_nll_loss_backward_rows", &nll_loss_backward_rows, py::arg("grad_output"), py::arg("target"),
        py::arg("reduction"), py::arg("ignore_index"), py::arg("total_weight"), py::arg("grad_input"),
        py::arg("classes") = -1);
  m.def("_rows_softmax", &rows_softmax, py::arg("x"), py::arg("out"), py::arg("width"), py::arg("log"),
        py::arg("safe"), py::arg("length") = -1, nogil);
  m.def("_rows_softmax_backward", &rows_softmax_backward, py::arg("grad"), py::arg("output"), py::arg("out"),
        py::arg("width"), py::arg("log"), py::arg("length") = -1, nogil);
  m.def("_rows_layer_norm", &rows_layer_norm, py::arg("x"), py::arg("out"), py::arg("weight"), py::arg("bias"),
        py::arg("eps"), py::arg("mean"), py::arg("rstd"), py::arg("width"), py::arg("length") = -1,
        py::arg("rms") = false, nogil);
  m.def("_rows_layer_norm_backward", &rows_layer_norm_backward, py::arg("grad"), py::arg("x"), py::arg("mean"),
        py::arg("rstd"), py::arg("weight"), py::arg("grad_input"), py::arg("grad_weight"), py::arg("grad_bias"),
        py::arg("width"), py::arg("length") = -1, py::arg("rms") = false, nogil);
  m.def("_rows_cumsum", &rows_cumsum, py::arg("x"), py::arg("out"), py::arg("width"), py::arg("length") = -1, nogil);
  // sparse: (a contiguous float32 CPU buffer, offset, step, pad) written whole instead of out.
  using Sparse = std::optional<std::tuple<at::Tensor, int64_t, int64_t, double>>;
  const auto sparse_rows = [](const Sparse& s) -> std::optional<SparseRows> {
    if (!s) return std::nullopt;
    const at::Tensor& buffer = std::get<0>(*s);
    TORCH_CHECK_VALUE(buffer.device().is_cpu() && buffer.scalar_type() == at::kFloat && buffer.is_contiguous(),
                      "a sparse result must be a contiguous float32 CPU buffer, got ", buffer.scalar_type(), " on ",
                      buffer.device());
    return SparseRows{buffer.data_ptr<float>(), buffer.numel(), std::get<1>(*s), std::get<2>(*s),
                      static_cast<float>(std::get<3>(*s))};
  };
  m.def(
      "_rows_sum",
      [sparse_rows](const at::Tensor& x, const at::Tensor& out, int64_t width, int64_t divisor, const Sparse& sparse,
                    int64_t length) {
        const std::optional<SparseRows> s = sparse_rows(sparse);
        rows_sum(x, out, width, divisor, s ? &*s : nullptr, length);
      },
      py::arg("x"), py::arg("out"), py::arg("width"), py::arg("divisor") = 1, py::arg("sparse") = py::none(),
      py::arg("length") = -1, nogil);
  m.def(
      "_rows_extreme",
      [sparse_rows](const at::Tensor& x, const at::Tensor& out, int64_t width, bool max, const Sparse& sparse,
                    int64_t length) {
        const std::optional<SparseRows> s = sparse_rows(sparse);
        rows_extreme(x, out, width, max, s ? &*s : nullptr, length);
      },
      py::arg("x"), py::arg("out"), py::arg("width"), py::arg("max"), py::arg("sparse") = py::none(),
      py::arg("length") = -1, nogil);
  m.def("_rows_arg_extreme", &rows_arg_extreme, py::arg("x"), py::arg("indices"), py::arg("values"), py::arg("width"),
        py::arg("length"), py::arg("max"), nogil);
  m.def(
      "_columns_sum",
      [](const at::Tensor& v, const std::vector<int64_t>& reduced, const at::Tensor& out) {
        return columns_sum(v, reduced, out);
      },
      py::arg("v"), py::arg("reduced"), py::arg("out"), nogil);
  m.def(
      "_arithmetic_runs",
      [](const std::string& op, const at::Tensor& self, const at::Tensor& other, const at::Tensor& out,
         const py::object& alpha) {
        const std::optional<Arithmetic> a = arithmetic_of("aten::" + op + ".out");
        TORCH_CHECK_VALUE(a, "op='", op, "' is not one of add, sub, mul, div");
        // alpha as the dispatcher passes it: an int stays an int (ATen negates sub's before the cast)
        const c10::IValue scale = alpha.is_none() ? c10::IValue()
                                  : py::isinstance<py::int_>(alpha) ? c10::IValue(alpha.cast<int64_t>())
                                                                    : c10::IValue(alpha.cast<double>());
        py::gil_scoped_release released;
        return arithmetic_runs(*a, self, other, out, scale);
      },
      py::arg("op"), py::arg("self"), py::arg("other"), py::arg("out"), py::arg("alpha") = py::none());
  m.def("_scaled_product", &scaled_product, nogil);
  m.def("_dropout_apply", &dropout_apply, nogil);
  m.def("_rows_set_math", &rows_set_math);
  m.def("_isa_table_sets", &isa_table_sets);
  m.def("_set_isa_tables", &set_isa_tables);
  m.def("_rows_math_sets", &row_math_sets);
  m.def(
      "_tile_gemm",
      [](const at::Tensor& c, const GemmGroups& cg, const at::Tensor& a, const GemmGroups& ag, const at::Tensor& b,
         const GemmGroups& bg, int64_t m, int64_t n, int64_t k, double alpha, bool accumulate,
         const std::optional<at::Tensor>& bias, double beta) {
        tile_gemm({c, std::get<0>(cg), std::get<1>(cg), std::get<2>(cg)},
                  {a, std::get<0>(ag), std::get<1>(ag), std::get<2>(ag)},
                  {b, std::get<0>(bg), std::get<1>(bg), std::get<2>(bg)}, m, n, k, alpha, accumulate, bias, beta);
      },
      py::arg("c"), py::arg("c_groups"), py::arg("a"), py::arg("a_groups"), py::arg("b"), py::arg("b_groups"),
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("alpha"), py::arg("accumulate"), py::arg("bias") = py::none(),
      py::arg("beta") = 1.0, nogil);
  m.def("_tile_gemm_available", &tile_gemm_available);
  m.def("_tile_gemm_kernels", &tile_gemm_kernels);
  m.def("_tile_gemm_set_kernel", &tile_gemm_set_kernel);

  m.def("_device_count", &device_count);
  m.def("_get_device", &current_device);
  m.def("_set_device", &set_device);
  m.def("_exchange_device", &exchange_device);
  m.def("_capacity", &device_capacity);
  m.def("_memory_stats", &memory_stats_dict);
  m.def("_reset_peak_memory_stats", &reset_peak_stats);
  m.def("_empty_cache", &empty_cache);
  m.def("_get_default_generator", [](c10::DeviceIndex device) {
    // THPGenerator_Wrap reuses the generator's Python object while it lives: the same object each call.
    return py::reinterpret_steal<py::object>(THPGenerator_Wrap(default_generator(device)));
  });

  m.def("_counters", &counters);
  m.def("_fallback_counts", &fallback_counts);
  m.def("_count_fallback", &count_fallback, py::arg("op"));
  m.def("_reset_stats", &reset_stats);
  m.def("_set_fallback_warning", &set_fallback_warning);
  m.def("_get_downcast_warning", &downcast_warning_enabled);
  m.def("_set_downcast_warning", &set_downcast_warning_enabled);
  m.def("_warn_int64_downcast", []() {
    HANDLE_TH_ERRORS  // turns the warning into a Python UserWarning (an error under -W error)
    warn_int64_downcast();
    END_HANDLE_TH_ERRORS_PYBIND
  });
  m.def("_set_fallback_warner", [](py::object warn) {
    // Kept for the life of the process: never released after the interpreter is gone.
    auto* held = new py::object(std::move(warn));
    set_fallback_warner([held](const std::string& message) {
      py::gil_scoped_acquire gil;
      (*held)(message);
    });
  });
}
