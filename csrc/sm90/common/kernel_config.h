// What one kernel of the sm90 family is, as plain compile-time data.
//
// Kept free of CUTLASS and libtorch so that the registry and the dispatcher can describe kernels without the
// heavy headers. Tile and cluster shapes are in the MMA's frame: with swap_ab the MMA's M runs over the
// user's N (the weight rows) and the MMA's N over the user's M (the tokens).
#pragma once

namespace fp8ext::sm90 {

enum class Schedule {
  kPingpong,     // two consumer warpgroups, each owns a whole tile; epilogue of one overlaps the MMA of the other
  kCooperative,  // two consumer warpgroups split one tile along M
  kStreamK,      // cooperative, with the stream-K tile scheduler (K split across CTAs for few, deep tiles)
  kGemv,         // not CUTLASS, no tile scheduler: the decode kernels gemv_rowwise.cu (M <= 4), gemv_tensor_core.cu
                 // (M <= 32)
};

enum class Accum {
  kFast,     // fp8 MMA accumulates in the tensor core's reduced-precision accumulator for the whole K loop
  kPrecise,  // partial sums are promoted into fp32 registers every mma_promotion_interval MMA k-blocks
};

enum class OutType { kBF16, kFP16, kFP32 };
enum class InType { kE4M3, kE5M2 };

inline const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kPingpong: return "pingpong";
    case Schedule::kCooperative: return "cooperative";
    case Schedule::kStreamK: return "streamk";
    case Schedule::kGemv: return "gemv";
  }
  return "?";
}
inline const char* to_string(Accum a) { return a == Accum::kFast ? "fast" : "precise"; }
inline const char* to_string(OutType o) {
  switch (o) {
    case OutType::kBF16: return "bf16";
    case OutType::kFP16: return "fp16";
    case OutType::kFP32: return "fp32";
  }
  return "?";
}
inline const char* to_string(InType i) { return i == InType::kE4M3 ? "e4m3" : "e5m2"; }

// The runtime description of a kernel: what the registry stores and the dispatcher matches on.
struct KernelTraits {
  int tile_m, tile_n, tile_k;
  int cluster_m, cluster_n;
  Schedule schedule;
  Accum accum;
  OutType out;
  bool swap_ab;  // computes out^T = b^T a^T so that a small M becomes the MMA's N
  InType in_a;   // element type of the activation operand `a`; the weight `b` is always e4m3
  int promotion_interval;  // precise accumulation: MMA k-blocks (32 of K each) between fp32 promotions
  bool any_in_a;  // handles e4m3 and e5m2 activations alike (then in_a is not a constraint)
  int max_m;      // largest M the kernel computes, 0 for any
  bool overlap;   // precise accumulation through overlap_promotion_mainloop.cuh
};

// The CTA tile and the cluster, in the MMA's frame: the part of a kernel's config that both families have.
template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN>
struct TileAndCluster {
  static constexpr int kTileM = TileM;
  static constexpr int kTileN = TileN;
  static constexpr int kTileK = TileK;
  static constexpr int kClusterM = ClusterM;
  static constexpr int kClusterN = ClusterN;
};

template <int TileM, int TileN, int TileK, int ClusterM, int ClusterN, Schedule Sched, Accum Acc, OutType Out,
          bool SwapAB, InType InA = InType::kE4M3, int PromotionInterval = 4, bool OverlapPromotion = false>
struct KernelConfig : TileAndCluster<TileM, TileN, TileK, ClusterM, ClusterN> {
  static constexpr Schedule kSchedule = Sched;
  static constexpr Accum kAccum = Acc;
  static constexpr OutType kOut = Out;
  static constexpr bool kSwapAB = SwapAB;
  static constexpr InType kInA = InA;
  static constexpr int kPromotionInterval = PromotionInterval;
  static constexpr bool kOverlapPromotion = OverlapPromotion;
  static_assert(!OverlapPromotion || (Acc == Accum::kPrecise && PromotionInterval == 4 && TileK == 128),
                "the overlapped mainloop promotes once per 128-deep K tile of precise accumulation");

  static constexpr KernelTraits traits() {
    return KernelTraits{TileM, TileN, TileK, ClusterM, ClusterN, Sched, Acc, Out, SwapAB, InA, PromotionInterval,
                        /*any_in_a=*/false, /*max_m=*/0, OverlapPromotion};
  }
};

}  // namespace fp8ext::sm90
