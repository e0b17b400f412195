// The order in which a persistent kernel visits its output tiles: plain arithmetic, shared by the device
// scheduler (banded_tile_scheduler.cuh) and the host (the cost model, the _tile_order introspection op).
//
// Work is counted in clusters. The cluster grid is `minor` clusters across the raster direction by `major`
// along it (raster along N: minor counts cluster rows of M, major cluster columns of N). Clusters are visited in
// bands of `band` clusters across the raster direction; within a band, one step along the raster direction
// visits the band's clusters side by side, so a wave of CTAs shares a few A panels (one per cluster row of the
// band) and B panels (one per step) in L2 instead of streaming a whole operand once per wave:
//
//   band b = i / (band * major)                       (every band but the last is full)
//   width  = min(band, minor - b * band)              (the last band is narrower, never padded)
//   step   = (i - b * band * major) / width,  lane = the remainder
//   minor index = b * band + lane
//   major index = step on even bands, major - 1 - step on odd ones
//
// Odd bands walk backward, so the first wave of a band starts where the last wave of the band before ended and
// finds that wave's panels of the other operand still in L2. Unlike CUTLASS's swizzle, which rounds the grid up
// to a multiple of band x cluster on both sides and runs empty tiles there, every cluster index below
// minor * major is a cluster of the grid, and each cluster of the grid has exactly one index.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FP8EXT_TILE_ORDER_FN __host__ __device__ __forceinline__
#else
#define FP8EXT_TILE_ORDER_FN inline
#endif

namespace fp8ext::sm90 {

// The widest band a scheduler option names (in clusters); wider bands only stream more panels per wave.
constexpr int kMaxBand = 64;

struct ClusterCoord {
  uint32_t minor = 0, major = 0;
};

// The cluster visited at position `index` (< minor * major) of the walk; band >= 1, clamped to minor.
FP8EXT_TILE_ORDER_FN ClusterCoord cluster_at(uint32_t index, uint32_t minor, uint32_t major, uint32_t band) {
  if (band > minor) band = minor;
  const uint32_t per_band = band * major;
  const uint32_t b = index / per_band;
  const uint32_t rem = index - b * per_band;
  const uint32_t first = b * band;
  const uint32_t width = minor - first < band ? minor - first : band;
  const uint32_t step = rem / width;
  const uint32_t lane = rem - step * width;
  return {first + lane, (b & 1u) ? major - 1u - step : step};
}

}  // namespace fp8ext::sm90
