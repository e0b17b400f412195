// Decode on the tensor cores with row-wise scales: M <= 32 tokens (gemv_tensor_core.cuh has the kernel and why).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include "sm90/decode/decode_common.cuh"
#include "sm90/common/gemm_params.h"
#include "sm90/decode/gemv_tensor_core.cuh"
#include "sm90/rowwise/kernel_registry.h"

namespace fp8ext::sm90 {
namespace {

using gemv_tc::kMaxM;

using decode::RowwisePolicy;

template <typename Out, int MT, int S>
LaunchResult launch_gemv_tc(const GemmParams& p) {
  if (p.M < 1 || p.M > kMaxM) return {false, "gemv_tc", "M must be between 1 and 32 for the gemv_tc kernels"};
  const cudaError_t err =
      p.a_is_e5m2 ? gemv_tc::launch_tiles<RowwisePolicy, Out, __NV_E5M2, MT, S>(p)
                  : gemv_tc::launch_tiles<RowwisePolicy, Out, __NV_E4M3, MT, S>(p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

constexpr KernelTraits gemv_tc_traits() {
  KernelTraits t{};
  t.schedule = Schedule::kGemv;
  t.accum = Accum::kFast;
  t.out = OutType::kBF16;
  t.in_a = InType::kE4M3;
  t.any_in_a = true;
  t.max_m = kMaxM;
  return t;
}

template <int MT, int S>
bool register_variant(const char* name) {
  return register_kernel({name, gemv_tc_traits(), &launch_gemv_tc<__nv_bfloat16, MT, S>, &decode::no_workspace});
}

// gemv_tc_m32_r<rows per warp>_s<K slices>: the three of eight variants that won rows when measured against each
// other (r32 with S = 2 or 4 and r64 with S = 2, 4, 8 won none). More slices keep a small weight's blocks
// numerous; the cost model picks among them per shape. bf16 output only, the decode calls that matter.
const bool kRegistered = register_variant<1, 4>("gemv_tc_m32_r16_s4_fast_bf16") &&
                         register_variant<1, 8>("gemv_tc_m32_r16_s8_fast_bf16") &&
                         register_variant<2, 8>("gemv_tc_m32_r32_s8_fast_bf16");

}  // namespace
}  // namespace fp8ext::sm90
