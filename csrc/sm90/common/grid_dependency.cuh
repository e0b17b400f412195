// Programmatic dependent launch (PDL) for the small kernels of a decode step: the activation quantize
// (quantize_rowwise.cu) and the decode GEMMs (sm90/gemv_cuda_core.cuh, sm90/gemv_tensor_core.cuh); and for the grouped
// GEMMs behind their prologue (dependent_gemm.cuh).
//
// Why: at decode, a Float8Linear is two short kernels in a row, quantize(x) then the GEMV, and in a CUDA graph the
// GEMV cannot start streaming its weight, the bulk of its time, until the quantize has finished. Launched with
// cudaLaunchAttributeProgrammaticStreamSerialization, a kernel may start while the kernel before it in the stream
// still runs, once that one has executed griddepcontrol.launch_dependents (or exited). Its
// griddepcontrol.wait then blocks until the previous grid has completed and its writes are visible.
//
// Each of these kernels also calls launch_dependents as soon as its own wait returns, so that the next of them (the
// quantize for k_proj after q_proj's GEMV, say) is resident and waiting when this one finishes; a kernel launched
// the ordinary way after them is unaffected. A dependent can start only once every block of the grid before it has
// started, so the blocks it occupies never hold back the grid it waits for.
//
// The rule that keeps this correct: before wait_for_prior_grids() a kernel reads nothing and writes nothing. The
// decode GEMMs only issue L2 prefetches of their weight slice there. A prefetch cannot return stale data: the L2
// is the GPU's point of coherence, every write of the previous kernel lands there, and the values the GEMM uses
// are loaded after the wait. So the overlap needs no promise about who wrote the weight. Since every kernel waits
// before its first read, completion is transitive: when the GEMM's wait returns, the quantize has completed, and
// the quantize completed only after the kernel before it had.
//
// With FP8EXT_PDL=0 in the environment (read once) kernels are launched without the attribute, where the
// instructions are no-ops, and the decode GEMMs skip the prefetch: plain stream order, as before.
// Plain CUDA: no libtorch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace fp8ext::pdl {

// Blocks until every grid this one depends on has completed and its memory is visible (a no-op when the kernel
// was not launched as a dependent).
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream, if launched as a dependent, start now. Its own wait still waits for this
// grid to complete, so where this is called affects only timing.
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks the L2 to fetch [ptr, ptr + bytes): ptr 16-byte aligned, bytes a multiple of 16. A hint only: it moves no
// data into registers or L1 and never makes a later load return anything but the current value.
__device__ __forceinline__ void prefetch_l2(const void* ptr, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<uint64_t>(ptr)), "r"(bytes)
               : "memory");
#endif
}

// The most a decode GEMM's block prefetches before its wait. The resident blocks (about 264 on an H200) then ask
// for at most 17 MB, a third of the L2, so that nothing prefetched is evicted before it is read; and a quantize
// overlaps with only a few microseconds of streaming anyway (3.8 TB/s for 3 us is 11 MB across the GPU).
constexpr int64_t kPrefetchBytesPerBlock = 64 * 1024;

// The blocks of the first wave of `Kernel` (launched with `block_threads` threads and no dynamic shared memory) on
// `sm_count` SMs: those that can start while the previous grid still runs. A decode GEMM prefetches in these only:
// a later block starts after the wait has been satisfied, and its prefetch would only duplicate the loads that
// follow it (which measured slower). The occupancy is asked once per kernel.
template <auto Kernel>
int first_wave_blocks(int block_threads, int sm_count) {
  static const int per_sm = [block_threads] {
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, block_threads, 0) == cudaSuccess ? n : 1;
  }();
  return per_sm * sm_count;
}

// Whether kernels are launched as dependents: on unless the environment has FP8EXT_PDL=0 (read once).
inline bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FP8EXT_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// kernel<<<grid, block, 0, stream>>>(args...), launched as a dependent of the stream's previous kernel when
// enabled(). The kernel must call wait_for_prior_grids() before its first global memory access.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// A decode GEMM's launch: kernel(p, prefetch_blocks) as a dependent, the first wave's blocks prefetching (none
// with FP8EXT_PDL=0). Params has sm_count and stream.
template <auto Kernel, class Params>
cudaError_t launch_decode(const Params& p, dim3 grid, int block_threads) {
  const int prefetch_blocks = enabled() ? first_wave_blocks<Kernel>(block_threads, p.sm_count) : 0;
  return launch(Kernel, grid, dim3(block_threads), p.stream, p, prefetch_blocks);
}

}  // namespace fp8ext::pdl
