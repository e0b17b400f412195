// What the row-wise (rowwise_gemm.cuh) and block-scaled (blockwise_gemm.cuh) kernel templates share: the output
// element types, the bias node of their epilogues, and the CUTLASS launch sequence. Only the kernel templates
// include it; nothing here includes libtorch.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>

#include "sm90/gemm_params.h"
#include "sm90/kernel_config.h"

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

// can_implement, the workspace's size, initialize, run, and the launch's own error: the first step that fails is
// reported (gemm_params.h, LaunchResult).
template <class Gemm>
LaunchResult run_gemm(const typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    return {false, "can_implement", cutlass::cutlassGetStatusString(status)};
  }
  if (Gemm::get_workspace_size(args) > workspace_bytes) {
    return {false, "workspace", "the workspace passed in is smaller than workspace_size()"};
  }
  status = gemm.initialize(args, workspace, stream);
  if (status != cutlass::Status::kSuccess) {
    return {false, "initialize", cutlass::cutlassGetStatusString(status)};
  }
  status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess) {
    return {false, "run", cutlass::cutlassGetStatusString(status)};
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

}  // namespace fp8ext::sm90
