// Variants of the block-scaled tile kernel's mainloop and cluster, built outside the library and timed next to it
// and to torch._scaled_mm (cuBLASLt) by scripts/probe_blockwise_mainloop.py, which loads this file as a shared
// library through ctypes. Nothing here includes libtorch; the kernels are the library's template
// (sm90/blockwise/blockwise_gemm.cuh) with the mainloop swapped, so any difference in time is the mainloop's or the
// cluster's.
//
// Each variant is one translation unit: compile this file once per PROBE_VARIANT (0..kVariants-1) with
// -DPROBE_VARIANT=i -DPROBE_PART, and once without PROBE_PART for the table of entry points:
//
//   for i in $(seq 0 11); do nvcc <the library's NVCC_FLAGS> -Icsrc -I<cutlass>/include -Xcompiler -fPIC \
//       -DPROBE_PART -DPROBE_VARIANT=$i -c scripts/probe_blockwise_mainloop.cu -o v$i.o & done; wait
//   nvcc <flags> -Icsrc ... -Xcompiler -fPIC -c scripts/probe_blockwise_mainloop.cu -o table.o
//   nvcc -shared v*.o table.o -o probe_blockwise_mainloop.so
//
// The variants (all 128 x 128 x 128 tiles, cooperative, bf16 out, not swapped):
//   0 four_c2x1    the overlapped mainloop as the library had it before the halves of overlap_blockwise_mainloop.cuh:
//                  all four of tile t+1's wgmmas, then the wait and tile t's fold (records before that change call
//                  it lib_c2x1: it was bw_coop_128x128x128_c2x1_ov_bf16)
//   1 nofold_c2x1  four_c2x1 with the scaling removed (the partials are never added: a wrong result, timed only):
//                  what the promotion costs the loop, at most
//   2 lib_c2x2     the library's mainloop in a 2x2 cluster (four_c2x1's loop until the halves, il2's after): both
//                  operands' TMA loads shared by two SMs, half the L2 reads of the 1x1 tile per SM
//   3 cutlass_c2x2 CUTLASS's mainloop in the 2x2 cluster
//   4 early_c2x1   four_c2x1 with each tile's stage released as soon as its wgmmas are done (its
//                  scales are already in registers), before the fold, as CUTLASS's own loop does
//   5 il4_c2x1     meant to interleave: each of tile t+1's four wgmmas its own commit group, a quarter of tile t's
//                  fold after each; ptxas hoists the whole fold above the last three (per-element fences, a
//                  wgmma.fence or __syncwarp between do not stop it), so it runs one wgmma, the wait, the fold, three
//   6 il2_c2x1     the same in two halves; ptxas places the whole fold after the first half, so this is two
//                  wgmmas, the wait, the fold, two wgmmas: the library's loop now
//   7 il4_c1x2     il4 in the 1x2 cluster (the dispatch's pick at 8192 x 7168 x 7168)
//   8 ord_c2x1     four_c2x1 with the two consumer warpgroups taking turns to issue their K tiles
//                  (named barriers: WG0's tile t, WG1's tile t, WG0's tile t+1, ...)
//   9 stag_c2x1    turns gated on completion: a warpgroup passes the turn only once its previous tile is done, so
//                  the tensor core runs one warpgroup's tile while the other folds its own
//  10 loop4_c2x1   il4 with the groups in a loop that is not unrolled, so that ptxas keeps each quarter of the
//                  fold between two wgmmas: it does, but then serializes every wgmma (C7511, C7517)
//  11 lib_c2x1     the library's mainloop in the library's 2x1 cluster: the very kernel type of
//                  bw_coop_128x128x128_c2x1_ov_bf16, built here and called through ctypes, so that a difference
//                  between the two is the build's or the calling path's, not the code's
#include <cstdint>
#include <cstdio>

#include "sm90/blockwise/blockwise_gemm.h"

// What precedes each commit group but the first in the il* and loop* variants: 1 a wgmma.fence
// (warpgroup_arrive, as the library's second half has; what the records ran), 2 a __syncwarp, 0 nothing.
#ifndef PROBE_SEP
#define PROBE_SEP 1
#endif

namespace probe {
struct Call {
  const void* a;
  const void* b;
  const float* sa;
  int64_t sa_m, sa_g;
  const float* sb;
  int64_t sb_g, sb_n;
  void* out;
  int64_t M, N, K;
  void* workspace;
  size_t workspace_bytes;
  int sm_count;
  void* stream;
};
using RunFn = int (*)(const Call&, char* err, int err_len);
}  // namespace probe

// The variants in the order of the list above: index, name, cluster (M, N) and mainloop wrapper (a template of the
// CUTLASS collective, defined below).
#define PROBE_VARIANTS(X)                   \
  X(0, four_c2x1, 2, 1, Four)               \
  X(1, nofold_c2x1, 2, 1, NoFold)           \
  X(2, lib_c2x2, 2, 2, Library)             \
  X(3, cutlass_c2x2, 2, 2, Identity)        \
  X(4, early_c2x1, 2, 1, EarlyReleaseLoop)  \
  X(5, il4_c2x1, 2, 1, Interleaved4)        \
  X(6, il2_c2x1, 2, 1, Interleaved2)        \
  X(7, il4_c1x2, 1, 2, Interleaved4)        \
  X(8, ord_c2x1, 2, 1, Ordered)             \
  X(9, stag_c2x1, 2, 1, Staggered)          \
  X(10, loop4_c2x1, 2, 1, Loop4)            \
  X(11, lib_c2x1, 2, 1, Library)
#define PROBE_CAT_(a, b) a##b
#define PROBE_CAT(a, b) PROBE_CAT_(a, b)

#ifdef PROBE_PART
#include "sm90/blockwise/blockwise_gemm.cuh"

namespace probe {
using namespace fp8ext::sm90;

// The Promotion of nofold_c2x1: nothing read, nothing added (a wrong result, timed only).
struct NoPromotion {
  template <class Collective, class TensorStorage>
  CUTLASS_DEVICE static NoPromotion make(TensorStorage&, int) {
    return {};
  }
  CUTLASS_DEVICE void load(int) {}
  template <class Part, class Accum>
  CUTLASS_DEVICE void fold_element(Part&, Accum&, int) {}
};

// A mainloop made of the library's Steps (overlap_k_loop.cuh) and a Schedule: Schedule::run(steps, part0, part1)
// issues every K tile, folds every one but the last into the sum and releases their stages (the last is
// mma_tail()'s).
template <class Base, class Schedule, class MakePromotion = blockwise_loop::BlockScales>
using ScheduledMainloop = overlap::OverlappedMainloop<Base, Schedule, MakePromotion>;

// Tile t+1's wgmmas in kGroups commit groups, each followed by 1/kGroups of tile t's fold (see the top of the
// file for what ptxas makes of it). kGroups = 1 is four_c2x1; kLoop: the groups in a loop that is not unrolled.
template <int kGroups, bool kLoop = false>
struct Interleaved {
  template <class S, class Part>
  CUTLASS_DEVICE static void run(S& s, Part& part0, Part& part1) {
    constexpr int kPerGroup = S::kBlocksPerTile / kGroups;
    auto step = [&](auto& next, auto& prev) {
      s.load_fold_inputs();
      s.wait_stage();
      s.issue(next, 0, kPerGroup, true);
      cute::warpgroup_wait<1>();  // every group but the one just issued: prev is complete
      cute::warpgroup_fence_operand(prev);
      if constexpr (kLoop) {
        // Not unrolled: a chunk's FFMAs are in a branch of this iteration, between two groups' wgmmas.
        CUTLASS_PRAGMA_NO_UNROLL
        for (int g = 1; g < kGroups; ++g) {
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < kGroups - 1; ++c) {
            if (c == g - 1) s.template fold_chunk<kGroups>(prev, c);
          }
          s.issue(next, g * kPerGroup, (g + 1) * kPerGroup, PROBE_SEP == 1);
        }
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int g = 1; g < kGroups; ++g) {
          s.template fold_chunk<kGroups>(prev, g - 1);
#if PROBE_SEP == 2
          __syncwarp();
#endif
          s.issue(next, g * kPerGroup, (g + 1) * kPerGroup, PROBE_SEP == 1);
        }
      }
      s.template fold_chunk<kGroups>(prev, kGroups - 1);
      s.next_stage();
      s.release();
    };
    auto drain = [&](auto& last) {
      s.load_fold_inputs();
      cute::warpgroup_wait<0>();
      s.fold(last);
    };
    overlap::two_tile_loop(s.k_tile_count, part0, part1, [&](auto& p) { s.issue_tile(p); }, step, drain);
  }
};

// four_c2x1 with each tile's stage released as soon as its wgmmas are done, before its fold.
struct EarlyRelease {
  template <class S, class Part>
  CUTLASS_DEVICE static void run(S& s, Part& part0, Part& part1) {
    auto step = [&](auto& next, auto& prev) {
      s.issue_tile(next);
      s.load_fold_inputs();
      cute::warpgroup_wait<1>();
      s.release();
      s.fold(prev);
    };
    auto drain = [&](auto& last) {
      s.load_fold_inputs();
      cute::warpgroup_wait<0>();
      s.fold(last);
    };
    overlap::two_tile_loop(s.k_tile_count, part0, part1, [&](auto& p) { s.issue_tile(p); }, step, drain);
  }
};

// four_c2x1 with the consumer warpgroups' issues in turns (named barriers 0 and 1 above CUTLASS's reserved ones).
// kGated: a warpgroup passes its turn after its previous tile's wgmmas are done instead of right after issuing.
// Per call each barrier sees k_tile_count syncs and as many arrives: WG1 arrives once up front and skips its
// last pass.
template <bool kGated>
struct Turns {
  template <class S, class Part>
  CUTLASS_DEVICE static void run(S& s, Part& part0, Part& part1) {
    const int wg = __shfl_sync(0xffffffff, s.thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    constexpr uint32_t kPair = 2 * cutlass::NumThreadsPerWarpGroup;
    int issued = 0;
    auto pass_turn = [&]() {
      if (!(wg == 1 && issued == s.k_tile_count)) cutlass::arch::NamedBarrier::arrive(kPair, wg == 0 ? 1 : 0);
    };
    if (wg == 1) cutlass::arch::NamedBarrier::arrive(kPair, 0);
    auto take_turn_and_issue = [&](auto& part) {
      cutlass::arch::NamedBarrier::sync(kPair, wg);
      s.issue_tile(part);
      ++issued;
    };
    auto first = [&](auto& part) {
      take_turn_and_issue(part);
      pass_turn();
    };
    auto step = [&](auto& next, auto& prev) {
      take_turn_and_issue(next);
      if (!kGated) pass_turn();
      s.load_fold_inputs();
      cute::warpgroup_wait<1>();
      if (kGated) pass_turn();
      s.fold(prev);
      s.release();
    };
    auto drain = [&](auto& last) {
      s.load_fold_inputs();
      cute::warpgroup_wait<0>();
      s.fold(last);
    };
    overlap::two_tile_loop(s.k_tile_count, part0, part1, first, step, drain);
  }
};

template <class Base> using Four = ScheduledMainloop<Base, Interleaved<1>>;
template <class Base> using NoFold = ScheduledMainloop<Base, Interleaved<1>, NoPromotion>;
template <class Base> using Interleaved4 = ScheduledMainloop<Base, Interleaved<4>>;
template <class Base> using Interleaved2 = ScheduledMainloop<Base, Interleaved<2>>;
template <class Base> using Loop4 = ScheduledMainloop<Base, Interleaved<4, true>>;
template <class Base> using EarlyReleaseLoop = ScheduledMainloop<Base, EarlyRelease>;
template <class Base> using Ordered = ScheduledMainloop<Base, Turns<false>>;
template <class Base> using Staggered = ScheduledMainloop<Base, Turns<true>>;
template <class Base> using Identity = Base;
template <class Base> using Library = OverlapBlockwiseMainloop<Base>;

// The library's BlockwiseGemm with the mainloop Wrap<CUTLASS's collective>.
template <class Config, template <class> class Wrap>
struct ProbeGemm {
  using B = BlockwiseGemm<Config>;
  using Mainloop = Wrap<typename B::CutlassMainloop>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop,
                                                      typename B::CollectiveEpilogue, typename B::TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static int run(const Call& c, char* err, int err_len) {
    BlockwiseParams p;
    p.M = c.M, p.N = c.N, p.K = c.K;
    p.a = c.a, p.lda = c.K, p.b = c.b, p.ldb = c.K, p.out = c.out, p.ldo = c.N;
    p.scale_a = c.sa, p.sa_stride_m = c.sa_m, p.sa_stride_g = c.sa_g;
    p.scale_b = c.sb, p.sb_stride_g = c.sb_g, p.sb_stride_n = c.sb_n;
    p.sm_count = c.sm_count;
    cudaGetDevice(&p.device_id);
    const auto a = B::arguments(p);
    const typename Gemm::Arguments args{a.mode, a.problem_shape, a.mainloop, a.epilogue, a.hw_info, a.scheduler};
    const LaunchResult r = run_gemm<Gemm>(args, c.workspace, c.workspace_bytes, static_cast<cudaStream_t>(c.stream));
    if (!r.ok) snprintf(err, err_len, "%s: %s", r.stage, r.detail);
    return r.ok ? 0 : 1;
  }
};

template <int CM, int CN>
using Coop128 = BlockwiseConfig<128, 128, 128, CM, CN, Schedule::kCooperative, OutType::kBF16, false, false>;
}  // namespace probe

// This translation unit's variant.
#define PROBE_SELECT(I, NAME, CM, CN, WRAP) \
  template <> struct Selected<I> { using Gemm = ProbeGemm<Coop128<CM, CN>, WRAP>; };
namespace probe {
template <int I> struct Selected;
PROBE_VARIANTS(PROBE_SELECT)
}  // namespace probe
extern "C" int PROBE_CAT(probe_run_, PROBE_VARIANT)(const probe::Call& c, char* e, int n) {
  return probe::Selected<PROBE_VARIANT>::Gemm::run(c, e, n);
}

#else  // the table of entry points

#include "probe_table.h"

// The call's fields in Call's order, so that ctypes passes plain arguments.
extern "C" int probe_run(int i, const void* a, const void* b, const float* sa, int64_t sa_m, int64_t sa_g,
                         const float* sb, int64_t sb_g, int64_t sb_n, void* out, int64_t M, int64_t N, int64_t K,
                         void* workspace, size_t workspace_bytes, int sm_count, void* stream, char* err,
                         int err_len) {
  const probe::Call c{a, b, sa, sa_m, sa_g, sb, sb_g, sb_n, out, M, N, K, workspace, workspace_bytes, sm_count,
                      stream};
  return kVariants[i].run(c, err, err_len);
}
#endif
