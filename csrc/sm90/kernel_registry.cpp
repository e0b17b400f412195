#include "sm90/kernel_registry.h"

#include <algorithm>
#include <cstring>

namespace fp8ext::sm90 {
namespace {

// A function-local static, so registration from other translation units' static initializers is safe
// whatever order the loader runs them in.
std::vector<KernelEntry>& registry() {
  static std::vector<KernelEntry> entries;
  return entries;
}

}  // namespace

bool register_kernel(const KernelEntry& entry) {
  auto& entries = registry();
  auto pos = std::lower_bound(entries.begin(), entries.end(), entry, [](const KernelEntry& x, const KernelEntry& y) {
    return std::strcmp(x.name, y.name) < 0;
  });
  entries.insert(pos, entry);
  return true;
}

const std::vector<KernelEntry>& all_kernels() { return registry(); }

const KernelEntry* find_kernel(std::string_view name) {
  for (const auto& e : registry()) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

}  // namespace fp8ext::sm90
