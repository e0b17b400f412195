// The way into and out of a mixture-of-experts layer's grouped GEMMs (fp8ext.moe_dispatch, fp8ext.moe_combine):
// the plain-C++ interface of their kernels (moe_routing.cu). No libtorch here.
//
// T tokens, each routed to k experts of G: slot i = t * k + j holds expert e_i = top_k_index[t, j]. The routed rows
// are the slots sorted by expert, stably (slots of one expert keep their order):
//   offs[g]   = #{i : 0 <= e_i <= g}                    the end of expert g's rows (scaled_grouped_mm's offs)
//   pos[i]    = the row of slot i in that order; kMoeSkipped (-2) when e_i == G, -1 when e_i is otherwise outside
//               [0, G) (neither slot has a row)
//   tokens[r] = i / k for the slot i whose row is r; 0 for the rows past offs[G - 1] that slots without one leave
// Dispatch then quantizes row r as hidden[tokens[r]] (quantize_rowwise with a row index), and combine returns
//   out[t, :] = sum over j = 0 .. k - 1, in that order, of w[t, j] * o[pos[t * k + j], :]
// in float32 (each product and each sum rounded to float32, no fused multiply-add), rounded once to o's dtype; w is
// taken in o's dtype, over the slots that have a row. A slot with pos = kMoeSkipped adds nothing: id G is how
// transformers' expert parallelism marks a route to an expert another rank holds (its weight 0), and its experts
// modules skip it. A slot with pos = -1 makes its token's row NaN: any other expert id out of range is visible in
// the output instead of silently dropped, and nothing waits for the GPU to report it.
#pragma once

#include <cstdint>

#include "quantize/quantize_rowwise.h"

namespace fp8ext {

// The route kernel is one CTA with a thread per slot: T * k up to this many (the decode sizes the op is for).
constexpr int64_t kMoeRouteMaxSlots = 1024;
// Experts up to this many (the CTA scans their counts, one per thread).
constexpr int64_t kMoeMaxExperts = 1024;
// pos of a slot routed to expert id G: no row, and nothing added for it.
constexpr int32_t kMoeSkipped = -2;

struct MoeRouteParams {
  const void* ids = nullptr;  // top_k_index, contiguous [T, k]
  bool ids_int64 = true;      // else int32
  int64_t slots = 0;          // T * k
  int k = 1;
  int num_experts = 1;
  int32_t* offs = nullptr;    // [G]
  int32_t* tokens = nullptr;  // [slots]
  int32_t* pos = nullptr;     // [slots]
};

struct MoeCombineParams {
  const void* o = nullptr;      // [rows, H], contiguous
  int64_t rows = 0;
  const void* w = nullptr;      // [T, k], contiguous, o's dtype
  const int32_t* pos = nullptr; // [T, k], contiguous
  void* out = nullptr;          // [T, H], contiguous, o's dtype
  QuantSrc dtype = QuantSrc::kBF16;  // o's, w's and out's: bf16, fp16 or fp32
  int64_t tokens = 0;           // T
  int k = 1;
  int64_t H = 0;                // a multiple of 16
};

}  // namespace fp8ext

#if defined(FP8EXT_WITH_CUDA)
#include <cuda_runtime_api.h>

namespace fp8ext {
// Each launches its kernel on `stream` and returns the launch's error; neither allocates.
cudaError_t launch_moe_route(const MoeRouteParams& p, cudaStream_t stream);
cudaError_t launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream);
}  // namespace fp8ext
#endif
