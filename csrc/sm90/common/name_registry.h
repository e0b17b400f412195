// A registry of kernels by name, filled while the library loads: each kernel translation unit adds its one entry
// from a static initializer. One per entry type (kernel_registry.h: row-wise; blockwise_gemm.h: block-scaled).
// Plain C++: no CUTLASS, no libtorch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>
#include <vector>

#include "sm90/common/gemm_params.h"  // LaunchResult

namespace fp8ext::sm90 {

// One kernel of a family whose launch parameters are Params: its name, its traits, and the two entry points its
// translation unit instantiates (FP8EXT_SM90_REGISTER_KERNEL, cutlass_common.cuh).
template <class Traits, class Params>
struct RegistryEntry {
  const char* name;
  Traits traits;
  LaunchResult (*launch)(const Params&);
  size_t (*workspace_size)(const Params&);
};

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
