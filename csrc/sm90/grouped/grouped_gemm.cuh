// The grouped kernel template: one KernelConfig -> a prologue kernel that writes the per-group tables, then one
// CUTLASS 3.x pointer-array GEMM (TMA, warp-specialized, persistent over every group's tiles) with the row-wise
// epilogue in pointer-array form.
//
// For group g with rows [r0, r1) of a (2d x 3d), or all M rows (3d x 3d, 2d x 2d), and depth [k0, k1):
//
//     out_g[i, j] = round_to_out( fma( scale_a_g[i] * scale_b_g[j], sum_k a_g[i, k] * b_g[k, j], bias[g, j] ) )
//
// the maths of rowwise_epilogue.cuh (scales multiplied first, one rounding), per group. Not swapped, the MMA's A is
// a_g (tokens) and D = out_g row-major; swapped, the MMA's A is b_g^T (the expert's weight rows), its B is a_g and
// D = out_g^T column-major (the same memory), so that a group of a few tokens fills the MMA's narrow N side.
//
// Group sizes live on the device (offs), so nothing here reads them on the host: the prologue computes each group's
// start, size, pointers and strides from offs and the base pointers, clamping offsets into [0, extent] so that bad
// values never reach memory outside the tensors (their values are the caller's to get right on CUDA; the CPU
// backend checks them). Groups without rows cost nothing (CUTLASS's grouped scheduler visits no tile of them). The
// prologue also writes what no GEMM tile writes: zeros in the rows of a 2d x 3d output past the last offset, and
// the bias (or zeros) of a group of depth 0 (a 2d x 2d group whose K slice is empty, or K = 0), which gets no tile,
// as a K of 0 would leave the accumulators unset.
// Only this header and the generated kernels/ include CUTLASS; nothing here includes libtorch.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <cutlass/functional.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/kernel_config.h"
#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {

// CUTLASS's pointer-array schedules: pingpong or cooperative, fast or precise (fp32 promotion) accumulation.
template <Schedule S, Accum A>
struct GroupedSchedule {
  static constexpr bool kPingpong = S == Schedule::kPingpong;
  static constexpr bool kFast = A == Accum::kFast;
  using mainloop = cute::conditional_t<
      kPingpong,
      cute::conditional_t<kFast, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>,
      cute::conditional_t<kFast, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>>;
  using epilogue = cute::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                       cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  static_assert(S == Schedule::kPingpong || S == Schedule::kCooperative, "grouped kernels: pingpong or cooperative");
};

template <class Config>
struct GroupedRowwiseGemm {
  static constexpr bool kSwapAB = Config::kSwapAB;
  using Element = cutlass::float_e4m3_t;
  using ElementD = typename OutElement<Config::kOut>::type;
  using LayoutA = cutlass::layout::RowMajor;     // MMA A: rows of K contiguous bytes
  using LayoutB = cutlass::layout::ColumnMajor;  // MMA B: columns of K contiguous bytes
  using LayoutD = cute::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignmentAB = 16;
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using TileShape = cute::Shape<cute::Int<Config::kTileM>, cute::Int<Config::kTileN>, cute::Int<Config::kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<Config::kClusterM>, cute::Int<Config::kClusterN>, cute::_1>;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Problem = typename ProblemShape::UnderlyingProblemShape;

  // Per-group pointers (the broadcast nodes' array-of-pointers form). A group's token scales start at any row, so
  // they are read one float at a time (alignment 1); the weights' scales and the bias start at g * N, N a multiple
  // of 16, and keep the nodes' vector loads.
  template <int Alignment>  // one float per row of D
  using ColVector = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float,
                                                                cute::Stride<cute::_1, cute::_0, cute::_0>, Alignment>;
  template <int Alignment>  // one float per column of D
  using RowVector = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float,
                                                                cute::Stride<cute::_0, cute::_1, cute::_0>, Alignment>;
  using TokenScaleD = cute::conditional_t<kSwapAB, RowVector<1>, ColVector<1>>;
  using WeightScaleD = cute::conditional_t<kSwapAB, ColVector<4>, RowVector<4>>;
  using RowScale = cute::conditional_t<kSwapAB, WeightScaleD, TokenScaleD>;  // one per row of D
  using ColScale = cute::conditional_t<kSwapAB, TokenScaleD, WeightScaleD>;  // one per column of D
  using Bias = BiasBroadcast<TileShape, ElementD*, kSwapAB>;                  // bias[g, j]; a null table reads 0
  using Scale = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, RowScale, ColScale>;
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, float, kRound>, Scale,
      cutlass::epilogue::fusion::Sm90AccFetch, Bias>;

  using Schedules = GroupedSchedule<Config::kSchedule, Config::kAccum>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignmentD, ElementD, LayoutD*,
      kAlignmentD, typename Schedules::epilogue, EVT>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlignmentAB, Element, LayoutB*,
      kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedules::mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-group tables the prologue writes and the kernel reads, carved from the front of the workspace.
  struct Tables {
    Problem* problems;
    const Element** a;
    const Element** b;
    ElementD** d;
    const float** row_scale;
    const float** col_scale;
    const ElementD** bias;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
  };

  static constexpr size_t round_up(size_t n) { return (n + 127) / 128 * 128; }

  static size_t tables_bytes(int64_t G) {
    const size_t g = static_cast<size_t>(G);
    return round_up(g * sizeof(Problem)) + 6 * round_up(g * sizeof(void*)) + round_up(g * sizeof(StrideA)) +
           round_up(g * sizeof(StrideB)) + round_up(g * sizeof(StrideD));
  }

  static Tables carve(void* workspace, int64_t G) {
    char* p = static_cast<char*>(workspace);
    const size_t g = static_cast<size_t>(G);
    const auto take = [&](size_t bytes) {
      char* at = p;
      p += round_up(bytes);
      return at;
    };
    Tables t;
    t.problems = reinterpret_cast<Problem*>(take(g * sizeof(Problem)));
    t.a = reinterpret_cast<const Element**>(take(g * sizeof(void*)));
    t.b = reinterpret_cast<const Element**>(take(g * sizeof(void*)));
    t.d = reinterpret_cast<ElementD**>(take(g * sizeof(void*)));
    t.row_scale = reinterpret_cast<const float**>(take(g * sizeof(void*)));
    t.col_scale = reinterpret_cast<const float**>(take(g * sizeof(void*)));
    t.bias = reinterpret_cast<const ElementD**>(take(g * sizeof(void*)));
    t.stride_a = reinterpret_cast<StrideA*>(take(g * sizeof(StrideA)));
    t.stride_b = reinterpret_cast<StrideB*>(take(g * sizeof(StrideB)));
    t.stride_d = reinterpret_cast<StrideD*>(take(g * sizeof(StrideD)));
    return t;
  }

  static typename Gemm::Arguments arguments(const GroupedParams& p, const Tables& t) {
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {static_cast<int>(p.groups), t.problems, nullptr},  // no host copy of the problems: they are the device's
        {t.a, t.stride_a, t.b, t.stride_b},
        {{{{t.row_scale, 0.0f, {}}, {t.col_scale, 0.0f, {}}, {}},                       // Scale = RowScale * ColScale
          {},                                                                              // Acc
          {p.bias == nullptr ? nullptr : t.bias, ElementD(0), {}},                         // Bias (null -> 0)
          {}},
         nullptr, t.stride_d, t.d, t.stride_d}};
    args.hw_info.device_id = p.device_id;
    args.hw_info.sm_count = p.sm_count;
    return args;
  }
};

// A stride of a K-contiguous operand or of D, with its one dynamic mode set to `ld`.
template <class Stride>
__device__ Stride leading_stride(int64_t ld) {
  Stride s{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>) {
    cute::get<1>(s) = ld;
  } else {
    cute::get<0>(s) = ld;
  }
  return s;
}

__device__ inline int64_t clamped(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

constexpr int kPrologueThreads = 256;
constexpr int kFillSplit = 8;    // blocks per group along grid.y, for the fill of a group of depth 0
constexpr int kTailBlocks = 16;  // blocks after the groups', for the 2d x 3d tail rows

// grid (G + kTailBlocks, kFillSplit): block (g, 0), thread 0 writes group g's tables; blocks (g, *) fill group g when
// its depth is 0; blocks past G zero the rows of a 2d x 3d output past the last offset.
template <class G>
__global__ void __launch_bounds__(kPrologueThreads) grouped_prologue(GroupedParams p, typename G::Tables t) {
  using ElementD = typename G::ElementD;
  using Element = typename G::Element;
  const int64_t g = blockIdx.x;
  const bool along_k = p.form == GroupedForm::k2d2d;
  const int64_t extent = along_k ? p.K : p.M;
  auto* out = static_cast<ElementD*>(p.out);
  if (g >= p.groups) {
    if (p.form != GroupedForm::k2d3d) return;
    const int64_t end = clamped(p.offs[p.groups - 1], 0, p.M);
    const int64_t first = end * p.N, total = p.M * p.N;
    const int64_t step = int64_t(gridDim.x - p.groups) * gridDim.y * blockDim.x;
    for (int64_t i = first + ((g - p.groups) * gridDim.y + blockIdx.y) * blockDim.x + threadIdx.x; i < total;
         i += step) {
      out[i] = ElementD(0.0f);
    }
    return;
  }
  const int64_t start = (p.offs == nullptr || g == 0) ? 0 : clamped(p.offs[g - 1], 0, extent);
  const int64_t end = p.offs == nullptr ? extent : clamped(p.offs[g], start, extent);
  const int64_t rows = p.form == GroupedForm::k2d3d ? end - start : p.M;
  const int64_t depth = along_k ? end - start : p.K;
  ElementD* out_g = out + (p.form == GroupedForm::k2d3d ? start * p.N : g * p.M * p.N);
  if (depth == 0) {  // rows that no tile writes: bias or zeros
    const auto* bias = static_cast<const ElementD*>(p.bias);
    const int64_t total = rows * p.N, step = int64_t(gridDim.y) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; i < total; i += step) {
      out_g[i] = bias == nullptr ? ElementD(0.0f) : bias[g * p.N + i % p.N];
    }
  }
  if (blockIdx.y != 0 || threadIdx.x != 0) return;
  const int64_t a_row0 = p.form == GroupedForm::k2d3d ? start : 0;
  const int64_t k0 = along_k ? start : 0;
  const auto* a_g = static_cast<const Element*>(p.a) + g * p.a_group_stride + a_row0 * p.lda + k0;
  const auto* b_g = static_cast<const Element*>(p.b) + g * p.b_group_stride + k0;
  const float* sa_g = p.form == GroupedForm::k2d3d ? p.scale_a + start : p.scale_a + g * p.scale_a_group_stride;
  const float* sb_g = p.scale_b + g * p.scale_b_group_stride;
  // A group with no work gets no tile: no rows, or (2d x 2d) an empty K slice, filled above.
  const int m = static_cast<int>(depth == 0 ? 0 : rows), n = static_cast<int>(p.N), k = static_cast<int>(depth);
  constexpr bool swap = G::kSwapAB;  // the MMA's A is the expert's weight, its B the group's tokens
  t.problems[g] = swap ? typename G::Problem(n, m, k) : typename G::Problem(m, n, k);
  t.a[g] = swap ? b_g : a_g;
  t.b[g] = swap ? a_g : b_g;
  t.stride_a[g] = leading_stride<typename G::StrideA>(swap ? p.ldb : p.lda);
  t.stride_b[g] = leading_stride<typename G::StrideB>(swap ? p.lda : p.ldb);
  t.row_scale[g] = swap ? sb_g : sa_g;
  t.col_scale[g] = swap ? sa_g : sb_g;
  t.d[g] = out_g;
  t.stride_d[g] = leading_stride<typename G::StrideD>(p.N);
  t.bias[g] = p.bias == nullptr ? nullptr : static_cast<const ElementD*>(p.bias) + g * p.N;
}

template <class Config>
size_t grouped_workspace_size(const GroupedParams& p) {
  using G = GroupedRowwiseGemm<Config>;
  const size_t tables = G::tables_bytes(p.groups);
  return tables + G::Gemm::get_workspace_size(G::arguments(p, G::carve(nullptr, p.groups)));
}

template <class Config>
LaunchResult grouped_launch(const GroupedParams& p) {
  using G = GroupedRowwiseGemm<Config>;
  const size_t tables = G::tables_bytes(p.groups);
  if (p.workspace_bytes < tables) return {false, "workspace", "smaller than grouped_workspace_size()"};
  const typename G::Tables t = G::carve(p.workspace, p.groups);
  const dim3 grid(static_cast<unsigned>(p.groups + kTailBlocks), kFillSplit);
  grouped_prologue<G><<<grid, kPrologueThreads, 0, p.stream>>>(p, t);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return {false, "prologue", cudaGetErrorString(err)};
  }
  return run_gemm<typename G::Gemm>(G::arguments(p, t), static_cast<char*>(p.workspace) + tables,
                                    p.workspace_bytes - tables, p.stream);
}

}  // namespace fp8ext::sm90

// Used once by each generated translation unit in kernels/: the grouped kernel for CONFIG, registered under NAME.
#define FP8EXT_SM90_GROUPED_KERNEL(NAME, CONFIG)                                                                  \
  namespace {                                                                                                    \
  const bool kRegistered = ::fp8ext::sm90::register_grouped_kernel(                                              \
      {NAME, CONFIG::traits(), &::fp8ext::sm90::grouped_launch<CONFIG>,                                          \
       &::fp8ext::sm90::grouped_workspace_size<CONFIG>});                                                        \
  }
