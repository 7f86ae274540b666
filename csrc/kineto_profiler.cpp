// The spyre Kineto activity profiler: with ProfilerActivity.PrivateUse1, every op that runs on
// spyre tensors adds a device event (CONCURRENT_KERNEL, which PyTorch reads as a PrivateUse1
// device event) linked to its CPU op, so key_averages() and traces show device time.
// Device ops complete before they return, so an op's device interval is its own interval.
// Only innermost spyre ops get events (a composite op's time is its children's, as on CUDA);
// view ops make no device work and get none.
#define USE_KINETO 1
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <GenericTraceActivity.h>
#include <TraceSpan.h>
#include <libkineto.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "device_guard.h"

namespace torch_layouts {
namespace {

struct DeviceEvent {
  std::string name;
  uint64_t correlation;
  int64_t start_ns, end_ns;
  c10::DeviceIndex device;
};

// One op between its correlation push and pop on this thread.
struct Frame {
  uint64_t correlation;
  int64_t start_ns;
  std::string name;     // the op, when it runs on spyre tensors; empty otherwise
  bool spyre_child = false;
};

// The op the last RecordFunction enter on this thread was (global callbacks run before the
// profiler's, which pushes the op's correlation id right after).
thread_local std::string t_pending_spyre_op;
thread_local std::vector<Frame> t_frames;

// View ops only make metadata: no device work, so no device event (the op calling them keeps its own).
bool is_view_op(const at::RecordFunction& fn) {
  const auto name = fn.operator_name();
  if (!name) return false;
  const auto handle = c10::Dispatcher::singleton().findOp(*name);
  if (!handle || !handle->hasSchema()) return false;
  const auto& returns = handle->schema().returns();
  if (returns.empty()) return false;
  for (const auto& ret : returns) {
    if (!ret.alias_info() || ret.alias_info()->isWrite()) return false;
  }
  return true;
}

bool has_spyre_input(const at::RecordFunction& fn) {
  for (const c10::IValue& value : fn.inputs()) {
    if (value.isTensor() && value.toTensor().defined() && value.toTensor().is_privateuseone()) return true;
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) {
        if (t.defined() && t.is_privateuseone()) return true;
      }
    }
  }
  return false;
}

class SpyreSession final : public libkineto::IActivityProfilerSession {
 public:
  ~SpyreSession() override {
    if (callback_) at::removeCallback(callback_);
  }

  void start() override {
    std::lock_guard<std::mutex> lock(mutex_);
    span_start_ns_ = c10::getTime();
    recording_ = true;
    callback_ = at::addGlobalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              const bool device_op = has_spyre_input(fn) && !is_view_op(fn);
              t_pending_spyre_op = device_op ? std::string(fn.name()) : std::string();
              return nullptr;
            })
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION}));
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (callback_) at::removeCallback(callback_);
    callback_ = 0;
    recording_ = false;
    span_end_ns_ = c10::getTime();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  void pushCorrelationId(uint64_t id) override {
    t_frames.push_back({id, c10::getTime(), std::move(t_pending_spyre_op)});
    t_pending_spyre_op.clear();
  }

  void popCorrelationId() override {
    if (t_frames.empty()) return;
    Frame frame = std::move(t_frames.back());
    t_frames.pop_back();
    if (frame.name.empty()) return;
    if (!t_frames.empty()) t_frames.back().spyre_child = true;
    if (frame.spyre_child) return;
    const int64_t end = c10::getTime();
    std::lock_guard<std::mutex> lock(mutex_);
    if (recording_) events_.push_back({"spyre::" + frame.name, frame.correlation, frame.start_ns, end, current_device()});
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*start*/, int64_t /*end*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    libkineto::TraceSpan span(span_start_ns_, span_end_ns_, "spyre");
    for (const DeviceEvent& e : events_) {
      libkineto::GenericTraceActivity activity(span, libkineto::ActivityType::CONCURRENT_KERNEL, e.name);
      activity.startTime = e.start_ns;
      activity.endTime = e.end_ns;
      activity.id = static_cast<int32_t>(e.correlation);
      activity.device = e.device;
      activity.resource = 0;  // the device's default stream: streams run synchronously
      activity.linked = linked(static_cast<int32_t>(e.correlation));
      activity.flow.id = static_cast<uint32_t>(e.correlation);
      activity.flow.type = libkineto::kLinkAsyncCpuGpu;
      activity.flow.start = false;
      activity.log(logger);
    }
    events_.clear();
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "spyre", "spyre (simulated)"});
  }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  std::mutex mutex_;
  bool recording_ = false;
  at::CallbackHandle callback_ = 0;
  int64_t span_start_ns_ = 0, span_end_ns_ = 0;
  std::vector<DeviceEvent> events_;
};

class SpyreActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& /*config*/) override {
    if (!types.count(libkineto::ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<SpyreSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"spyre"};
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL};
};

REGISTER_PRIVATEUSE1_PROFILER(SpyreActivityProfiler);

}  // namespace
}  // namespace torch_layouts
