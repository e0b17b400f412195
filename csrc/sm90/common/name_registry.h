// A registry of kernels by name, filled while the library loads: each kernel translation unit adds its one entry
// from a static initializer. One per entry type (kernel_registry.h: row-wise; blockwise_gemm.h: block-scaled).
// Plain C++: no CUTLASS, no libtorch.
#pragma once

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

namespace fp8ext::sm90 {

// Entry has a `const char* name`. The entries live in a function-local static, so registration from other
// translation units' static initializers is safe whatever order the loader runs them in; registration happens
// before any caller, so the references and pointers handed out stay valid.
template <class Entry>
struct NameRegistry {
  static bool add(const Entry& entry) {
    auto& v = entries();
    const auto by_name = [](const Entry& x, const Entry& y) { return std::strcmp(x.name, y.name) < 0; };
    v.insert(std::lower_bound(v.begin(), v.end(), entry, by_name), entry);
    return true;
  }
  static const std::vector<Entry>& all() { return entries(); }  // sorted by name
  static const Entry* find(std::string_view name) {
    for (const Entry& e : entries()) {
      if (name == e.name) return &e;
    }
    return nullptr;
  }

 private:
  static std::vector<Entry>& entries() {
    static std::vector<Entry> v;
    return v;
  }
};

}  // namespace fp8ext::sm90
