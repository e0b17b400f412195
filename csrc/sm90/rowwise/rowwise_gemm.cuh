// The kernel template of the sm90 family: one KernelConfig -> one CUTLASS 3.x TMA warp-specialized FP8 GEMM
// with the row-wise epilogue of rowwise_epilogue.cuh.
//
// Layout (TN, K contiguous in both operands):
//   not swapped: MMA A = a [M, K] (activations), MMA B = b (weights, N x K), D = out [M, N] row-major.
//   swap_ab:     MMA A = b^T [N, K] (weights),   MMA B = a (M x K),          D = out^T [N, M] column-major,
//                which is the same memory as out [M, N] row-major. Small M then fills the MMA's narrow N side
//                instead of wasting most of a 64-row wgmma.
// Only this header and the generated kernels/ include CUTLASS; nothing here includes libtorch.
#pragma once

#include <cuda_runtime_api.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "sm90/common/cutlass_common.cuh"
#include "sm90/common/gemm_params.h"
#include "sm90/common/kernel_config.h"
#include "sm90/rowwise/kernel_registry.h"
#include "sm90/rowwise/overlap_promotion_mainloop.cuh"
#include "sm90/rowwise/rowwise_epilogue.cuh"

namespace fp8ext::sm90 {

template <InType I> struct InElement;
template <> struct InElement<InType::kE4M3> { using type = cutlass::float_e4m3_t; };
template <> struct InElement<InType::kE5M2> { using type = cutlass::float_e5m2_t; };

template <Schedule S, Accum A> struct MainloopSchedule;
template <> struct MainloopSchedule<Schedule::kPingpong, Accum::kFast> {
  using type = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
};
template <> struct MainloopSchedule<Schedule::kPingpong, Accum::kPrecise> {
  using type = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
};
template <> struct MainloopSchedule<Schedule::kCooperative, Accum::kFast> {
  using type = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
};
template <> struct MainloopSchedule<Schedule::kCooperative, Accum::kPrecise> {
  using type = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
};
template <Accum A> struct MainloopSchedule<Schedule::kStreamK, A> : MainloopSchedule<Schedule::kCooperative, A> {};

template <class Config>
struct RowwiseGemm {
  static constexpr bool kSwapAB = Config::kSwapAB;
  static constexpr bool kPingpong = Config::kSchedule == Schedule::kPingpong;
  static constexpr bool kStreamK = Config::kSchedule == Schedule::kStreamK;

  using ElementActivation = typename InElement<Config::kInA>::type;
  using ElementWeight = cutlass::float_e4m3_t;
  using ElementA = cute::conditional_t<kSwapAB, ElementWeight, ElementActivation>;
  using ElementB = cute::conditional_t<kSwapAB, ElementActivation, ElementWeight>;
  using ElementD = typename OutElement<Config::kOut>::type;
  using LayoutA = cutlass::layout::RowMajor;     // MMA A: rows of K contiguous bytes
  using LayoutB = cutlass::layout::ColumnMajor;  // MMA B: columns of K contiguous bytes
  using LayoutD = cute::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignmentAB = 16;  // 16 bytes of fp8: what TMA needs
  static constexpr int kAlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

  using TileShape = cute::Shape<cute::Int<Config::kTileM>, cute::Int<Config::kTileN>, cute::Int<Config::kTileK>>;
  using ClusterShape = cute::Shape<cute::Int<Config::kClusterM>, cute::Int<Config::kClusterN>, cute::_1>;

  using KernelSchedule = typename MainloopSchedule<Config::kSchedule, Config::kAccum>::type;
  using EpilogueSchedule = cute::conditional_t<kPingpong, cutlass::epilogue::TmaWarpSpecialized,
                                               cutlass::epilogue::TmaWarpSpecializedCooperative>;
  using TileScheduler =
      cute::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;

  using Epilogue = RowwiseEpilogue<TileShape, ElementD, kSwapAB>;

  // ElementC = void: the epilogue reads no source matrix.
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentD, ElementD, LayoutD,
      kAlignmentD, EpilogueSchedule, typename Epilogue::EVT>::CollectiveOp;

  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignmentAB, ElementB, LayoutB,
      kAlignmentAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  // Precise kernels marked overlap keep CUTLASS's collective for everything but the MMA loop.
  using CollectiveMainloop = cute::conditional_t<Config::kOverlapPromotion,
                                                 OverlapPromotionMainloop<CutlassMainloop>, CutlassMainloop>;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideC = typename Kernel::StrideC;
  using StrideD = typename Kernel::StrideD;

  static typename Gemm::Arguments arguments(const GemmParams& p) {
    const MmaFrame<kSwapAB, ElementA, ElementB, StrideA, StrideB, StrideD> f(p.M, p.N, p.K, p.a, p.lda, p.b, p.ldb,
                                                                              p.ldo);
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {f.m, f.n, f.k, 1},
        {f.a, f.stride_a, f.b, f.stride_b},
        {Epilogue::arguments(p.scale_a, p.scale_a_per_row, p.scale_b, p.scale_b_per_col, p.bias), nullptr,
         f.stride_d, static_cast<ElementD*>(p.out), f.stride_d}};
    set_launch_arguments<kStreamK>(args, p.device_id, p.sm_count);
    // Tile order (gemm_params.h): bands of max_swizzle tiles across the raster direction, so one wave of CTAs
    // shares A rows and B columns in L2 instead of streaming all of A (or B) once per wave. CUTLASS rounds the
    // tile grid up to a multiple of swizzle x cluster, so a wide band on a short side computes empty tiles:
    // the table picks the band per shape.
    using RasterOptions = decltype(args.scheduler.raster_order);
    args.scheduler.max_swizzle_size = p.sched.max_swizzle;
    args.scheduler.raster_order = p.sched.raster == Raster::kAlongM   ? RasterOptions::AlongM
                                  : p.sched.raster == Raster::kAlongN ? RasterOptions::AlongN
                                                                      : RasterOptions::Heuristic;
    if constexpr (Config::kAccum == Accum::kPrecise) {
      args.mainloop.mma_promotion_interval = Config::kPromotionInterval;
    }
    return args;
  }
};

template <class Config>
size_t workspace_size(const GemmParams& p) {
  return gemm_workspace_size<RowwiseGemm<Config>>(p);
}

template <class Config>
LaunchResult launch(const GemmParams& p) {
  return gemm_launch<RowwiseGemm<Config>>(p);
}

}  // namespace fp8ext::sm90

// Used once by each generated translation unit in kernels/: the kernel for CONFIG, in the registry under NAME.
#define FP8EXT_SM90_KERNEL(NAME, CONFIG) FP8EXT_SM90_REGISTER_KERNEL(register_kernel, GemmParams, NAME, CONFIG)
