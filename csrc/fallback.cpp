// The boxed CPU fallback: ops without a device kernel run on host copies of their inputs.
// Random ops draw from the spyre generator: a CPU generator seeded for its (seed, offset).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ScopeExit.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "generator.h"
#include "runtime_stats.h"

namespace torch_layouts {
namespace {

bool is_generator(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

// The device an op runs on: that of its first spyre tensor argument, else the current one.
c10::DeviceIndex op_device(const torch::jit::Stack& stack, size_t first, size_t count) {
  for (size_t i = first; i < first + count; ++i) {
    const c10::IValue& value = stack[i];
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_privateuseone()) {
      return value.toTensor().device().index();
    }
    if (value.isDevice() && value.toDevice().is_privateuseone() && value.toDevice().has_index()) {
      return value.toDevice().index();
    }
  }
  return -1;
}

// Ops whose CPU kernels draw from the default CPU generator without taking a generator
// argument: their draws must come from the spyre generator instead.
bool draws_default_generator(const c10::OperatorName& name) {
  return name.name == "aten::native_dropout";
}

// Holds a spyre generator for one op: a CPU generator seeded for its (seed, offset) draws the
// op's values; once the op has run, the offset moves past the values it produced.
class Loan {
 public:
  Loan(at::Generator spyre, at::Generator cpu)
      : spyre_(std::move(spyre)), cpu_(std::move(cpu)), lock_(spyre_.mutex()) {
    std::lock_guard<std::mutex> cpu_lock(cpu_.mutex());
    cpu_.set_current_seed(impl()->host_seed());
  }
  const at::Generator& spyre() const { return spyre_; }
  const at::Generator& cpu() const { return cpu_; }
  void done(int64_t values) { impl()->advance(values); }

 private:
  SpyreGeneratorImpl* impl() { return at::check_generator<SpyreGeneratorImpl>(spyre_); }
  at::Generator spyre_, cpu_;
  std::unique_lock<std::mutex> lock_;
};

// How many random values an op produced: its largest tensor result.
int64_t values_produced(const torch::jit::Stack& stack, size_t returns) {
  int64_t most = 0;
  for (size_t i = stack.size() - returns; i < stack.size(); ++i) {
    if (stack[i].isTensor()) most = std::max(most, stack[i].toTensor().numel());
    if (stack[i].isTensorList()) {
      for (const at::Tensor& t : stack[i].toTensorList().vec()) most = std::max(most, t.numel());
    }
  }
  return most;
}

bool is_scalar_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::ScalarTypeType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) return optional->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
  return false;
}

// Spyre has no quantized tensors: an op that would make or read one says so before running.
void check_not_quantized(const c10::FunctionSchema& schema, const torch::jit::Stack& stack, size_t first) {
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = stack[first + i];
    std::optional<c10::ScalarType> quantized;
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_quantized()) {
      quantized = value.toTensor().scalar_type();
    } else if (value.isInt() && is_scalar_type(args[i].real_type()) &&
               c10::isQIntType(static_cast<c10::ScalarType>(value.toInt()))) {
      quantized = static_cast<c10::ScalarType>(value.toInt());
    }
    TORCH_CHECK_NOT_IMPLEMENTED(!quantized, schema.operator_name(), " on spyre: spyre has no quantized tensors (",
                                *quantized, " is host-only). Quantize on the host, e.g. "
                                "torch.quantize_per_tensor(t.cpu(), scale, zero_point, dtype), and move "
                                ".dequantize() results to spyre");
  }
}

void spyre_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  check_not_quantized(schema, *stack, stack->size() - schema.arguments().size());
  count_fallback(schema.operator_name().name + (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  const c10::DeviceIndex device = op_device(*stack, first, args.size());
  std::vector<std::unique_ptr<Loan>> loans;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_generator(args[i].type())) continue;
    c10::IValue& value = (*stack)[first + i];
    at::Generator gen = value.isNone() ? default_generator(device) : value.toGenerator();
    if (gen.device().type() != c10::DeviceType::PrivateUse1) continue;
    bool lent = false;  // the same generator twice: lend it once (its lock is held)
    for (const auto& loan : loans) {
      if (loan->spyre() == gen) {
        value = c10::IValue(loan->cpu());
        lent = true;
      }
    }
    if (lent) continue;
    loans.push_back(std::make_unique<Loan>(gen, at::make_generator<at::CPUGeneratorImpl>()));
    value = c10::IValue(loans.back()->cpu());
  }
  const size_t returns = schema.returns().size();
  if (draws_default_generator(schema.operator_name())) {
    // The op uses the CPU default generator: lend it for the op, then give its state back.
    at::Generator cpu_default = at::detail::getDefaultCPUGenerator();
    at::Generator saved = cpu_default.clone();
    auto restore = c10::make_scope_exit([&] {  // also when the op throws; after the loan ends
      std::lock_guard<std::mutex> lock(cpu_default.mutex());
      cpu_default.set_state(saved.get_state());
    });
    Loan loan(default_generator(device), cpu_default);
    at::native::cpu_fallback(op, stack);
    loan.done(values_produced(*stack, returns));
    return;
  }
  at::native::cpu_fallback(op, stack);
  for (auto& loan : loans) loan->done(values_produced(*stack, returns));
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&spyre_fallback>());
}

}  // namespace torch_layouts
