// The name -> kernel registry of the block-scaled kernels (blockwise_gemm.h). Each file in kernels/ registers its
// one kernel, and each block-scaled decode file (decode/bw_gemv_*.cu) its variants, while the library loads.
#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/common/name_registry.h"

namespace fp8ext::sm90 {

bool register_blockwise_kernel(const BlockwiseKernelEntry& entry) {
  return NameRegistry<BlockwiseKernelEntry>::add(entry);
}
const std::vector<BlockwiseKernelEntry>& all_blockwise_kernels() { return NameRegistry<BlockwiseKernelEntry>::all(); }
const BlockwiseKernelEntry* find_blockwise_kernel(std::string_view name) {
  return NameRegistry<BlockwiseKernelEntry>::find(name);
}

}  // namespace fp8ext::sm90
