// Decode-sized GEMV: M <= 4 tokens against an fp8 weight, row-wise scales (gemv_cuda_core.cuh has the kernel):
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )      (fp32, as the EVT)
//     acc[i, j] = sum_k float(a[i, k]) * float(w[j, k]),   w[j, :] = column j of b (K contiguous bytes)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include "sm90/decode/decode_common.cuh"
#include "sm90/common/gemm_params.h"
#include "sm90/decode/gemv_cuda_core.cuh"
#include "sm90/rowwise/kernel_registry.h"

namespace fp8ext::sm90 {
namespace {

using decode::RowwisePolicy;

template <typename Out>
LaunchResult launch_gemv(const GemmParams& p) {
  if (p.M < 1 || p.M > gemv::kMaxM) return {false, "gemv", "M must be between 1 and 4 for the gemv kernel"};
  const cudaError_t err = p.a_is_e5m2 ? gemv::launch<RowwisePolicy, Out, __NV_E5M2>(p)
                                      : gemv::launch<RowwisePolicy, Out, __NV_E4M3>(p);
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

constexpr KernelTraits gemv_traits(OutType out) {
  KernelTraits t{};
  t.schedule = Schedule::kGemv;
  t.accum = Accum::kPrecise;
  t.out = out;
  t.in_a = InType::kE4M3;
  t.any_in_a = true;
  t.max_m = gemv::kMaxM;
  return t;
}

const bool kRegistered = register_kernel({"gemv_m4_precise_bf16", gemv_traits(OutType::kBF16),
                                          &launch_gemv<__nv_bfloat16>, &decode::no_workspace}) &&
                         register_kernel({"gemv_m4_precise_fp16", gemv_traits(OutType::kFP16),
                                          &launch_gemv<__half>, &decode::no_workspace}) &&
                         register_kernel({"gemv_m4_precise_fp32", gemv_traits(OutType::kFP32),
                                          &launch_gemv<float>, &decode::no_workspace});

}  // namespace
}  // namespace fp8ext::sm90
