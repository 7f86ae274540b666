// The fronts of the hot schemas, registered unboxed (kernel_front.h, unboxed_front).
//
// PyTorch calls a boxed kernel by copying every argument into an IValue: each copy of a tensor
// that Python holds takes a reference, and with PyTorch's PyObject preservation the first extra
// reference increfs its Python object under the GIL (the binding released it), the stack's
// release decrefs it again: a few thousand instructions a call. These kernels take the arguments
// as the dispatcher passes them and lend them to the replay as IValues that hold no reference;
// a call no replay serves is boxed as the dispatcher would box it.
#include "kernel_front.h"  // ATen first: the op headers assume it

#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_safe_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/rsub_ops.h>
#include <ATen/ops/select_backward_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/slice_backward_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/zero_ops.h>

#include <ATen/core/boxing/impl/boxing.h>

#include <array>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace torch_layouts {
namespace {

template <class T>
constexpr bool kLent =
    std::is_same_v<std::decay_t<T>, at::Tensor> || std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>;

// An argument as an IValue: a tensor lent without a reference (given back by `give_back`).
template <class T>
c10::IValue lend(T&& value) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    return c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(value));
  } else if constexpr (std::is_same_v<std::decay_t<T>, std::optional<at::Tensor>>) {
    return value.has_value() ? lend(*value) : c10::IValue();
  } else {
    return c10::IValue(value);
  }
}

void give_back(c10::IValue& lent) {
  if (!lent.isTensor()) return;  // an absent optional tensor
  at::Tensor t = std::move(lent).toTensor();
  c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(t);
}

// A call's arguments as IValues, the tensors lent; given back however the call ends.
template <class... Args>
class LentArguments {
 public:
  explicit LentArguments(const Args&... args) : values_{lend(args)...} {}
  LentArguments(const LentArguments&) = delete;
  LentArguments& operator=(const LentArguments&) = delete;
  ~LentArguments() {
    constexpr std::array<bool, sizeof...(Args)> lent{kLent<Args>...};
    for (size_t i = 0; i < values_.size(); ++i) {
      if (lent[i]) give_back(values_[i]);
    }
  }
  c10::ArrayRef<c10::IValue> values() const { return values_; }

 private:
  std::array<c10::IValue, sizeof...(Args)> values_;
};

template <class T>
struct IsTensorTuple : std::false_type {};
template <class... T>
struct IsTensorTuple<std::tuple<T...>> : std::bool_constant<(std::is_same_v<T, at::Tensor> && ...)> {};

template <class Tuple, size_t... I>
Tuple tensor_tuple(std::vector<c10::IValue>& results, std::index_sequence<I...>) {
  return Tuple(std::move(results[I]).toTensor()...);
}

template <class Sig>
class UnboxedFront;

// The front of a schema whose C++ signature is R(Args...): a replay from the lent arguments, else
// the boxed front.
template <class R, class... Args>
class UnboxedFront<R(Args...)> {
  static_assert(std::is_same_v<R, at::Tensor> || std::is_same_v<R, at::Tensor&> || IsTensorTuple<R>::value,
                "an unboxed front returns a tensor, the tensor it writes, or a tuple of tensors");

 public:
  UnboxedFront(c10::OperatorHandle op, FrontEntry front, c10::BoxedKernel boxed)
      : op_(std::move(op)), front_(front), boxed_(std::move(boxed)) {}

  R operator()(Args... args) const {
    std::vector<c10::IValue> results;
    bool replayed;
    {
      const LentArguments<Args...> lent(args...);
      replayed = replay_call(front_, op_, lent.values(), results);
    }
    if (!replayed) {
      return c10::impl::BoxedKernelWrapper<R(Args...)>::call(
          boxed_, op_, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), std::forward<Args>(args)...);
    }
    if constexpr (std::is_same_v<R, at::Tensor&>) {  // in place: self; out=: the last argument
      return written(args...);
    } else if constexpr (std::is_same_v<R, at::Tensor>) {
      return std::move(results.at(0)).toTensor();
    } else {
      TORCH_CHECK(results.size() == std::tuple_size_v<R>, op_.schema().name(), ": the replay made ", results.size(),
                  " results, the schema has ", std::tuple_size_v<R>);
      return tensor_tuple<R>(results, std::make_index_sequence<std::tuple_size_v<R>>());
    }
  }

 private:
  // The argument an in-place op (its first, a mutable tensor) or an out= op (its last) writes, as
  // c10::impl::BoxedKernelWrapper returns it.
  template <class First, class... Rest>
  static at::Tensor& written(First&& first, Rest&&... rest) {
    if constexpr (std::is_same_v<First, at::Tensor&>) {
      return first;
    } else {
      return std::get<sizeof...(Rest) - 1>(std::forward_as_tuple(rest...));
    }
  }

  c10::OperatorHandle op_;
  FrontEntry front_;
  c10::BoxedKernel boxed_;
};

template <class R, class... Args>
torch::CppFunction make_front(R (*)(Args...), const c10::OperatorHandle& op, const FrontEntry& front,
                              c10::BoxedKernel boxed) {
  return torch::CppFunction(UnboxedFront<R(Args...)>(op, front, std::move(boxed)));
}

using Maker = torch::CppFunction (*)(const c10::OperatorHandle&, const FrontEntry&, c10::BoxedKernel);

template <class Op>
std::pair<std::string, Maker> entry() {
  std::string name = Op::name;
  if (*Op::overload_name != '\0') name += std::string(".") + Op::overload_name;
  return {name, [](const c10::OperatorHandle& op, const FrontEntry& front, c10::BoxedKernel boxed) {
            return make_front(static_cast<typename Op::schema*>(nullptr), op, front, std::move(boxed));
          }};
}

// The schemas a training step calls most (the demo's models, the TransformerEncoder, the
// optimizers' non-foreach steps): name ("aten::add.Tensor") -> its front's maker.
const std::unordered_map<std::string, Maker>& makers() {
  namespace o = at::_ops;
  static const auto* table = new std::unordered_map<std::string, Maker>{
      entry<o::add_Tensor>(), entry<o::add__Tensor>(), entry<o::add_out>(), entry<o::add_Scalar>(),
      entry<o::add__Scalar>(), entry<o::sub_Tensor>(), entry<o::sub__Tensor>(), entry<o::rsub_Scalar>(),
      entry<o::mul_Tensor>(), entry<o::mul__Tensor>(), entry<o::mul_out>(), entry<o::mul_Scalar>(),
      entry<o::mul__Scalar>(), entry<o::div_Tensor>(), entry<o::div__Tensor>(), entry<o::div_Scalar>(),
      entry<o::div__Scalar>(), entry<o::neg>(), entry<o::pow_Tensor_Scalar>(), entry<o::sqrt>(), entry<o::rsqrt>(),
      entry<o::exp>(), entry<o::tanh>(), entry<o::tanh_backward>(), entry<o::sigmoid>(), entry<o::sigmoid_backward>(),
      entry<o::relu>(), entry<o::relu_>(), entry<o::threshold_backward>(), entry<o::gelu>(), entry<o::gelu_backward>(),
      entry<o::silu>(), entry<o::silu_backward>(), entry<o::addcmul_>(), entry<o::addcdiv_>(),
      entry<o::sum_dim_IntList>(), entry<o::sum>(), entry<o::mean>(), entry<o::mean_dim>(), entry<o::mm>(),
      entry<o::addmm>(), entry<o::bmm>(), entry<o::clone>(), entry<o::_softmax>(), entry<o::_softmax_backward_data>(),
      entry<o::_safe_softmax>(), entry<o::_log_softmax>(), entry<o::_log_softmax_backward_data>(),
      entry<o::native_layer_norm>(), entry<o::native_layer_norm_backward>(), entry<o::native_dropout>(),
      entry<o::native_dropout_backward>(),
      entry<o::fill__Scalar>(), entry<o::zero_>(), entry<o::nll_loss_forward>(), entry<o::nll_loss_backward>(),
      entry<o::mse_loss>(), entry<o::mse_loss_backward>(), entry<o::select_backward>(), entry<o::slice_backward>(),
      entry<o::where_self>(), entry<o::maximum>(), entry<o::sub_out>(), entry<o::div_out>(),
  };
  return *table;
}

}  // namespace

std::optional<torch::CppFunction> unboxed_front(const c10::OperatorHandle& op, const FrontEntry& front,
                                                const std::function<c10::BoxedKernel()>& boxed) {
  const c10::OperatorName& name = op.operator_name();
  const auto found = makers().find(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
  if (found == makers().end()) return std::nullopt;
  return found->second(op, front, boxed());
}

}  // namespace torch_layouts
