// A CUTLASS 3.x GEMM launched as a programmatic dependent of the stream's previous kernel (grid_dependency.cuh says
// what that buys): for the grouped GEMMs, whose tables a prologue kernel writes just before them. Only the kernel
// templates include it; nothing here includes libtorch.
#pragma once

#include <atomic>
#include <cstddef>

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>

#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/gemm_params.h"
#include "sm90/common/grid_dependency.cuh"

namespace fp8ext::sm90 {

// CUTLASS's kernel body behind a wait for the grid before it. CUTLASS's pointer-array kernels read their tables
// without waiting (they never execute griddepcontrol.wait), so launched as programmatic dependents as they are they
// could read the tables before the prologue has written them. A block leaves before CUTLASS's setup where
// guard.skip(params), called by every thread after the wait, says so. The guard is an argument, so that one
// instantiation serves launches that skip and launches that never do (grouped_gemm.cuh's SkipWithoutTiles).
template <class GemmKernel, class Guard>
__global__ void __launch_bounds__(GemmKernel::MaxThreadsPerBlock, GemmKernel::MinBlocksPerMultiprocessor)
    dependent_gemm(CUTLASS_GRID_CONSTANT const typename GemmKernel::Params params, const Guard guard) {
  pdl::wait_for_prior_grids();
  if (guard.skip(params)) return;
  extern __shared__ char smem[];
  GemmKernel op;
  op(params, smem);
}

// run_gemm's steps (cutlass_common.cuh), with the kernel launched as a programmatic dependent of the stream's
// previous kernel (the prologue, or in a split call the other GEMM), so that its blocks are launched while that one
// runs and start the moment it completes. A plain launch with FP8EXT_PDL=0.
template <class Gemm, class Guard>
LaunchResult run_dependent_gemm(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream, const Guard guard) {
  using GemmKernel = typename Gemm::GemmKernel;
  static_assert(cute::size(typename GemmKernel::ClusterShape{}) == 1,
                "a plain launch: CUTLASS launches kernels of one-CTA clusters without a cluster attribute");
  cutlass::Status status = Gemm::can_implement(args);
  if (status != cutlass::Status::kSuccess) return {false, "can_implement", cutlass::cutlassGetStatusString(status)};
  if (Gemm::get_workspace_size(args) > workspace_bytes) {
    return {false, "workspace", "the workspace passed in is smaller than workspace_size()"};
  }
  status = GemmKernel::initialize_workspace(args, workspace, stream, nullptr);
  if (status != cutlass::Status::kSuccess) return {false, "initialize", cutlass::cutlassGetStatusString(status)};
  const typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(args, workspace);
  static std::atomic<bool> smem_raised[kMaxDevices] = {};
  const int device = args.hw_info.device_id;
  if (device < 0 || device >= kMaxDevices || !smem_raised[device].load(std::memory_order_acquire)) {
    const cudaError_t err = cudaFuncSetAttribute(dependent_gemm<GemmKernel, Guard>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 GemmKernel::SharedStorageSize);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return {false, "initialize", cudaGetErrorString(err)};
    }
    if (device >= 0 && device < kMaxDevices) smem_raised[device].store(true, std::memory_order_release);
  }
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = GemmKernel::get_grid_shape(params);
  config.blockDim = GemmKernel::get_block_shape();
  config.dynamicSmemBytes = GemmKernel::SharedStorageSize;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl::enabled() ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&config, dependent_gemm<GemmKernel, Guard>, params, guard);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return {false, "launch", cudaGetErrorString(err)};
  }
  return {};
}

}  // namespace fp8ext::sm90
