// fp8ext's persistent tile scheduler for the sm90 TMA warp-specialized kernels: CUTLASS's
// PersistentTileSchedulerSm90 with the walk of tile_order.h in place of CUTLASS's swizzle.
//
// Why not CUTLASS's: its swizzle takes bands of 1, 2, 4 or 8 clusters only, and it rounds the tile grid up to a
// multiple of band x cluster on both sides, so a wide band on a short side runs empty tiles (the cost model had
// to trade L2 reuse against that padding). Here a band is any width from 1 to kMaxBand clusters, the last band
// is narrower instead of padded, and odd bands walk backward (tile_order.h says why).
//
// Everything else is CUTLASS's: the launch grid (one CTA per SM, as CUTLASS sizes it with no swizzle), the
// Params (with the walk's sizes added), and every static query the kernels make. A CUTLASS kernel takes this
// scheduler through the tag BandedScheduler (TileSchedulerSelector below); the scheduler Arguments'
// max_swizzle_size field carries the band width in clusters.
#pragma once

#include <cstdint>

#include <cutlass/gemm/kernel/sm90_tile_scheduler.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include "sm90/common/tile_order.h"

namespace fp8ext::sm90 {

struct BandedScheduler {};  // the tag a CUTLASS GemmUniversal takes in place of cutlass::gemm::PersistentScheduler

class BandedTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using WorkTileInfo = Base::WorkTileInfo;
  using Arguments = Base::Arguments;  // max_swizzle_size: the band width in clusters (1..kMaxBand)
  using RasterOrder = Base::RasterOrder;
  using RasterOrderOptions = Base::RasterOrderOptions;

  // CUTLASS's Params for an unswizzled grid (problem_tiles_m_/n_ then count clusters, unpadded), and the walk.
  struct Params : Base::Params {
    uint32_t band_ = 1;   // clusters per band, 1..minor_
    uint32_t minor_ = 0;  // clusters across the raster direction
    uint32_t major_ = 0;  // clusters along it
  };

  template <class ProblemShapeMNKL, class TileShape, class ClusterShape>
  static Params to_underlying_arguments(ProblemShapeMNKL problem_shape_mnkl, TileShape tile_shape,
                                        ClusterShape cluster_shape, cutlass::KernelHardwareInfo const& hw_info,
                                        Arguments const& arguments, void* workspace = nullptr,
                                        const uint32_t epilogue_subtile = 1,
                                        uint32_t ktile_start_alignment_count = 1u) {
    Arguments unswizzled = arguments;
    unswizzled.max_swizzle_size = 1;  // CUTLASS then pads the grid to whole clusters only
    Params p;
    static_cast<Base::Params&>(p) =
        Base::to_underlying_arguments(problem_shape_mnkl, tile_shape, cluster_shape, hw_info, unswizzled, workspace,
                                      epilogue_subtile, ktile_start_alignment_count);
    const bool along_n = p.raster_order_ == RasterOrder::AlongN;
    p.minor_ = along_n ? p.problem_tiles_m_ : p.problem_tiles_n_;
    p.major_ = along_n ? p.problem_tiles_n_ : p.problem_tiles_m_;
    const int band = arguments.max_swizzle_size < 1 ? 1 : arguments.max_swizzle_size;
    p.band_ = static_cast<uint32_t>(band) < p.minor_ ? static_cast<uint32_t>(band) : (p.minor_ > 0 ? p.minor_ : 1);
    return p;
  }

  static bool can_implement(Arguments const& args) {
    return args.max_swizzle_size >= 1 && args.max_swizzle_size <= kMaxBand;
  }

  CUTLASS_HOST_DEVICE BandedTileScheduler() {}

  CUTLASS_DEVICE explicit BandedTileScheduler(Params const& params)
      : Base(params), band_(params.band_), minor_(params.minor_), major_(params.major_) {
#if defined(__CUDA_ARCH__)
    // CUTLASS's numbering of the launched CTAs: the CTAs of one cluster get consecutive indices.
    if (params.raster_order_ == RasterOrder::AlongN) {
      linear_ = uint64_t(blockIdx.x) + uint64_t(blockIdx.y) * uint64_t(gridDim.x);
    } else {
      linear_ = uint64_t(blockIdx.x) * uint64_t(gridDim.y) + uint64_t(blockIdx.y);
    }
    stride_ = uint64_t(gridDim.x) * uint64_t(gridDim.y) * uint64_t(gridDim.z);
#endif
    along_n_ = params.raster_order_ == RasterOrder::AlongN;
    cluster_m_ = params.cluster_shape_m_;
    cluster_n_ = params.cluster_shape_n_;
    batches_ = params.problem_tiles_l_;
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  CUTLASS_DEVICE WorkTileInfo get_current_work() const { return work_at(linear_); }

  CUTLASS_DEVICE void advance_to_next_work(uint32_t advance_count = 1) { linear_ += stride_ * advance_count; }

  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t advance_count = 1) const {
    return !work_at(linear_ + stride_ * advance_count).is_valid();
  }

  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }

  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo info, Pipeline&, PipelineState) {
    return fetch_next_work(info);
  }

 private:
  // The tile of CTA index `linear`: its cluster's place in the walk, plus the CTA's place in its cluster.
  CUTLASS_DEVICE WorkTileInfo work_at(uint64_t linear) const {
    const uint64_t clusters = uint64_t(minor_) * major_;
    const uint64_t cluster = linear / (cluster_m_ * cluster_n_);
    if (cluster >= clusters * batches_) return WorkTileInfo::invalid_work_tile();
    const uint64_t batch = cluster / clusters;
    const ClusterCoord c = cluster_at(static_cast<uint32_t>(cluster - batch * clusters), minor_, major_, band_);
    const uint32_t cluster_row = along_n_ ? c.minor : c.major;  // in clusters along M
    const uint32_t cluster_col = along_n_ ? c.major : c.minor;  // along N
    const dim3 cta = cute::block_id_in_cluster();
    return {static_cast<int32_t>(cluster_row * cluster_m_ + cta.x), static_cast<int32_t>(cluster_col * cluster_n_ + cta.y),
            static_cast<int32_t>(batch), true};
  }

  uint64_t linear_ = 0, stride_ = 0;
  uint32_t band_ = 1, minor_ = 0, major_ = 0, cluster_m_ = 1, cluster_n_ = 1, batches_ = 1;
  bool along_n_ = true;
};

}  // namespace fp8ext::sm90

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<fp8ext::sm90::BandedScheduler, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = fp8ext::sm90::BandedTileScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
