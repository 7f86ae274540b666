#include "generator.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "device_memory.h"

namespace torch_layouts {
namespace {

constexpr size_t kSeedBytes = sizeof(uint64_t), kOffsetBytes = sizeof(int64_t);

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void check_offset(uint64_t offset) {
  TORCH_CHECK(offset % 4 == 0, "offset must be a multiple of 4, got ", offset);
  TORCH_CHECK(offset <= static_cast<uint64_t>(INT64_MAX), "offset ", offset, " exceeds int64's range");
}

}  // namespace

SpyreGeneratorImpl::SpyreGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void SpyreGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t SpyreGeneratorImpl::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom(/*is_cuda=*/true));
  return seed_;
}

void SpyreGeneratorImpl::set_offset(uint64_t offset) {
  check_offset(offset);
  offset_ = offset;
}

void SpyreGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  at::detail::check_rng_state(new_state);
  TORCH_CHECK(new_state.numel() == static_cast<int64_t>(kSeedBytes + kOffsetBytes),
                    "RNG state is wrong size: a spyre generator state is ", kSeedBytes + kOffsetBytes,
                    " bytes (seed, offset), got ", new_state.numel());
  const auto* bytes = new_state.data_dtype_initialized<uint8_t>();
  uint64_t seed = 0;
  int64_t offset = 0;
  std::memcpy(&seed, bytes, kSeedBytes);
  std::memcpy(&offset, bytes + kSeedBytes, kOffsetBytes);
  TORCH_CHECK(offset >= 0, "RNG state holds a negative offset ", offset);
  check_offset(static_cast<uint64_t>(offset));
  seed_ = seed;
  offset_ = static_cast<uint64_t>(offset);
}

c10::intrusive_ptr<c10::TensorImpl> SpyreGeneratorImpl::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kSeedBytes + kOffsetBytes)}, at::kByte);
  auto* bytes = state.mutable_data_ptr<uint8_t>();
  const auto offset = static_cast<int64_t>(offset_);
  std::memcpy(bytes, &seed_, kSeedBytes);
  std::memcpy(bytes + kSeedBytes, &offset, kOffsetBytes);
  return state.getIntrusivePtr();
}

uint64_t SpyreGeneratorImpl::host_seed() const { return splitmix64(seed_ ^ splitmix64(offset_)); }

void SpyreGeneratorImpl::advance(int64_t values) {
  const uint64_t step = (static_cast<uint64_t>(std::max<int64_t>(values, 1)) + 3) / 4 * 4;
  TORCH_CHECK(offset_ <= static_cast<uint64_t>(INT64_MAX) - step, "spyre generator offset overflows int64");
  offset_ += step;
}

SpyreGeneratorImpl* SpyreGeneratorImpl::clone_impl() const {
  auto* copy = new SpyreGeneratorImpl(device_.index(), seed_);
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<SpyreGeneratorImpl>(static_cast<c10::DeviceIndex>(i)));
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
