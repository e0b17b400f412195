// A bounded, thread-safe memo of a dispatch's selections, shared by the row-wise (dispatch.cpp) and block-scaled
// (blockwise_dispatch.cpp) families. A selection costs microseconds of host time (every built kernel's time is
// predicted), a third of an eager call on a small problem, and serving repeats a few shapes many times. The key
// must hold everything the selection reads; the kernels and their coefficients are fixed at build time. Plain
// C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <unordered_map>

namespace fp8ext::sm90 {

// FNV-1a over a key's fields, for the memo's hash.
inline size_t hash_fields(std::initializer_list<uint64_t> fields) {
  uint64_t h = 1469598103934665603ull;
  for (const uint64_t v : fields) h = (h ^ v) * 1099511628211ull;
  return static_cast<size_t>(h);
}

template <class Key, class Value, class Hash>
class SelectionMemo {
 public:
  // The memoized value for key, computed by compute() on the first call. The lock is not held while computing;
  // two threads that race on a new key both compute it, and both get the same value.
  template <class Compute>
  Value get(const Key& key, Compute&& compute) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (const auto it = map_.find(key); it != map_.end()) return it->second;
    }
    const Value value = compute();
    std::lock_guard<std::mutex> lock(mutex_);
    // Bounded: a process that sees more distinct problems than this starts the memo over.
    if (map_.size() >= kMaxEntries) map_.clear();
    map_.emplace(key, value);
    return value;
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::mutex mutex_;
  std::unordered_map<Key, Value, Hash> map_;
};

}  // namespace fp8ext::sm90
