// The one validation of fp8ext::scaled_grouped_mm's contract, on tensor metadata alone (scaled_mm_checks.h's
// TensorMeta), for the eager backends and the fake implementation (the _check_scaled_grouped_mm_meta op) alike.
//
// The op multiplies G pairs of matrices in one call, out_g = (a_g @ b_g) * scales (+ bias_g), in one of three
// layouts (torch._scaled_grouped_mm's, whose argument order it follows):
//
//   2d x 3d   a [T, K] holds every group's rows, the rows of group g being offs[g-1] <= r < offs[g] (offs[-1] = 0);
//             b [G, K, N], each b_g column-major (w.transpose(-2, -1) of expert weights w [G, N, K]);
//             out [T, N]. The MoE forward and the gradient of its input.
//   3d x 3d   a [G, M, K], b [G, K, N], no offs; out [G, M, N].
//   2d x 2d   a [M, K_total], b [K_total, N] column-major, group g owning the K slice offs[g-1] <= k < offs[g];
//             out [G, M, N]. The gradient of the expert weights.
//   masked    (scaled_grouped_mm_masked) 3d x 3d with masked_m [G] int32: group g's rows are its first masked_m[g]
//             of M; the rows past them are not written. Decode under CUDA graphs: fixed shapes, counts on the device.
//
// Scales, fp32:
//   row-wise   one per row of a and one per column of b, in torch's shapes: scale_a [T] and scale_b [G, N]
//              (2d x 3d), [G, M] and [G, N] (3d x 3d), [G * M] and [G * N] (2d x 2d);
//   block-wise (DeepSeek-V3) one per 1 x 128 group of a row of a and one per 128 x 128 block of each b_g: scale_a
//              [T, ceil(K / 128)] or [G, M, ceil(K / 128)], scale_b [G, ceil(K / 128), ceil(N / 128)] taken as
//              s.transpose(-2, -1) of the weights' [G, ceil(N / 128), ceil(K / 128)] scales s. Not in 2d x 2d,
//              whose K slices need not fall on 128-element blocks.
// The form is told by scale_a's rank (one more dimension for block-wise), so no shape means both.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/scaled_mm_checks.h"

namespace fp8ext {

enum class GroupedLayout { k2d3d, k3d3d, k2d2d };

constexpr int64_t kMaxGroups = 1023;  // offs and per-group tables are sized by G on the host; see the docs

struct GroupedMmProblem {
  GroupedLayout layout = GroupedLayout::k2d3d;
  int64_t groups = 0;  // G
  int64_t M = 0;       // a's rows: all groups' (2d x 3d), one group's (3d x 3d, 2d x 2d)
  int64_t N = 0;
  int64_t K = 0;       // one group's depth (2d x 3d, 3d x 3d), all groups' (2d x 2d)
  bool blockwise = false;
  bool masked = false;  // scaled_grouped_mm_masked: 3d x 3d with valid rows per group in masked_m
  ScalarType out_dtype = ScalarType::BFloat16;

  // The scaled_mm problem of one group of `rows` rows and depth `depth` (scaled_mm_checks.h).
  ScaledMmProblem group(int64_t rows, int64_t depth) const {
    ScaledMmProblem p;
    p.M = rows;
    p.N = N;
    p.K = depth;
    p.blockwise = blockwise;
    p.scale_a_per_row = p.scale_b_per_col = !blockwise;
    p.out_dtype = out_dtype;
    return p;
  }
};

// Checks every argument (a masked call's expected_m too: a hint of rows per group, within [0, M]) and throws
// (op_errors.h) naming the argument, what was expected and what was given, before anything is allocated or
// launched. offs is checked as a tensor here; its values are the backends' to check where they can read them
// without a device synchronisation (the CPU backend).
GroupedMmProblem check_scaled_grouped_mm_meta(const TensorMeta& a, const TensorMeta& b, const TensorMeta& scale_a,
                                              const TensorMeta& scale_b, const std::optional<TensorMeta>& offs,
                                              const std::optional<TensorMeta>& bias,
                                              std::optional<ScalarType> out_dtype,
                                              const std::optional<TensorMeta>& masked_m = std::nullopt,
                                              std::optional<int64_t> expected_m = std::nullopt);

// Checks offs's values (G int32 ends, read on the host): non-decreasing, within [0, extent] where extent is a's rows
// (2d x 3d) or K_total (2d x 2d), and multiples of 16 along K (each K slice is read by TMA in 16-byte units).
void check_grouped_offsets(const int32_t* offs, const GroupedMmProblem& p);

// Checks masked_m's values (G int32 row counts, read on the host): each within [0, M].
void check_masked_counts(const int32_t* masked_m, const GroupedMmProblem& p);

}  // namespace fp8ext
