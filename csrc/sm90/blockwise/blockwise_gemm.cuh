// The kernel template of the block-scaled family: one BlockwiseConfig -> one CUTLASS 3.x TMA warp-specialized FP8
// GEMM built on CUTLASS's sm90 blockwise mainloop (KernelTmaWarpSpecialized{Cooperative,Pingpong}FP8Blockwise).
//
// The maths, in the MMA's frame (rows r, columns c of D, K groups g of 128):
//
//   mainloop:  acc[r, c]  = sum_g  sfa(r, g) * sfb(c, g) * sum_{k in g} A[r, k] * B[c, k]      fp32 registers
//              (per K tile the MMA accumulates one group into zeroed registers, which are then scaled by the
//              group's scale product and added to the running fp32 sum: CUTLASS's GmmaFP8Accumulation)
//   epilogue:  D[r, c]    = round_to_out( acc[r, c] + bias )                                  in fp32
//
//   not swapped (D = out):    A = a,   sfa = scale_a (1 x 128: per row, per group),
//                             B = b,   sfb = scale_b (128 x 128: per block of 128 columns), bias = bias[c]
//   swap_ab     (D = out^T):  A = b^T, sfa = scale_b (128 x 128),
//                             B = a,   sfb = scale_a (1 x 128),                               bias = bias[r]
//
// which is blockwise_gemm.h's out[i, j] = sum_g scale_a(i, g) * scale_b(g, j / 128) * (a b)_g[i, j] + bias[j] in
// the user's frame either way. There is no alpha, beta or source C (ElementC = void). A null bias pointer reads
// as 0 (the broadcast node's null_default), so one kernel serves with and without bias.
//
// Scales are read through runtime strides in both dimensions: the scale layouts below have dynamic (int64)
// strides, so the collective's MMajorSFA / NMajorSFB are false and it loads scales with predicated 4-byte cp.async
// (load_auxiliary), never TMA. TMA would need 16-byte aligned strides, and torch's scale_a has strides (1, M)
// with M often odd. The predicate is elem_less against the scale layout's shape, which covers M and N residues;
// scale groups along K are whole K tiles (TileK = 128), so a K residue (K % 128 != 0) reads the last group's
// scale while TMA zero-fills the operands past K.
//
// Layout (TN, K contiguous in both operands), as in rowwise_gemm.cuh:
//   not swapped: MMA A = a [M, K], MMA B = b (N x K), D = out [M, N] row-major.
//   swap_ab:     MMA A = b^T [N, K], MMA B = a (M x K), D = out^T [N, M] column-major (the same memory).
// Only this header and kernels/ include CUTLASS; nothing here includes libtorch.
#pragma once

// A tile whose N is not a power of two needs wgmma's extended N shapes. Without them CUTLASS's atom selector
// falls back to the largest power of two dividing the tile (a 64x32 atom for N = 160: five wgmmas per k-block,
// each re-reading A). No tile built today is such a one (128 x 160 and 128 x 192 were measured and removed:
// docs/blockwise.md); the shapes stay enabled, and BlockwiseGemm asserts that one atom spans the tile's N.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <cutlass/functional.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "sm90/blockwise/blockwise_gemm.h"
#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"
#include "sm90/blockwise/overlap_blockwise_mainloop.cuh"

namespace fp8ext::sm90 {

// The compile-time description of one block-scaled kernel. Tile and cluster in the MMA's frame (kernel_config.h).
// Overlap: the mainloop of overlap_blockwise_mainloop.cuh (the same sums, with the scaling of one K tile
// overlapped with the next tile's wgmmas) in place of CUTLASS's.
template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Sched, OutType Out, bool SwapAB,
          bool Overlap = false>
struct BlockwiseConfig : TileAndCluster<TileM, TileN, TileK, ClusterM, ClusterN> {
  static constexpr Schedule kSchedule = Sched;
  static constexpr OutType kOut = Out;
  static constexpr bool kSwapAB = SwapAB;
  static constexpr bool kOverlap = Overlap;
  static_assert(Sched == Schedule::kCooperative || Sched == Schedule::kPingpong || Sched == Schedule::kStreamK,
                "the blockwise mainloop has cooperative and pingpong kernels (stream-K is cooperative)");
  // One scale group per K tile: the collective's promotion interval is then exactly one K tile (4 wgmma k-blocks
  // of 32), and its scale loads need no K predicate.
  static_assert(TileK == kBlockwiseGroupK, "TileK must equal the scale group along K");
  // In a cluster CUTLASS's pipeline counts one release a warpgroup, which does not cover the other threads' scale
  // loads from the stage (common/stage_reading_pipeline.cuh): only the overlapped mainloop, on StageReadingPipeline,
  // counts every thread's.
  static_assert(Overlap || ClusterM * ClusterN == 1, "a cluster kernel needs the overlapped mainloop");

  static constexpr BlockwiseTraits traits() {
    return BlockwiseTraits{TileM, TileN, TileK, ClusterM, ClusterN, Sched, Out, SwapAB, 0, nullptr, Overlap};
  }
};

namespace blockwise_detail {

// A scale layout ((gran_mn, blocks_mn), (gran_k, groups_k), L) in CUTLASS's blockwise form. The granularities are
// static (the collective reads them from the type); the block counts and all strides are runtime values. A
// dynamic stride in the MN mode is what makes the collective load the scales with cp.async instead of TMA.
template <int GranMN, int GranK>
using ScaleLayout = cute::Layout<
    cute::Shape<cute::Shape<cute::Int<GranMN>, int32_t>, cute::Shape<cute::Int<GranK>, int32_t>, int32_t>,
    cute::Stride<cute::Stride<cute::_0, int64_t>, cute::Stride<cute::_0, int64_t>, int64_t>>;

template <int GranMN, int GranK>
ScaleLayout<GranMN, GranK> make_scale_layout(int64_t extent_mn, int64_t extent_k, int64_t stride_mn,
                                             int64_t stride_k) {
  const auto blocks_mn = static_cast<int32_t>((extent_mn + GranMN - 1) / GranMN);
  const auto groups_k = static_cast<int32_t>((extent_k + GranK - 1) / GranK);
  return cute::make_layout(
      cute::make_shape(cute::make_shape(cute::Int<GranMN>{}, blocks_mn), cute::make_shape(cute::Int<GranK>{}, groups_k),
                       int32_t(1)),
      cute::make_stride(cute::make_stride(cute::_0{}, stride_mn), cute::make_stride(cute::_0{}, stride_k),
                        int64_t(0)));
}

// The epilogue of the file comment: D = round_to_out(acc + bias), bias along the user's N.
template <class TileShape, class ElementOut, bool SwapAB>
struct BiasEpilogue {
  using ElementBias = ElementOut;  // bias has the output dtype (checked by the entry), so it is read in place
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using Bias = BiasBroadcast<TileShape, ElementBias, SwapAB>;  // bias[j], along the user's N; null reads as 0
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using EVT = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, ElementOut, float, kRound>, Acc, Bias>;

  static typename EVT::Arguments arguments(const void* bias) {
    return typename EVT::Arguments{
        {},                                                           // Acc
        {static_cast<const ElementBias*>(bias), ElementBias(0), {}},  // Bias (null -> 0)
        {}};                                                          // the add itself
  }
};

template <Schedule S> struct BlockwiseMainloopSchedule {
  using type = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;  // cooperative and stream-K
};
template <> struct BlockwiseMainloopSchedule<Schedule::kPingpong> {
  using type = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise;
};

}  // namespace blockwise_detail

template <class Config>
struct BlockwiseGemm {
  static constexpr bool kSwapAB = Config::kSwapAB;
  static constexpr bool kPingpong = Config::kSchedule == Schedule::kPingpong;
  static constexpr bool kStreamK = Config::kSchedule == Schedule::kStreamK;

  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using ElementD = typename OutElement<Config::kOut>::type;
  using LayoutA = cutlass::layout::RowMajor;     // MMA A: rows of K contiguous bytes
  using LayoutB = cutlass::layout::ColumnMajor;  // MMA B: columns of K contiguous bytes
  using LayoutD = cute::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignmentAB = 16;  // 16 bytes of fp8: what TMA needs
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  // Scale granularities in the MMA's frame: the activation side is 1 x 128 (one scale per token per K group),
  // the weight side 128 x 128.
  static constexpr int kGranActivation = 1;
  static constexpr int kGranWeight = kBlockwiseBlockN;
  static constexpr int kGranM = kSwapAB ? kGranWeight : kGranActivation;
  static constexpr int kGranN = kSwapAB ? kGranActivation : kGranWeight;
  using LayoutSFA = blockwise_detail::ScaleLayout<kGranM, kBlockwiseGroupK>;
  using LayoutSFB = blockwise_detail::ScaleLayout<kGranN, kBlockwiseGroupK>;

  using TileShape = cute::Shape<cute::Int<Config::kTileM>, cute::Int<Config::kTileN>, cute::Int<Config::kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<Config::kClusterM>, cute::Int<Config::kClusterN>, cute::_1>;
  static_assert(Config::kTileM % kGranM == 0 && Config::kTileN % kGranN == 0,
                "a tile must hold whole 128-wide weight scale blocks (the collective's granularity asserts)");

  using KernelSchedule = typename blockwise_detail::BlockwiseMainloopSchedule<Config::kSchedule>::type;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using TileScheduler =
      cute::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;

  using Epilogue = blockwise_detail::BiasEpilogue<TileShape, ElementD, kSwapAB>;

  // ElementC = void: the epilogue reads no source matrix.
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentD, ElementD, LayoutD,
      kAlignmentD, EpilogueSchedule, typename Epilogue::EVT>::CollectiveOp;

  // The builder takes each operand's layout paired with its scale layout.
  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA, LayoutSFA>, kAlignmentAB,
      ElementB, cute::tuple<LayoutB, LayoutSFB>, kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  static_assert(cute::size<1>(typename CutlassMainloop::TiledMma::AtomShape_MNK{}) == Config::kTileN,
                "one wgmma must span the tile's N (see CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED above)");
  // Overlap kernels keep CUTLASS's collective for everything but the MMA loop.
  using CollectiveMainloop =
      cute::conditional_t<Config::kOverlap, OverlapBlockwiseMainloop<CutlassMainloop>, CutlassMainloop>;
  // The runtime strides must reach the cp.async path; a TMA scale load would silently demand aligned strides.
  static_assert(!CollectiveMainloop::IsTmaLoadSFA && !CollectiveMainloop::IsTmaLoadSFB,
                "scales must be loaded with cp.async through runtime strides");

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideD = typename Kernel::StrideD;

  static typename Gemm::Arguments arguments(const BlockwiseParams& p) {
    const MmaFrame<kSwapAB, ElementA, ElementB, StrideA, StrideB, StrideD> f(p.M, p.N, p.K, p.a, p.lda, p.b, p.ldb,
                                                                              p.ldo);
    // scale_a(i, g) per token i and K group g, scale_b(g, h) per K group and block h of 128 weight rows; each
    // goes with its operand, so swapping exchanges them (and their granularities) along with the operands.
    const float* ptr_sfa = kSwapAB ? p.scale_b : p.scale_a;
    const float* ptr_sfb = kSwapAB ? p.scale_a : p.scale_b;
    auto layout_sfa = blockwise_detail::make_scale_layout<kGranM, kBlockwiseGroupK>(
        f.m, p.K, kSwapAB ? p.sb_stride_n : p.sa_stride_m, kSwapAB ? p.sb_stride_g : p.sa_stride_g);
    auto layout_sfb = blockwise_detail::make_scale_layout<kGranN, kBlockwiseGroupK>(
        f.n, p.K, kSwapAB ? p.sa_stride_m : p.sb_stride_n, kSwapAB ? p.sa_stride_g : p.sb_stride_g);

    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {f.m, f.n, f.k, 1},
                                  {f.a, f.stride_a, f.b, f.stride_b, ptr_sfa, layout_sfa, ptr_sfb, layout_sfb},
                                  {Epilogue::arguments(p.bias), nullptr, f.stride_d, static_cast<ElementD*>(p.out),
                                   f.stride_d}};
    set_launch_arguments<kStreamK>(args, p.device_id, p.sm_count);
    return args;
  }
};

template <class Config>
size_t workspace_size(const BlockwiseParams& p) {
  return gemm_workspace_size<BlockwiseGemm<Config>>(p);
}

template <class Config>
LaunchResult launch(const BlockwiseParams& p) {
  // The collective runs at least one K tile per output tile (its prologue is unconditional): an empty K would
  // read unwritten shared memory. The entry handles empty problems before calling a kernel.
  if (p.M <= 0 || p.N <= 0 || p.K <= 0) return {false, "can_implement", "M, N and K must be positive"};
  return gemm_launch<BlockwiseGemm<Config>>(p);
}

}  // namespace fp8ext::sm90

// Used once by each generated translation unit in kernels/: the kernel for CONFIG, in the block-scaled registry under
// NAME.
#define FP8EXT_SM90_BLOCKWISE_KERNEL(NAME, CONFIG) \
  FP8EXT_SM90_REGISTER_KERNEL(register_blockwise_kernel, BlockwiseParams, NAME, CONFIG)
