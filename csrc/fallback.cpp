// The boxed CPU fallback: ops without a device kernel run on host copies of their inputs.
// Random ops draw from the spyre generator (its state is lent to a CPU generator).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

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

// Lends a spyre generator's state to a CPU generator for the duration of one op.
class Loan {
 public:
  Loan(at::Generator spyre, at::Generator cpu) : spyre_(std::move(spyre)), cpu_(std::move(cpu)) {
    std::lock_guard<std::mutex> lock(spyre_.mutex());
    cpu_.set_state(spyre_.get_state());
  }
  ~Loan() {
    std::lock_guard<std::mutex> lock(spyre_.mutex());
    spyre_.set_state(cpu_.get_state());
  }
  const at::Generator& cpu() const { return cpu_; }

 private:
  at::Generator spyre_, cpu_;
};

void spyre_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
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
    loans.push_back(std::make_unique<Loan>(gen, at::make_generator<at::CPUGeneratorImpl>()));
    value = c10::IValue(loans.back()->cpu());
  }
  if (draws_default_generator(schema.operator_name())) {
    // The op uses the CPU default generator: lend it the spyre state, then give both back.
    at::Generator cpu_default = at::detail::getDefaultCPUGenerator();
    at::Generator saved = cpu_default.clone();
    {
      Loan loan(default_generator(device), cpu_default);
      at::native::cpu_fallback(op, stack);
    }
    std::lock_guard<std::mutex> lock(cpu_default.mutex());
    cpu_default.set_state(saved.get_state());
    return;
  }
  at::native::cpu_fallback(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&spyre_fallback>());
}

}  // namespace torch_layouts
