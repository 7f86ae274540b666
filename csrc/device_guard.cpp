#include "device_guard.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <chrono>

#include "device_memory.h"

namespace torch_layouts {
namespace {

thread_local c10::DeviceIndex t_current = 0;

// Streams run their work synchronously (every op completes before it returns), so the
// guard only keeps what CUDA's documents promise to observers: distinct stream ids (0 is a
// device's default stream; 1..32 its low-priority pool, 33..64 its high-priority pool, 65 on
// new streams), a current stream per thread and device, and events that record the host
// time at which their stream's work (all of it already done) was complete.
constexpr c10::StreamId kPoolSize = 32;
constexpr int kMaxDevices = 64;
thread_local std::array<c10::StreamId, kMaxDevices> t_streams{};  // current stream per device
std::array<std::atomic<c10::StreamId>, kMaxDevices> g_next_stream;  // new streams, from 2 * kPoolSize + 1
std::array<std::atomic<c10::StreamId>, 2 * kMaxDevices> g_pool_cursor;

struct SpyreEvent {
  c10::DeviceIndex device;
  c10::StreamId stream = 0;
  int64_t recorded_ns = -1;  // host steady-clock time of the last record; -1 before the first
  bool timing = false;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

c10::DeviceIndex resolve(c10::Device d) {
  const c10::DeviceIndex index = d.has_index() ? d.index() : t_current;
  check_device_index(index);
  return index;
}

struct SpyreGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override { return {kType, exchange_device(d.index())}; }
  c10::Device getDevice() const override { return {kType, current_device()}; }
  void setDevice(c10::Device d) const override { set_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_current = d.index(); }

  c10::Stream getStream(c10::Device d) const override {
    const c10::DeviceIndex index = resolve(d);
    return c10::Stream(c10::Stream::UNSAFE, {kType, index}, t_streams[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, {kType, resolve(d)}, 0);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    const c10::DeviceIndex index = resolve(d);
    return c10::Stream(c10::Stream::UNSAFE, {kType, index}, 2 * kPoolSize + 1 + g_next_stream[index]++);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    const c10::DeviceIndex index = resolve(d);
    const c10::StreamId slot = g_pool_cursor[2 * index + (high_priority ? 1 : 0)]++ % kPoolSize;
    return c10::Stream(c10::Stream::UNSAFE, {kType, index}, 1 + slot + (high_priority ? kPoolSize : 0));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::DeviceIndex index = resolve(s.device());
    const c10::StreamId previous = t_streams[index];
    t_streams[index] = s.id();
    return c10::Stream(c10::Stream::UNSAFE, {kType, index}, previous);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return static_cast<c10::DeviceIndex>(device_count());
    } catch (...) {
      return 0;
    }
  }
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    c10::DeviceCapability capability;  // everything but the host-only float64 and complex dtypes
    capability.capability_data.supported_scalar_types.has_Double = 0;
    capability.capability_data.supported_scalar_types.has_ComplexHalf = 0;
    capability.capability_data.supported_scalar_types.has_ComplexFloat = 0;
    capability.capability_data.supported_scalar_types.has_ComplexDouble = 0;
    return capability;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                int(device_index), " does not match recording stream's device index ", int(stream.device_index()),
                ".");
    auto* state = static_cast<SpyreEvent*>(*event);
    if (state == nullptr) {
      state = new SpyreEvent{stream.device_index(), 0, -1, flag == c10::EventFlag::BACKEND_DEFAULT};
      *event = state;
    }
    state->stream = stream.id();
    state->recorded_ns = now_ns();
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}  // its work is done
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete static_cast<SpyreEvent*>(event);
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const override { check_device_index(device_index); }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/, const c10::Stream& /*stream*/) const override {}
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex /*device_index*/) const override {
    auto* start = static_cast<SpyreEvent*>(event1);
    auto* end = static_cast<SpyreEvent*>(event2);
    TORCH_CHECK(start && end && start->recorded_ns >= 0 && end->recorded_ns >= 0,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(start->timing && end->timing,
                "Both events must be created with argument 'enable_timing=True'.");
    return static_cast<double>(end->recorded_ns - start->recorded_ns) / 1e6;
  }
};

}  // namespace

c10::DeviceIndex current_device() { return t_current; }

void set_device(c10::DeviceIndex device) {
  check_device_index(device);
  t_current = device;
}

c10::DeviceIndex exchange_device(c10::DeviceIndex device) {
  const c10::DeviceIndex previous = t_current;
  if (device >= 0 && device != previous) set_device(device);
  return previous;
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace torch_layouts
