#include "generator.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>
#include <vector>

#include "device_memory.h"

namespace torch_layouts {

SpyreGeneratorImpl::SpyreGeneratorImpl(c10::DeviceIndex device) {
  device_ = c10::Device(c10::DeviceType::PrivateUse1, device);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

SpyreGeneratorImpl* SpyreGeneratorImpl::clone_impl() const {
  auto* copy = new SpyreGeneratorImpl(device_.index());
  copy->set_state(*get_state());
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<SpyreGeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
      generators.back().set_current_seed(c10::default_rng_seed_val);  // as the CPU generator
    }
  });
  if (device < 0) device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  check_device_index(device);
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  check_device_index(device);
  return at::make_generator<SpyreGeneratorImpl>(device);
}

}  // namespace torch_layouts
