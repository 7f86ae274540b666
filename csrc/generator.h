// The spyre random number generator: a CPU (Philox-free, mt19937) generator owned by a device.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace torch_layouts {

class SpyreGeneratorImpl final : public at::CPUGeneratorImpl {
 public:
  explicit SpyreGeneratorImpl(c10::DeviceIndex device);

 private:
  SpyreGeneratorImpl* clone_impl() const override;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torch_layouts
