// int64 on the device: Torch-Spyre's IEEE_INT32 format, with its downcast warning (kernels_copy.cpp).
#pragma once

namespace torch_layouts {

// Whether int64 device tensors warn that they hold int32 values ("does not support int64").
// Starts from TORCH_SPYRE_DOWNCAST_WARN (0/false/off disable it).
bool downcast_warning_enabled();
void set_downcast_warning_enabled(bool enabled);

// TORCH_WARN_ONCE of that warning when enabled (every time under torch.set_warn_always(True)).
void warn_int64_downcast();

}  // namespace torch_layouts
