// The name -> kernel registry of the sm90 family.
//
// Each generated translation unit in kernels/ registers its one kernel at load time, so a build that compiles
// only a subset of kernels (FP8EXT_KERNELS=...) simply has a smaller registry. Plain C++: no CUTLASS, no libtorch.
#pragma once

#include <string_view>
#include <vector>

#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"
#include "sm90/common/name_registry.h"

namespace fp8ext::sm90 {

using KernelEntry = RegistryEntry<KernelTraits, GemmParams>;

// Called from static initializers of the kernel translation units. Returns true so it can initialise a bool.
bool register_kernel(const KernelEntry& entry);

// Every registered kernel, sorted by name. Registration happens while the library loads, before any caller.
const std::vector<KernelEntry>& all_kernels();

// nullptr when no kernel of that name was built.
const KernelEntry* find_kernel(std::string_view name);

}  // namespace fp8ext::sm90
