#include "sm90/rowwise/kernel_registry.h"

#include "sm90/common/name_registry.h"

namespace fp8ext::sm90 {

bool register_kernel(const KernelEntry& entry) { return NameRegistry<KernelEntry>::add(entry); }
const std::vector<KernelEntry>& all_kernels() { return NameRegistry<KernelEntry>::all(); }
const KernelEntry* find_kernel(std::string_view name) { return NameRegistry<KernelEntry>::find(name); }

}  // namespace fp8ext::sm90
