// A kernel's CUTLASS launch parameters kept for the calls it has seen, so that a repeated call only launches.
//
// Why: before every launch CUTLASS checks the arguments (can_implement) and turns them into the kernel's parameters
// on the host (to_underlying_arguments: the TMA descriptors of A, B and D, encoded by the driver, and the tile
// scheduler's). For an eager call of a decode-sized GEMM that is a large part of its host time, and an eager caller
// repeats its calls: the same weights, and activations and outputs at the same addresses, which torch's caching
// allocator hands out again step after step. The parameters are a function of the arguments alone (GemmParams'
// fields below: addresses, sizes, strides, the scale and bias pointers, the scheduler options, the device and its SM
// count), so a call whose fields all equal a kept call's launches with that call's parameters: the same kernel,
// the same bits. Nothing of the memory behind the addresses is kept, only the addresses.
//
// Kernels with a workspace (stream-K) are not kept: their parameters hold the call's workspace. Each thread keeps
// its own, at most kMostKept calls per kernel; past that it starts again.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/gemm_params.h"

namespace fp8ext::sm90 {

using LaunchKey = std::array<uint64_t, 17>;

// Every field of GemmParams that the row-wise kernels' arguments read (RowwiseGemm::arguments).
inline LaunchKey launch_key(const GemmParams& p) {
  auto u = [](const void* ptr) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)); };
  const uint64_t flags = uint64_t(p.scale_a_per_row) | uint64_t(p.scale_b_per_col) << 1 | uint64_t(p.a_is_e5m2) << 2;
  return {uint64_t(p.M), uint64_t(p.N), uint64_t(p.K), u(p.a), uint64_t(p.lda), u(p.b), uint64_t(p.ldb),
          u(p.out), uint64_t(p.ldo), u(p.scale_a), u(p.scale_b), u(p.bias), flags, uint64_t(p.device_id),
          uint64_t(p.sm_count), uint64_t(p.sched.raster), uint64_t(int64_t(p.sched.max_swizzle))};
}

struct LaunchKeyHash {
  size_t operator()(const LaunchKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (uint64_t w : k) h = (h ^ w) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

inline constexpr size_t kMostKept = 1024;

// run_gemm's steps for a kernel without a workspace, with the parameters of a call seen before taken as they were;
// `make_args()` gives the call's arguments, asked only for a call not seen before.
template <class Gemm, class MakeArgs>
LaunchResult run_gemm_kept(const MakeArgs& make_args, const LaunchKey& key, cudaStream_t stream) {
  using GemmKernel = typename Gemm::GemmKernel;
  using Params = typename GemmKernel::Params;
  thread_local std::unordered_map<LaunchKey, Params, LaunchKeyHash> kept;
  auto found = kept.find(key);
  if (found == kept.end()) {
    const typename Gemm::Arguments args = make_args();
    const cutlass::Status status = Gemm::can_implement(args);
    if (status != cutlass::Status::kSuccess) {
      return {false, "can_implement", cutlass::cutlassGetStatusString(status)};
    }
    if (Gemm::get_workspace_size(args) != 0) {
      return {false, "workspace", "a kernel with a workspace is launched without kept parameters"};
    }
    if (const cudaError_t err = raise_smem_limit_once<GemmKernel>(args.hw_info.device_id); err != cudaSuccess) {
      cudaGetLastError();  // clear it, as CUTLASS does
      return {false, "initialize", cudaGetErrorString(err)};
    }
    if (kept.size() >= kMostKept) kept.clear();
    found = kept.emplace(key, GemmKernel::to_underlying_arguments(args, nullptr)).first;
  }
  const cutlass::Status status = Gemm::run(found->second, stream);
  if (status != cutlass::Status::kSuccess) {
    return {false, "run", cutlass::cutlassGetStatusString(status)};
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return {false, "launch", cudaGetErrorString(err)};
  return {};
}

}  // namespace fp8ext::sm90
