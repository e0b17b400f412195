// Where each group of a grouped call lies, found on the device from GroupedParams (offs or a masked call's counts
// live there only): shared by the CUTLASS kernels' prologues (grouped_gemm.cuh, grouped_split.cuh) and the
// hand-written decode kernel (grouped_gemv.cuh). Offsets and counts are clamped into [0, extent], so that values the
// caller got wrong never reach memory outside the tensors. Plain CUDA: no CUTLASS, no libtorch.
#pragma once

#include <cstdint>

#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {

// One group in the user's frame: its first row of a (2d x 3d) or first K (2d x 2d), its rows and depth, and where
// its operands, scales and output start (row i of the group's output at out + i * N).
template <class Element, class ElementD>
struct GroupView {
  int64_t start, rows, depth;
  const Element* a;
  const Element* b;
  const float* scale_a;
  const float* scale_b;
  ElementD* out;
};

__device__ inline int64_t clamped(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Rows of every group: a 2d x 3d call's last offset; the other forms give every group the same rows.
__device__ inline int64_t total_rows(const GroupedParams& p) {
  return p.form == GroupedForm::k2d3d ? clamped(p.offs[p.groups - 1], 0, p.M) : p.M * p.groups;
}

// Group g, offsets and counts clamped into range.
template <class Element, class ElementD>
__device__ GroupView<Element, ElementD> find_group(const GroupedParams& p, int64_t g) {
  const bool along_k = p.form == GroupedForm::k2d2d;
  const int64_t extent = along_k ? p.K : p.M;
  GroupView<Element, ElementD> grp;
  grp.start = (p.offs == nullptr || g == 0) ? 0 : clamped(p.offs[g - 1], 0, extent);
  const int64_t end = p.offs == nullptr ? extent : clamped(p.offs[g], grp.start, extent);
  grp.rows = p.form == GroupedForm::k2d3d ? end - grp.start : p.counts != nullptr ? clamped(p.counts[g], 0, p.M) : p.M;
  grp.depth = along_k ? end - grp.start : p.K;
  grp.out = static_cast<ElementD*>(p.out) + (p.form == GroupedForm::k2d3d ? grp.start * p.N : g * p.M * p.N);
  const int64_t row0 = p.form == GroupedForm::k2d3d ? grp.start : 0;
  const int64_t k0 = along_k ? grp.start : 0;
  grp.a = static_cast<const Element*>(p.a) + g * p.a_group_stride + row0 * p.lda + k0;
  grp.b = static_cast<const Element*>(p.b) + g * p.b_group_stride + k0;
  grp.scale_a = p.scale_a + g * p.scale_a_group_stride + row0 * p.sa_stride_m;
  grp.scale_b = p.scale_b + g * p.scale_b_group_stride;
  return grp;
}

// Zeros in the rows of a 2d x 3d output past the last offset (no group's rows, so no kernel writes them), written by
// `blocks` blocks of which this is `block`.
template <class ElementD>
__device__ void zero_tail_rows(const GroupedParams& p, int64_t block, int64_t blocks) {
  if (p.form != GroupedForm::k2d3d) return;
  auto* out = static_cast<ElementD*>(p.out);
  const int64_t end = clamped(p.offs[p.groups - 1], 0, p.M);
  const int64_t first = end * p.N, total = p.M * p.N;
  const int64_t step = blocks * blockDim.x;
  for (int64_t i = first + block * blockDim.x + threadIdx.x; i < total; i += step) out[i] = ElementD(0.0f);
}

}  // namespace fp8ext::sm90
