// The boxed CPU fallback: ops without a device kernel run on host copies of their inputs.
// Random ops draw from the spyre generator (its state is lent to a CPU generator).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include "generator.h"
#include "runtime_stats.h"

namespace torch_layouts {
namespace {

bool is_generator(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  return false;
}

void spyre_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  count_fallback(schema.operator_name().name + (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  std::vector<std::pair<at::Generator, at::Generator>> lent;  // (spyre generator, CPU stand-in)
  for (size_t i = 0; i < args.size(); ++i) {
    if (!is_generator(args[i].type())) continue;
    c10::IValue& value = (*stack)[first + i];
    at::Generator gen = value.isNone() ? default_generator(-1) : value.toGenerator();
    if (gen.device().type() != c10::DeviceType::PrivateUse1) continue;
    at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>();
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      cpu.set_state(gen.get_state());
    }
    value = c10::IValue(cpu);
    lent.emplace_back(gen, cpu);
  }
  at::native::cpu_fallback(op, stack);
  for (auto& [gen, cpu] : lent) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cpu.get_state());
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&spyre_fallback>());
}

}  // namespace torch_layouts
