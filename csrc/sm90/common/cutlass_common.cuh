// What the row-wise (rowwise_gemm.cuh) and block-scaled (blockwise_gemm.cuh) kernel templates share: the output
// element types, the bias node of their epilogues, and the CUTLASS launch sequence. Only the kernel templates
// include it; nothing here includes libtorch.
#pragma once

#include <atomic>
#include <cstddef>

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>

#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"

namespace fp8ext::sm90 {

template <OutType O> struct OutElement;
template <> struct OutElement<OutType::kBF16> { using type = cutlass::bfloat16_t; };
template <> struct OutElement<OutType::kFP16> { using type = cutlass::half_t; };
template <> struct OutElement<OutType::kFP32> { using type = float; };

// The bias, bias[j] along the user's N: D's columns normally, D's rows when swapped (D = out^T). It has the
// output's type (checked by the entry) and is read in place; a null pointer reads as 0 (the node's null_default),
// so one kernel serves with and without bias.
template <class TileShape, class ElementBias, bool SwapAB>
using BiasBroadcast = cute::conditional_t<
    SwapAB,
    cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, ElementBias, float,
                                                cute::Stride<cute::_1, cute::_0, cute::_0>>,
    cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementBias, float,
                                                cute::Stride<cute::_0, cute::_1, cute::_0>>>;

// The call in a kernel's MMA frame (TN, K contiguous in both operands): not swapped, MMA A = a [M, K], MMA B = b
// (N x K), D = out [M, N] row-major; swap_ab, MMA A = b^T [N, K] (the weight), MMA B = a, D = out^T [N, M]
// column-major, the same memory as out. Sizes fit int (checked by the entry); strides stay 64-bit.
template <bool SwapAB, class ElementA, class ElementB, class StrideA, class StrideB, class StrideD>
struct MmaFrame {
  int m, n, k;
  const ElementA* a;
  const ElementB* b;
  StrideA stride_a;
  StrideB stride_b;
  StrideD stride_d;

  MmaFrame(int64_t M, int64_t N, int64_t K, const void* a_user, int64_t lda, const void* b_user, int64_t ldb,
           int64_t ldo)
      : m(static_cast<int>(SwapAB ? N : M)),
        n(static_cast<int>(SwapAB ? M : N)),
        k(static_cast<int>(K)),
        a(static_cast<const ElementA*>(SwapAB ? b_user : a_user)),
        b(static_cast<const ElementB*>(SwapAB ? a_user : b_user)),
        stride_a(cute::make_stride(SwapAB ? ldb : lda, cute::_1{}, int64_t(0))),
        stride_b(cute::make_stride(SwapAB ? lda : ldb, cute::_1{}, int64_t(0))) {
    if constexpr (SwapAB) {
      stride_d = cute::make_stride(cute::_1{}, ldo, int64_t(0));  // D = out^T, column-major
    } else {
      stride_d = cute::make_stride(ldo, cute::_1{}, int64_t(0));
    }
  }
};

// What every kernel's arguments carry besides the problem: the device and its SM count (passed in so that
// CUTLASS does not query the device on every call) and, for stream-K, a deterministic reduction: the partial
// tiles are added in a fixed order, so results are bitwise repeatable.
template <bool StreamK, class Arguments>
void set_launch_arguments(Arguments& args, int device_id, int sm_count) {
  args.hw_info.device_id = device_id;
  args.hw_info.sm_count = sm_count;
  if constexpr (StreamK) {
    args.scheduler.reduction_mode = decltype(args.scheduler.reduction_mode)::Deterministic;
    args.scheduler.decomposition_mode = decltype(args.scheduler.decomposition_mode)::Heuristic;
  }
}

// A kernel's dynamic shared memory limit, raised once per device. CUTLASS's Gemm::initialize sets it on every call
// (a cudaFuncSetAttribute, about 3 us of host time, an eighth of an eager call); the attribute belongs to the
// device's context and lasts for the process, so it is set on a kernel's first launch on each device.
// Racing first launches each set it, which is harmless.
inline constexpr int kMaxDevices = 64;

template <class GemmKernel>
cudaError_t raise_smem_limit_once(int device_id) {
  static std::atomic<bool> done[kMaxDevices] = {};
  constexpr int smem_bytes = GemmKernel::SharedStorageSize;
  if constexpr (smem_bytes < (48 << 10)) {
    return cudaSuccess;  // within the default limit
  } else {
    const bool cached = device_id >= 0 && device_id < kMaxDevices;
    if (cached && done[device_id].load(std::memory_order_acquire)) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (err == cudaSuccess && cached) done[device_id].store(true, std::memory_order_release);
    return err;
  }
}

// can_implement, the workspace's size, the workspace's initialisation, the shared memory limit, the launch, and the
// launch's own error: the first step that fails is reported (gemm_params.h, LaunchResult). These are the steps of
// CUTLASS's Gemm::run(args, workspace, stream), with the shared memory limit set once (raise_smem_limit_once).
template <class Gemm>
LaunchResult run_gemm(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  using GemmKernel = typename Gemm::GemmKernel;
  cutlass::Status status = Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    return {false, "can_implement", cutlass::cutlassGetStatusString(status)};
  }
  if (Gemm::get_workspace_size(args) > workspace_bytes) {
    return {false, "workspace", "the workspace passed in is smaller than workspace_size()"};
  }
  status = GemmKernel::initialize_workspace(args, workspace, stream, nullptr);
  if (status != cutlass::Status::kSuccess) {
    return {false, "initialize", cutlass::cutlassGetStatusString(status)};
  }
  typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(args, workspace);
  if (const cudaError_t err = raise_smem_limit_once<GemmKernel>(args.hw_info.device_id); err != cudaSuccess) {
    cudaGetLastError();  // clear it, as CUTLASS does
    return {false, "initialize", cudaGetErrorString(err)};
  }
  status = Gemm::run(params, stream);
  if (status != cutlass::Status::kSuccess) {
    return {false, "run", cutlass::cutlassGetStatusString(status)};
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

// The two entry points of a kernel for a family's GEMM wrapper G (G::Gemm, G::arguments(params)); Params carries
// the workspace and the stream.
template <class G, class Params>
size_t gemm_workspace_size(const Params& p) {
  return G::Gemm::get_workspace_size(G::arguments(p));
}

template <class G, class Params>
LaunchResult gemm_launch(const Params& p) {
  return run_gemm<typename G::Gemm>(G::arguments(p), p.workspace, p.workspace_bytes, p.stream);
}

}  // namespace fp8ext::sm90

// Used through a family's macro (FP8EXT_SM90_KERNEL, FP8EXT_SM90_BLOCKWISE_KERNEL), once by each kernel translation
// unit: instantiates the family's launch<CONFIG> and workspace_size<CONFIG> for PARAMS and adds the kernel to the
// family's registry (REGISTER) under NAME when the library loads.
#define FP8EXT_SM90_REGISTER_KERNEL(REGISTER, PARAMS, NAME, CONFIG)                                           \
  template ::fp8ext::sm90::LaunchResult fp8ext::sm90::launch<CONFIG>(const ::fp8ext::sm90::PARAMS&);          \
  template size_t fp8ext::sm90::workspace_size<CONFIG>(const ::fp8ext::sm90::PARAMS&);                        \
  namespace {                                                                                                  \
  const bool kRegistered = ::fp8ext::sm90::REGISTER(                                                           \
      {NAME, CONFIG::traits(), &::fp8ext::sm90::launch<CONFIG>, &::fp8ext::sm90::workspace_size<CONFIG>});      \
  }
