// Decode on the tensor cores, for both families: M <= 32 tokens against an fp8 weight, K split over the warps
// of a block. Row-wise (gemv_tensor_core.cu):
//
//     out[i, j] = round_to_out( fma( scale_a[i] * scale_b[j], acc[i, j], bias[j] ) )      (decode_common.cuh)
//     acc[i, j] = sum over slices s = 0 .. S-1, in that order, of  sum_{k in slice s} a[i, k] * w[j, k]
//                 (each slice's sum accumulated by mma.sync in fp32 registers; w[j, :] = column j of b)
//
// Block-scaled (bw_gemv_tc.cu): each 128-wide K chunk (one scale group g) is summed by mma.sync
// on its own, then multiplied by scale_a(i, g) * scale_b(g, j / 128) and added to acc in fp32; out = acc + bias.
// A Policy says which: Params, kBlockScaled, store<Out>(p, i, j, acc), and for block scales
// token_scale(p, i, k) (0 for a token past M) and weight_scale(p, row, k) (decode_common.cuh has the row-wise one).
//
// Why: a swapped CUTLASS kernel gives each 64-row weight tile to one CTA, so a small weight keeps few SMs
// reading (4096 rows: 64 tiles for 132 SMs), and at M = 16-64 those rows ran at 0.92-0.95x of cuBLAS
// tensor-wise. Here a warp owns R = 16 or 32 weight rows (one or two MMA tiles) and one of S slices of K, and a
// block of 8 warps holds 8 / S such row groups: a 4096-row weight with R = 16, S = 8 is 256 blocks, every SM
// streaming. Operands go from global memory straight into registers (16-byte streaming loads of the weight,
// cached loads of the activations) with no shared-memory pipeline: each weight byte is read once, and the time
// is that read plus fixed costs. The S slices of a row are added through shared memory in a fixed order, so the
// result does not depend on timing, and not on M either (batch invariant for a fixed kernel).
//
// Where they pay (docs/design.md, decode kernels): up to M = 16 on all but the largest weights; at M = 32 the
// swapped CUTLASS tiles are faster. Time grows with the token tiles, and four 16-row tiles per warp, which cut
// the activation reads by 4, ran no faster than one, so the limit is not the activation traffic; the tensor
// core's mma.sync rate for fp8 is the likely one (not profiled).
//
// MMA: mma.sync m16n8k32 with the e4m3 weight as A (weight rows on the MMA's M) and the activations as B (tokens
// on its N, in 1, 2 or 4 tiles of 8 for M <= 8, 16, 32). In the fragment layout, lane (g = lane / 4, t = lane % 4)
// holds A rows g and g + 8 and B column g, each at K offsets 4t..4t+3 (registers a0/a1, b0) and 16+4t..16+4t+3
// (a2/a3, b1). A dot product may visit K in any order if both operands visit it in the same one, so each lane
// instead loads 16 contiguous bytes (at 32t and 32t + 16 of a 128-wide K chunk) of its weight rows and its
// token, and feeds each 16 bytes to two MMAs: words 0/1 as (k 4t.., k 16+4t..) of the first, words 2/3 of the
// second. Weight and activation words pair up byte for byte, so every product a[i, k] * w[j, k] is formed once.
//
// The tensor core sums fp8 products with reduced precision before they reach the fp32 registers (as in the
// CUTLASS fast kernels), so the decode kernels are registered for fast accumulation only; the grouped decode
// kernels' precise form (sm90/grouped/grouped_gemv.cu) sums each 128-wide chunk on its own (Promote, below).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "sm90/common/grid_dependency.cuh"
#include "sm90/decode/decode_common.cuh"

namespace fp8ext::sm90::gemv_tc {

constexpr int kWarps = 8;      // warps per block
constexpr int kTileRows = 16;  // weight rows per MMA tile
constexpr int kChunk = 128;    // K per warp per load round: 4 lanes x 32 bytes

// Registers a warp's lane needs for MT weight tiles and NT token tiles: 16 per weight tile and 8 per token tile
// per load round, 4 accumulators per (weight tile, token tile). Two load rounds in flight when they fit beside
// the accumulators in about 96 registers, and two blocks per SM (at most 128 registers) when one round fits in
// 88 (else one block). ptxas spilled with 96 at two blocks.
template <int MT, int NT> constexpr int kRoundRegs = 16 * MT + 8 * NT;
template <int MT, int NT> constexpr int kAccRegs = 4 * MT * NT;  // twice that block-scaled: a chunk's own sums
template <int MT, int NT, bool BlockScaled>
constexpr int kRounds = 2 * kRoundRegs<MT, NT> + (BlockScaled ? 2 : 1) * kAccRegs<MT, NT> <= 96 ? 2 : 1;
// Block-scaled, the chunk's own sums and its scales need more room: ptxas spilled at two blocks with 80.
template <int MT, int NT, bool BlockScaled>
constexpr int kMinBlocks = BlockScaled ? (kRoundRegs<MT, NT> + 2 * kAccRegs<MT, NT> <= 64 ? 2 : 1)
                                       : (kRoundRegs<MT, NT> + kAccRegs<MT, NT> <= 88 ? 2 : 1);
constexpr int kMaxM = 32;

// f(std::integral_constant<int, NT>{}) for the fewest tiles of 8 tokens (1, 2 or 4, at most MaxNT) that hold M
// tokens, or MaxNT tiles where M is larger (the caller then runs M in chunks of 8 * MaxNT): the one place where the
// token tiles are chosen, for the decode kernel's launch and the grouped decode kernel's chunks alike.
#pragma nv_exec_check_disable
template <int MaxNT, class F>
__host__ __device__ __forceinline__ decltype(auto) with_token_tiles(int64_t M, F&& f) {
  static_assert(MaxNT == 1 || MaxNT == 2 || MaxNT == 4, "1, 2 or 4 token tiles");
  if constexpr (MaxNT >= 4) {
    if (M > 16) return f(std::integral_constant<int, 4>{});
  }
  if constexpr (MaxNT >= 2) {
    if (M > 8) return f(std::integral_constant<int, 2>{});
  }
  return f(std::integral_constant<int, 1>{});
}

// d += w * x for one m16n8k32 tile: A = weight (e4m3, 16 x 32), B = activations (8 tokens x 32), fp32 D.
template <__nv_fp8_interpretation_t KindA>
__device__ __forceinline__ void mma_16x8x32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  if constexpr (KindA == __NV_E4M3) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Two MMAs over 16 bytes of K: `lo` holds weight row g, `hi` row g + 8, `x` the token's bytes at the same K.
template <__nv_fp8_interpretation_t KindA>
__device__ __forceinline__ void mma_16_bytes(float (&d)[4], const uint4& lo, const uint4& hi, const uint4& x) {
  mma_16x8x32<KindA>(d, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
  mma_16x8x32<KindA>(d, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
}

// One load round's MMAs: every weight tile against every token tile, both 16-byte halves, into d.
template <__nv_fp8_interpretation_t KindA, int MT, int NT>
__device__ __forceinline__ void mma_round(float (&d)[MT][NT][4], const uint4 (&wv)[MT][2][2],
                                          const uint4 (&xv)[NT][2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_16_bytes<KindA>(d[mt][nt], wv[mt][0][h], wv[mt][1][h], xv[nt][h]);
    }
  }
}

// Where a warp works: its rows (first_row, MT tiles of 16) and its K slice [k_begin, k_end). Slices are whole
// chunks except the last, which may be short or empty.
template <int MT, int S>
struct WarpPart {
  static_assert(kWarps % S == 0, "a block holds whole row groups");
  static constexpr int kGroupRows = MT * kTileRows;
  static constexpr int kBlockRows = kWarps / S * kGroupRows;
  int64_t first_row, k_begin, k_end;

  __device__ WarpPart(int64_t block, int64_t K) {
    const int warp = threadIdx.x / 32;
    first_row = block * kBlockRows + warp / S * kGroupRows;
    const int64_t slice_len = (K + S * kChunk - 1) / (S * kChunk) * kChunk;
    k_begin = warp % S * slice_len;
    k_end = k_begin + slice_len < K ? k_begin + slice_len : K;
  }
};

// Block `block`'s rows of out = a * w^T for p (M <= 8 * NT), after the grid dependency's wait. MT: 16-row weight
// tiles per warp. NT: tiles of 8 tokens. S: slices of K per row group. Promote (row-wise): each 128-wide K chunk's
// products are summed by mma.sync on their own and added to acc in fp32, as the CUTLASS kernels' precise
// accumulation promotes every 128 of K (block-scaled kernels always do, with the scales).
template <class Policy, typename Out, __nv_fp8_interpretation_t KindA, int MT, int NT, int S, bool Promote = false>
__device__ __forceinline__ void gemv_tc_block(const typename Policy::Params& p, int64_t block) {
  constexpr int kBlockRows = WarpPart<MT, S>::kBlockRows;
  constexpr int kGroupRows = WarpPart<MT, S>::kGroupRows;
  constexpr int kRoundsInFlight = kRounds<MT, NT, Policy::kBlockScaled || Promote>;
  // Each warp's sums of one weight tile at a time: [warp][token][row in the tile] (16 KB at most).
  __shared__ float partial[kWarps][NT * 8][kTileRows];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // fragment group: rows g and g + 8 of each weight tile, token g of each token tile
  const int t = lane % 4;  // lane in group: which 32 bytes of a 128-wide K chunk
  const WarpPart<MT, S> part_of_warp(block, p.K);
  const int64_t first_row = part_of_warp.first_row, k_begin = part_of_warp.k_begin, k_end = part_of_warp.k_end;
  const auto* w = static_cast<const uint8_t*>(p.b);
  const auto* a = static_cast<const uint8_t*>(p.a);

  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[MT][NT][4] = {};
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kChunk * kRoundsInFlight) {
    uint4 wv[kRoundsInFlight][MT][2][2];  // [round][weight tile][row g, row g + 8][first, second 16 bytes]
    uint4 xv[kRoundsInFlight][NT][2];     // [round][token tile][first, second 16 bytes]
#pragma unroll
    for (int u = 0; u < kRoundsInFlight; ++u) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k = k0 + u * kChunk + t * 32 + h * 16;
        const bool in_k = k < k_end;  // K and every slice end are multiples of 16: a piece is whole or absent
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int64_t row = first_row + mt * kTileRows + half * 8 + g;
            wv[u][mt][half][h] = in_k && row < p.N ? decode::load_streaming(w + row * p.ldb + k) : zero;
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int token = nt * 8 + g;
          xv[u][nt][h] = in_k && token < p.M ? __ldg(reinterpret_cast<const uint4*>(a + token * p.lda + k)) : zero;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kRoundsInFlight; ++u) {
      if constexpr (Policy::kBlockScaled) {
        // A round is one 128-wide K chunk, which is one scale group (slices start on multiples of 128): its
        // products go into their own sums, which are scaled and added to acc in fp32. The D fragment holds
        // tokens 2t and 2t + 1 of each token tile, and rows of one 16-row tile, inside one 128-row block.
        const int64_t k = k0 + u * kChunk;
        if (k >= k_end) break;
        float part[MT][NT][4] = {};
        mma_round<KindA, MT, NT>(part, wv[u], xv[u]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float sb = Policy::weight_scale(p, first_row + mt * kTileRows, k);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float s0 = sb * Policy::token_scale(p, nt * 8 + 2 * t, k);
            const float s1 = sb * Policy::token_scale(p, nt * 8 + 2 * t + 1, k);
            acc[mt][nt][0] = fmaf(s0, part[mt][nt][0], acc[mt][nt][0]);
            acc[mt][nt][1] = fmaf(s1, part[mt][nt][1], acc[mt][nt][1]);
            acc[mt][nt][2] = fmaf(s0, part[mt][nt][2], acc[mt][nt][2]);
            acc[mt][nt][3] = fmaf(s1, part[mt][nt][3], acc[mt][nt][3]);
          }
        }
      } else if constexpr (Promote) {
        if (k0 + u * kChunk >= k_end) break;
        float part[MT][NT][4] = {};
        mma_round<KindA, MT, NT>(part, wv[u], xv[u]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mt][nt][r] += part[mt][nt][r];
          }
        }
      } else {
        mma_round<KindA, MT, NT>(acc, wv[u], xv[u]);
      }
    }
  }

  // One weight tile at a time through shared memory: the D fragment of acc[mt][nt] is
  // {(row g, token 2t), (row g, token 2t + 1), (row g + 8, token 2t), (row g + 8, token 2t + 1)}.
  // Consecutive threads then take consecutive rows of one token: out[token, j] is contiguous in j.
  constexpr int kOutputs = kWarps / S * kTileRows * NT * 8;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      partial[warp][nt * 8 + 2 * t][g] = acc[mt][nt][0];
      partial[warp][nt * 8 + 2 * t + 1][g] = acc[mt][nt][1];
      partial[warp][nt * 8 + 2 * t][g + 8] = acc[mt][nt][2];
      partial[warp][nt * 8 + 2 * t + 1][g + 8] = acc[mt][nt][3];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kOutputs; idx += kWarps * 32) {
      const int r = idx % kTileRows;
      const int grp = idx / kTileRows % (kWarps / S);
      const int token = idx / (kTileRows * (kWarps / S));
      const int64_t j = block * kBlockRows + grp * kGroupRows + mt * kTileRows + r;
      if (token >= p.M || j >= p.N) continue;
      float sum = partial[grp * S][token][r];
#pragma unroll
      for (int s = 1; s < S; ++s) sum += partial[grp * S + s][token][r];
      Policy::template store<Out>(p, token, j, sum);
    }
    __syncthreads();  // before the next tile overwrites `partial`
  }
}

template <class Policy, typename Out, __nv_fp8_interpretation_t KindA, int MT, int NT, int S>
__global__ void __launch_bounds__(kWarps * 32, (kMinBlocks<MT, NT, Policy::kBlockScaled>))
    gemv_tc_kernel(typename Policy::Params p, int prefetch_blocks) {
  // Launched as a dependent of the activation quantize (grid_dependency.cuh): while it may still run, each of the
  // group's rows asks the L2 for the start of this warp's slice of the weight (the block's share of
  // kPrefetchBytesPerBlock, all of it for a 4096-wide K), in the first wave's blocks. Everything is read after
  // the wait.
  constexpr int kGroupRows = WarpPart<MT, S>::kGroupRows;
  constexpr int64_t kPrefetchPerRow = pdl::kPrefetchBytesPerBlock / (kWarps * kGroupRows) / 16 * 16;
  const WarpPart<MT, S> part(blockIdx.x, p.K);
  const int lane = threadIdx.x % 32;
  const bool first_wave = static_cast<int>(blockIdx.x) < prefetch_blocks;
  if (first_wave && lane < kGroupRows && part.first_row + lane < p.N && part.k_end > part.k_begin) {
    const int64_t bytes = part.k_end - part.k_begin < kPrefetchPerRow ? part.k_end - part.k_begin : kPrefetchPerRow;
    pdl::prefetch_l2(static_cast<const uint8_t*>(p.b) + (part.first_row + lane) * p.ldb + part.k_begin,
                     static_cast<uint32_t>(bytes));
  }
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();  // the next fp8ext kernel (a decode step's next quantize) may start waiting
  gemv_tc_block<Policy, Out, KindA, MT, NT, S>(p, blockIdx.x);
}

template <class Policy, typename Out, __nv_fp8_interpretation_t KindA, int MT, int S>
cudaError_t launch_tiles(const typename Policy::Params& p) {
  constexpr int64_t kBlockRows = kWarps / S * MT * kTileRows;
  const dim3 grid(static_cast<unsigned>((p.N + kBlockRows - 1) / kBlockRows));
  // A dependent launch (grid_dependency.cuh) with 1, 2 or 4 tiles of 8 tokens.
  return with_token_tiles<kMaxM / 8>(p.M, [&](auto nt) {
    return pdl::launch_decode<gemv_tc_kernel<Policy, Out, KindA, MT, decltype(nt)::value, S>>(p, grid, kWarps * 32);
  });
}

}  // namespace fp8ext::sm90::gemv_tc
