// A table keyed by a call's or a copy's geometry, shared by threads: the runtime's kept replays
// (kernel_front.cpp) and view-copy plans (view_copies.cpp). It is emptied whole when it reaches
// its bound; what it held is planned again on its next call.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace torch_layouts {

// A geometry key's hash: every element mixed in (keys share long prefixes: the op, a layout).
struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept {
    uint64_t h = key.size();
    for (const int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};

template <typename V>
class BoundedTable {
 public:
  explicit BoundedTable(size_t bound) : bound_(bound) {}

  void keep(std::vector<int64_t> key, V value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map_.size() >= bound_) map_.clear();
    map_[std::move(key)] = std::move(value);
  }

  std::optional<V> find(const std::vector<int64_t>& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }

  // f(value) for every entry, under the table's lock (f must not use the table).
  template <typename F>
  void for_each(F&& f) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, value] : map_) f(value);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    map_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::vector<int64_t>, V, KeyHash> map_;
  const size_t bound_;
};

}  // namespace torch_layouts
