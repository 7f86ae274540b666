// The PrivateUse1 profiler stubs: `torch.autograd.profiler.profile(use_device="spyre")` times
// spyre ops with host steady-clock marks (every op completes before it returns).
#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <chrono>
#include <memory>

#include "device_guard.h"
#include "device_memory.h"

namespace torch_layouts {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct SpyreProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    if (device) *device = current_device();
    auto mark = std::make_shared<int64_t>(steady_ns());
    if (event) *event = std::shared_ptr<void>(mark, mark.get());
    if (cpu_ns) *cpu_ns = c10::getTime();
  }
  float elapsed(const ProfilerVoidEventStub* event, const ProfilerVoidEventStub* event2) const override {
    const auto start = *static_cast<const int64_t*>(event->get());
    const auto end = *static_cast<const int64_t*>(event2->get());
    return static_cast<float>(end - start) / 1000.0f;  // microseconds, as the CUDA stubs
  }
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    for (int i = 0; i < device_count(); ++i) {
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(i)));
      op(i);
    }
  }
  void synchronize() const override {}
};

struct Register {
  Register() {
    static SpyreProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} g_register;

}  // namespace
}  // namespace torch_layouts
