// The spyre random number generator: Philox-style state (seed, offset), as CUDA's.
// Random ops run on the host (fallback.cpp): each op draws from a CPU generator seeded with a
// mix of (seed, offset), then the offset advances by the values the op produced, rounded up to
// a multiple of 4 (as CUDA's Philox offset). Draws are a deterministic function of (seed, offset).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace torch_layouts {

class SpyreGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;  // offset back to 0
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;                       // a fresh non-deterministic seed
  void set_offset(uint64_t offset) override;      // a multiple of 4, as CUDA's
  uint64_t get_offset() const override { return offset_; }
  // 16 bytes, as CUDA's: seed (uint64) then offset (int64), native byte order.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator seed one op at the current offset draws with (call with mutex() held).
  uint64_t host_seed() const;
  // Moves past an op that produced `values` random values (call with mutex() held).
  void advance(int64_t values);

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  SpyreGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torch_layouts
