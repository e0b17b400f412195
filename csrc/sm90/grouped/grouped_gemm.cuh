// The grouped kernel template: one GroupedConfig -> a prologue kernel that writes the per-group tables, then one
// CUTLASS 3.x pointer-array GEMM (TMA, warp-specialized, persistent over every group's tiles), launched as a
// programmatic dependent of the prologue. The split kernels, which send each group to one of two GEMMs on the device,
// are in grouped_split.cuh.
//
// For group g with rows [r0, r1) of a (2d x 3d), or all M rows (3d x 3d, 2d x 2d), and depth [k0, k1):
//
//   row-wise:    out_g[i, j] = round_to_out( fma( scale_a_g[i] * scale_b_g[j], sum_k a_g[i, k] b_g[k, j], bias[g, j] ))
//                the maths of rowwise_epilogue.cuh (scales multiplied first, one rounding), per group;
//   block-wise:  out_g[i, j] = round_to_out( acc[i, j] + bias[g, j] ), acc the fp32 sum over K groups q of
//                scale_a_g(i, q) * scale_b_g(q, j / 128) * (the group's partial product), as blockwise_gemm.cuh
//                computes it (CUTLASS's blockwise mainloop, scales read with cp.async through runtime strides).
//
// Not swapped, the MMA's A is a_g (tokens) and D = out_g row-major; swapped, the MMA's A is b_g^T (the expert's weight
// rows), its B is a_g and D = out_g^T column-major (the same memory), so that a group of a few tokens fills the MMA's
// narrow N side.
//
// Group sizes live on the device (offs), so nothing here reads them on the host: the prologue computes each group's
// start, size, pointers, strides and scale layouts from offs (or a masked call's row counts) and the base pointers,
// clamping offsets and counts into [0, extent] so that bad values never reach memory outside the tensors (their values
// are the caller's to get right on CUDA; the CPU backend checks them). Groups without rows cost nothing (CUTLASS's
// grouped scheduler visits no tile of them). The prologue also writes what no GEMM tile writes: zeros in the rows of a
// 2d x 3d output past the last offset, and the bias (or zeros) of a group of depth 0 (a 2d x 2d group whose K slice is
// empty, or K = 0), which gets no tile, as a K of 0 would leave the accumulators unset.
// Only this header and the generated kernels/ include CUTLASS; nothing here includes libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

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

#include "sm90/blockwise/blockwise_gemm.h"  // kBlockwiseGroupK, kBlockwiseBlockN
#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/dependent_gemm.cuh"
#include "sm90/common/grid_dependency.cuh"
#include "sm90/common/kernel_config.h"
#include "sm90/grouped/grouped_bands.cuh"
#include "sm90/grouped/grouped_groups.cuh"
#include "sm90/grouped/grouped_params.h"

namespace fp8ext::sm90 {

namespace grouped_detail {

namespace fusion = cutlass::epilogue::fusion;

// CUTLASS's pointer-array schedules: pingpong or cooperative; fast, precise (fp32 promotion) or block-wise.
template <Schedule S, Accum A, bool Blockwise>
struct Schedules {
  static constexpr bool kPingpong = S == Schedule::kPingpong;
  static constexpr bool kFast = A == Accum::kFast;
  using pingpong = cute::conditional_t<
      Blockwise, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
      cute::conditional_t<kFast, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>>;
  using cooperative = cute::conditional_t<
      Blockwise, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
      cute::conditional_t<kFast, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>>;
  using mainloop = cute::conditional_t<kPingpong, pingpong, cooperative>;
  using epilogue = cute::conditional_t<kPingpong, cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong,
                                       cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
  static_assert(S == Schedule::kPingpong || S == Schedule::kCooperative, "grouped kernels: pingpong or cooperative");
};

// Cuts the per-group tables from the front of the workspace, each rounded to 128 bytes; with a null base it only
// counts the bytes.
struct Carver {
  char* base;
  size_t groups;
  size_t used = 0;
  template <class T>
  T* take() {
    T* at = base == nullptr ? nullptr : reinterpret_cast<T*>(base + used);
    used += (groups * sizeof(T) + 127) / 128 * 128;
    return at;
  }
};

// A block-scale layout ((gran_mn, blocks_mn), (128, groups_k), 1) with runtime strides, as blockwise_gemm.cuh's: the
// dynamic MN stride keeps the collective on its cp.async scale loads (no stride alignment needed).
template <int GranMN>
using ScaleLayout = cute::Layout<
    cute::Shape<cute::Shape<cute::Int<GranMN>, int32_t>, cute::Shape<cute::Int<kBlockwiseGroupK>, int32_t>, int32_t>,
    cute::Stride<cute::Stride<cute::_0, int64_t>, cute::Stride<cute::_0, int64_t>, int64_t>>;

template <int GranMN>
CUTLASS_HOST_DEVICE ScaleLayout<GranMN> scale_layout(int64_t extent_mn, int64_t extent_k, int64_t stride_mn,
                                                     int64_t stride_k) {
  return cute::make_layout(
      cute::make_shape(cute::make_shape(cute::Int<GranMN>{}, static_cast<int32_t>((extent_mn + GranMN - 1) / GranMN)),
                       cute::make_shape(cute::Int<kBlockwiseGroupK>{},
                                        static_cast<int32_t>((extent_k + kBlockwiseGroupK - 1) / kBlockwiseGroupK)),
                       int32_t(1)),
      cute::make_stride(cute::make_stride(cute::_0{}, stride_mn), cute::make_stride(cute::_0{}, stride_k),
                        int64_t(0)));
}

}  // namespace grouped_detail

template <class Config>
struct GroupedGemm {
  static constexpr bool kSwapAB = Config::kSwapAB;
  static constexpr int kTileM = Config::kTileM;
  static constexpr bool kBlockwise = Config::kBlockwise;
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

  // --- the row-wise epilogue, with per-group pointers (the broadcast nodes' array-of-pointers form). A group's
  // token scales start at any row, so they are read one float at a time (alignment 1); the weights' scales and the
  // bias start at g * N, N a multiple of 16, and keep the nodes' vector loads.
  template <int Alignment>  // one float per row of D
  using ColVector = grouped_detail::fusion::Sm90ColBroadcast<0, TileShape, float*, float,
                                                             cute::Stride<cute::_1, cute::_0, cute::_0>, Alignment>;
  template <int Alignment>  // one float per column of D
  using RowVector = grouped_detail::fusion::Sm90RowBroadcast<0, TileShape, float*, float,
                                                             cute::Stride<cute::_0, cute::_1, cute::_0>, Alignment>;
  using TokenScaleD = cute::conditional_t<kSwapAB, RowVector<1>, ColVector<1>>;
  using WeightScaleD = cute::conditional_t<kSwapAB, ColVector<4>, RowVector<4>>;
  using RowScale = cute::conditional_t<kSwapAB, WeightScaleD, TokenScaleD>;  // one per row of D
  using ColScale = cute::conditional_t<kSwapAB, TokenScaleD, WeightScaleD>;  // one per column of D
  using Bias = BiasBroadcast<TileShape, ElementD*, kSwapAB>;                  // bias[g, j]; a null table reads 0
  using ScaleProduct = grouped_detail::fusion::Sm90EVT<
      grouped_detail::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, RowScale, ColScale>;
  using RowwiseEVT = grouped_detail::fusion::Sm90EVT<
      grouped_detail::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementD, float, kRound>, ScaleProduct,
      grouped_detail::fusion::Sm90AccFetch, Bias>;
  // --- the block-wise epilogue: the mainloop has scaled; only the bias is left.
  using BlockwiseEVT = grouped_detail::fusion::Sm90EVT<
      grouped_detail::fusion::Sm90Compute<cutlass::plus, ElementD, float, kRound>, grouped_detail::fusion::Sm90AccFetch,
      Bias>;
  using EVT = cute::conditional_t<kBlockwise, BlockwiseEVT, RowwiseEVT>;

  // Block-scale granularities in the MMA's frame: 1 x 128 on the tokens' side, 128 x 128 on the weights'.
  static constexpr int kGranM = kSwapAB ? kBlockwiseBlockN : 1;
  static constexpr int kGranN = kSwapAB ? 1 : kBlockwiseBlockN;
  using LayoutSFA = grouped_detail::ScaleLayout<kGranM>;
  using LayoutSFB = grouped_detail::ScaleLayout<kGranN>;
  using OperandA = cute::conditional_t<kBlockwise, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using OperandB = cute::conditional_t<kBlockwise, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;

  using Schedules = grouped_detail::Schedules<Config::kSchedule, Config::kAccum, kBlockwise>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignmentD, ElementD, LayoutD*,
      kAlignmentD, typename Schedules::epilogue, EVT>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, OperandA, kAlignmentAB, Element, OperandB,
      kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedules::mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  // The per-group tables the prologue writes and the kernel reads. `row_scale` / `col_scale`: the row-wise
  // scales of D's rows and columns, or (block-wise) the MMA A's and B's block scales, whose layouts follow.
  struct Tables {
    Problem* problems;
    const Element** a;
    const Element** b;
    ElementD** d;
    const ElementD** bias;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
    const float** row_scale;
    const float** col_scale;
    LayoutSFA* layout_sfa;  // block-wise only
    LayoutSFB* layout_sfb;
  };

  static Tables carve(grouped_detail::Carver& c) {
    Tables t{c.take<Problem>(), c.take<const Element*>(), c.take<const Element*>(), c.take<ElementD*>(),
             c.take<const ElementD*>(), c.take<StrideA>(), c.take<StrideB>(), c.take<StrideD>(),
             c.take<const float*>(), c.take<const float*>(), nullptr, nullptr};
    if constexpr (kBlockwise) {
      t.layout_sfa = c.take<LayoutSFA>();
      t.layout_sfb = c.take<LayoutSFB>();
    }
    return t;
  }

  // `problems`: the tables' entries, p.groups's unless the call runs bands (band_plan).
  static typename Gemm::Arguments arguments(const GroupedParams& p, const Tables& t, int64_t problems = -1) {
    const typename Bias::Arguments bias{p.bias == nullptr ? nullptr : t.bias, ElementD(0), {}};  // null -> 0
    typename Gemm::Arguments args;
    // no host copy of the problems: the device's
    if constexpr (kBlockwise) {
      args = {cutlass::gemm::GemmUniversalMode::kGrouped,
              {static_cast<int>(problems < 0 ? p.groups : problems), t.problems, nullptr},
              {t.a, t.stride_a, t.b, t.stride_b, t.row_scale, t.layout_sfa, t.col_scale, t.layout_sfb},
              {{{}, bias, {}}, nullptr, t.stride_d, t.d, t.stride_d}};
    } else {
      args = {cutlass::gemm::GemmUniversalMode::kGrouped,
              {static_cast<int>(problems < 0 ? p.groups : problems), t.problems, nullptr},
              {t.a, t.stride_a, t.b, t.stride_b},
              {{{{t.row_scale, 0.0f, {}}, {t.col_scale, 0.0f, {}}, {}}, {}, bias, {}},  // (row * col) * acc + bias
               nullptr, t.stride_d, t.d, t.stride_d}};
    }
    args.hw_info.device_id = p.device_id;
    args.hw_info.sm_count = p.sm_count;
    return args;
  }

  // Group g's scale pointers (and block-wise, layouts) in the MMA's frame.
  __device__ static void write_scales(const Tables& t, int64_t g, const GroupView<Element, ElementD>& grp,
                                      const GroupedParams& p) {
    t.row_scale[g] = kSwapAB ? grp.scale_b : grp.scale_a;
    t.col_scale[g] = kSwapAB ? grp.scale_a : grp.scale_b;
    if constexpr (kBlockwise) {
      // scale_a(i, q) per token and K group, scale_b(q, h) per K group and block of 128 weight rows
      const auto tokens = grouped_detail::scale_layout<1>(grp.rows, grp.depth, p.sa_stride_m, p.sa_stride_q);
      const auto weights = grouped_detail::scale_layout<kBlockwiseBlockN>(p.N, grp.depth, p.sb_stride_n,
                                                                          p.sb_stride_q);
      if constexpr (kSwapAB) {
        t.layout_sfa[g] = weights;
        t.layout_sfb[g] = tokens;
      } else {
        t.layout_sfa[g] = tokens;
        t.layout_sfb[g] = weights;
      }
    }
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

// Group `grp`'s entries in G's tables, at entry g (the group's index, or a band's entry: then `group` is the
// group's, whose bias row it reads). `runs` false: a problem of no rows, which gets no tile (the group is the other
// kernel's, in a split call).
template <class G>
__device__ void write_group(const typename G::Tables& t, int64_t g,
                            const GroupView<typename G::Element, typename G::ElementD>& grp,
                            const GroupedParams& p, bool runs, int64_t group = -1) {
  using ElementD = typename G::ElementD;
  // A group with no work gets no tile: no rows, or depth 0 (filled by the prologue).
  const int m = static_cast<int>(!runs || grp.depth == 0 ? 0 : grp.rows), n = static_cast<int>(p.N);
  const int k = static_cast<int>(grp.depth);
  constexpr bool swap = G::kSwapAB;  // the MMA's A is the expert's weight, its B the group's tokens
  t.problems[g] = swap ? typename G::Problem(n, m, k) : typename G::Problem(m, n, k);
  t.a[g] = swap ? grp.b : grp.a;
  t.b[g] = swap ? grp.a : grp.b;
  t.stride_a[g] = leading_stride<typename G::StrideA>(swap ? p.ldb : p.lda);
  t.stride_b[g] = leading_stride<typename G::StrideB>(swap ? p.lda : p.ldb);
  t.d[g] = grp.out;
  t.stride_d[g] = leading_stride<typename G::StrideD>(p.N);
  t.bias[g] = p.bias == nullptr ? nullptr : static_cast<const ElementD*>(p.bias) + (group < 0 ? g : group) * p.N;
  G::write_scales(t, g, grp, p);
}

// One block's part (all its threads): the entries after the G groups', the bands past the first of the group that
// runs in bands, or problems of no rows.
template <class G>
__device__ void write_later_bands(const GroupedParams& p, const typename G::Tables& t, const BandPlan& plan) {
  __shared__ int64_t banded;
  if (threadIdx.x == 0) banded = -1;
  __syncthreads();
  const int64_t total = total_rows(p);
  for (int64_t i = threadIdx.x; i < p.groups; i += blockDim.x) {
    const int64_t start = i == 0 ? 0 : clamped(p.offs[i - 1], 0, p.M);
    if (band_count(plan, clamped(p.offs[i], start, p.M) - start, p.K, total) > 1) banded = i;  // one at most
  }
  __syncthreads();
  const int64_t group = banded < 0 ? 0 : banded;
  const auto grp = find_group<typename G::Element, typename G::ElementD>(p, group);
  const int64_t bands = banded < 0 ? 1 : band_count(plan, grp.rows, grp.depth, total);
  for (int64_t s = threadIdx.x; s < plan.slots; s += blockDim.x) {
    const bool runs = s + 1 < bands;
    write_group<G>(t, p.groups + s, runs ? band_of(grp, s + 1, plan, p) : grp, p, runs, group);
  }
}

constexpr int kPrologueThreads = 256;
constexpr int kFillSplit = 8;    // blocks per group along grid.y, for the fill of a group of depth 0
constexpr int kTailBlocks = 16;  // blocks after the groups', for the 2d x 3d tail rows

// The prologue's grid: kFillSplit blocks per group only where a group can have depth 0 (2d x 2d, or K = 0).
inline dim3 prologue_grid(const GroupedParams& p) {
  return dim3(static_cast<unsigned>(p.groups + kTailBlocks),
              p.form == GroupedForm::k2d2d || p.K == 0 ? kFillSplit : 1);
}

struct NoKernel {  // the second kernel of a prologue that writes one kernel's tables
  struct Tables {};
};

// grid prologue_grid(p): block (g, 0), thread 0 writes group g's tables; blocks (g, *) fill group g when its depth is
// 0; blocks past G zero the rows of a 2d x 3d output past the last offset. With a Large kernel (a split call), a
// group of more than p.split_rows rows that also holds more than half of all rows gets its tiles in Large's tables
// and none in G's, and the others the reverse. The half: such a group is the call's work, and on the large tile it
// runs at its best over the whole GPU, whereas a large group among many small ones, split off, runs as a second
// launch with a partly idle last wave after the small ones' (Zipf routing measured up to 12% slower split so than
// on the small tile with the rest).
// Whether a split call runs a group of `rows` on its large tile: more than split_rows, and more than half of all
// rows (so at most one group is).
__device__ inline bool large_group(int64_t rows, int64_t total, int64_t split_rows) {
  return rows > split_rows && 2 * rows > total;
}

// grid prologue_grid(p): block (g, 0), thread 0 writes group g's tables; blocks (g, *) fill group g when its depth is
// 0; blocks past G zero the rows of a 2d x 3d output past the last offset. With a Large kernel (a split call), a
// group that large_group() picks gets its tiles in Large's tables and none in G's, and the others the reverse. The
// half: such a group is the call's work, and on the large tile it runs at its best over the whole GPU, whereas a
// large group among many small ones, split off, runs as a second launch with a partly idle last wave after the
// small ones' (Zipf routing measured up to 12% slower split so than on the small tile with the rest).
// With bands (an unsplit call: Large is NoKernel), block (G, 0) also writes the entries past the groups'.
template <class G, class Large = NoKernel>
__global__ void __launch_bounds__(kPrologueThreads)
    grouped_prologue(GroupedParams p, typename G::Tables t, typename Large::Tables large_tables, BandPlan bands) {
  using ElementD = typename G::ElementD;
  // The GEMM after this kernel is launched as its dependent (run_dependent_gemm) and waits for all of it to
  // complete; letting it start now only moves its launch ahead.
  pdl::allow_dependent_grids();
  const int64_t g = blockIdx.x;
  if (g >= p.groups) {
    if (g == p.groups && blockIdx.y == 0 && bands.slots > 0) write_later_bands<G>(p, t, bands);
    zero_tail_rows<ElementD>(p, (g - p.groups) * gridDim.y + blockIdx.y, int64_t(gridDim.x - p.groups) * gridDim.y);
    return;
  }
  const auto grp = find_group<typename G::Element, ElementD>(p, g);
  if (grp.depth == 0) {  // rows that no tile writes: bias or zeros
    const auto* bias = static_cast<const ElementD*>(p.bias);
    const int64_t total = grp.rows * p.N, step = int64_t(gridDim.y) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; i < total; i += step) {
      grp.out[i] = bias == nullptr ? ElementD(0.0f) : bias[g * p.N + i % p.N];
    }
  }
  if (blockIdx.y != 0 || threadIdx.x != 0) return;
  if constexpr (std::is_same_v<Large, NoKernel>) {
    const bool banded = band_count(bands, grp.rows, grp.depth, total_rows(p)) > 1;
    write_group<G>(t, g, banded ? band_of(grp, 0, bands, p) : grp, p, true);
  } else {
    const bool large = large_group(grp.rows, total_rows(p), p.split_rows);
    write_group<G>(t, g, grp, p, !large);
    write_group<Large>(large_tables, g, grp, p, large);
  }
}

// A split call's GEMM whose tables hold no tile (the large tile's without a large group, the small tile's when one
// group holds every row): every block leaves after one read of the problem table, shared among its threads, instead
// of CUTLASS's setup and its scheduler's walk over every group, 32 at a time (about 1 us more on an H100). Only a
// split call's GEMMs look (`enabled`); an unsplit call's always has a tile where it has rows.
struct SkipWithoutTiles {
  bool enabled;

  template <class Params>
  __device__ bool skip(const Params& params) const {
    if (!enabled) return false;
    const int groups = params.problem_shape.groups();
    bool found = false;
    for (int g = threadIdx.x; g < groups && !found; g += blockDim.x) {
      const auto shape = params.problem_shape.get_problem_shape(g);
      found = cute::get<0>(shape) > 0 && cute::get<1>(shape) > 0;
    }
    return __syncthreads_or(found) == 0;
  }
};

// Where a kernel's tables and CUTLASS's workspace lie in a launch's workspace: the tables first, 128-byte aligned;
// `extra` entries past the groups' (bands).
template <class G>
struct WorkspaceLayout {
  typename G::Tables tables;
  int64_t problems;  // the tables' entries
  size_t tables_bytes;
  size_t gemm_bytes;  // CUTLASS's, after the tables

  WorkspaceLayout(const GroupedParams& p, void* base, int64_t extra = 0) : problems(p.groups + extra) {
    grouped_detail::Carver c{static_cast<char*>(base), static_cast<size_t>(problems)};
    tables = G::carve(c);
    tables_bytes = c.used;
    gemm_bytes = G::Gemm::get_workspace_size(G::arguments(p, tables, problems));
  }
  size_t total() const { return (tables_bytes + gemm_bytes + 127) / 128 * 128; }
};

template <class Config>
size_t grouped_workspace_size(const GroupedParams& p) {
  using G = GroupedGemm<Config>;
  return WorkspaceLayout<G>(p, nullptr, band_plan<G>(p).slots).total();
}

template <class Config>
LaunchResult grouped_launch(const GroupedParams& p) {
  using G = GroupedGemm<Config>;
  const BandPlan bands = band_plan<G>(p);
  const WorkspaceLayout<G> w(p, p.workspace, bands.slots);
  if (p.workspace_bytes < w.total()) return {false, "workspace", "smaller than grouped_workspace_size()"};
  if (!p.tables_written) {
    grouped_prologue<G><<<prologue_grid(p), kPrologueThreads, 0, p.stream>>>(p, w.tables, {}, bands);
    if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
      return {false, "prologue", cudaGetErrorString(err)};
    }
  }
  const typename G::Gemm::Arguments args = G::arguments(p, w.tables, w.problems);
  char* gemm_workspace = static_cast<char*>(p.workspace) + w.tables_bytes;
  // Tables written by a split call's prologue: this is its large-tile GEMM, which may have no group to run.
  return run_dependent_gemm<typename G::Gemm>(args, gemm_workspace, w.gemm_bytes, p.stream,
                                              SkipWithoutTiles{p.tables_written});
}

}  // namespace fp8ext::sm90

// Used once by each generated translation unit in kernels/: the grouped kernel for CONFIG, registered under NAME.
#define FP8EXT_SM90_GROUPED_KERNEL(NAME, CONFIG)                                                                  \
  namespace {                                                                                                    \
  const bool kRegistered = ::fp8ext::sm90::register_grouped_kernel(                                              \
      {NAME, CONFIG::traits(), &::fp8ext::sm90::grouped_launch<CONFIG>,                                          \
       &::fp8ext::sm90::grouped_workspace_size<CONFIG>});                                                        \
  }
