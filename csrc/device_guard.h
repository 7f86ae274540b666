// Which spyre device is current (per thread), and the DeviceGuard for PrivateUse1.
#pragma once

#include <c10/core/Device.h>

namespace torch_layouts {

c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex device);
c10::DeviceIndex exchange_device(c10::DeviceIndex device);

}  // namespace torch_layouts
