// The split kernels: one prologue sends each group of a 2d x 3d call to one of two GEMMs on the device, since the
// host sees only the call's rows in all, not how they fall into groups. Both serve calls whose groups are small on
// average (the swapped small tile's) but may hold one large group, of more than split_rows rows and more than half
// of all rows (skewed routing, large_group()), which the small tile runs at a fraction of a 128 x 128 tile's speed.
//
// grouped_split_launch: the large group on the 128 x 128 tile of the same family, bf16 out; the others on the small
// tile. For calls where the large group's tiles can fill the GPU.
//
// grouped_splitk_launch: for calls too small for that (the host's rule: even all rows in one group would not give
// every SM a 128 x 128 tile; MoE decode with every token routed to the same experts). The large group's K is cut into
// S slices of whole 128-deep blocks, S chosen on the device (splitk_slices) so that its tiles and slices fill the SMs,
// each slice a problem of the partial kernel (128 x 128, fp32 out, no bias), writing
//
//   P_s[i, j] = scale_a[i] * scale_b[j] * sum_{k in slice s} a[i, k] b[k, j]          (fp32)
//
// then one reduce kernel writes out[i, j] = round_to_out( (P_0 + P_1 + ... + P_{S-1})[i, j] + bias[g, j] ), summing
// the slices in order (the same bits on every run). The other groups run on the small tile, as in a split call.
//
// Each kernel is a programmatic dependent of the one before it and leaves at once without work. Plain CUDA and
// CUTLASS; nothing here includes libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_runtime_api.h>

#include "sm90/grouped/grouped_gemm.cuh"

namespace fp8ext::sm90 {

// grouped_split_launch: one prologue (grouped_prologue) writes the tables of the large-tile kernel (LargeName::kName,
// registered by its own translation unit) and of Small (this translation unit's kernel); then the large-tile GEMM
// runs, then Small's. Workspace: Small's tables and CUTLASS workspace, then the large kernel's (its own layout).
template <class SmallConfig, class LargeConfig, class LargeName>
size_t grouped_split_workspace_size(const GroupedParams& p) {
  const GroupedKernelEntry* large = GroupedRegistry::find(LargeName::kName);
  if (large == nullptr) return 0;
  return WorkspaceLayout<GroupedGemm<SmallConfig>>(p, nullptr).total() + large->workspace_size(p);
}

template <class SmallConfig, class LargeConfig, class LargeName>
LaunchResult grouped_split_launch(const GroupedParams& p) {
  using Small = GroupedGemm<SmallConfig>;
  using Large = GroupedGemm<LargeConfig>;
  const GroupedKernelEntry* large = GroupedRegistry::find(LargeName::kName);
  if (large == nullptr) return {false, "split", "its large-tile kernel is not in this build"};
  if (p.split_rows <= 0) return {false, "split", "split_rows must be positive"};
  const WorkspaceLayout<Small> small(p, p.workspace);
  GroupedParams large_params = p;
  large_params.workspace = static_cast<char*>(p.workspace) + small.total();
  large_params.workspace_bytes = p.workspace_bytes < small.total() ? 0 : p.workspace_bytes - small.total();
  large_params.tables_written = true;
  const WorkspaceLayout<Large> large_layout(large_params, large_params.workspace);
  if (p.workspace_bytes < small.total() + large_layout.total()) {
    return {false, "workspace", "smaller than grouped_workspace_size()"};
  }
  grouped_prologue<Small, Large><<<prologue_grid(p), kPrologueThreads, 0, p.stream>>>(p, small.tables,
                                                                                    large_layout.tables, BandPlan{});
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return {false, "prologue", cudaGetErrorString(err)};
  }
  if (const LaunchResult r = large->launch(large_params); !r.ok) return r;
  return run_dependent_gemm<typename Small::Gemm>(Small::arguments(p, small.tables),
                                                  static_cast<char*>(p.workspace) + small.tables_bytes,
                                                  small.gemm_bytes, p.stream, SkipWithoutTiles{true});
}

// --- split-K

constexpr int64_t kMaxSlices = 16;     // the partial kernel's table holds this many problems
constexpr int64_t kSliceBlock = 128;   // slices are whole K blocks of the 128-deep tile
constexpr int kReduceThreads = 256;

// The partial sums' buffer, in floats: at most two waves of 128 x 128 tiles (a split that needs more would not fill
// the GPU better), never more than kMaxSlices copies of the output.
inline int64_t splitk_partial_floats(const GroupedParams& p) {
  const int64_t two_waves = 2 * int64_t(p.sm_count) * 128 * 128, copies = kMaxSlices * p.M * p.N;
  return copies < two_waves ? copies : two_waves;
}

// What the prologue decided, for the reduce kernel: the large group (or -1), its first row and rows, and S.
struct SplitKPlan {
  int64_t group, start, rows, slices;
};

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The estimated time of a group of `rows` x N x K in `slices` slices, in units of one K block of one tile on one SM
// (about 0.6 us at the capped clock), or a negative value where the slices do not exist (a smaller count gives the
// same ones) or their partials would not fit `partial_floats`: waves of tiles x slices, each wave its slice's blocks
// plus kTileOverhead for the pipeline fill and the epilogue, plus the reduce's read of every slice at
// kReduceFloatsPerUnit floats per unit (2.1 M floats in 3.3 us on an H100: OLMoE's 2048 x 2048, 128 rows, 8 slices;
// bench/tuning/h100-2026-12-07-grouped-splitk-profile-17226a1.json).
// Thirty-two-bit arithmetic: a 64-bit division is a long software sequence, and 16 of these in one thread made the
// prologue four times slower.
constexpr float kTileOverhead = 2.0f;
constexpr float kReduceFloatsPerUnit = 380000.0f;
__device__ inline float splitk_cost(int rows, int N, int K, int sm_count, int64_t partial_floats, int slices) {
  const int tiles = (rows + 127) / 128 * ((N + 127) / 128), blocks = (K + kSliceBlock - 1) / kSliceBlock;
  if (slices > blocks) return -1.0f;
  const int depth = (blocks + slices - 1) / slices;
  if ((blocks + depth - 1) / depth != slices || int64_t(slices) * rows * N > partial_floats) return -1.0f;
  return float((tiles * slices + sm_count - 1) / sm_count) * (kTileOverhead + float(depth)) +
         float(int64_t(slices) * rows * N) / kReduceFloatsPerUnit;
}

// Whether group rows run as slices on the partial kernel: large_group(), and at least one slice fits.
__device__ inline bool on_partials(int64_t rows, int64_t total, const GroupedParams& p, int64_t partial_floats) {
  return large_group(rows, total, p.split_rows) && rows * p.N <= partial_floats;
}

// grid prologue_grid(p) (2d x 3d, K > 0): block g < G, thread 0 writes group g's entry in Small's tables (no rows if
// the group runs on partials); block G finds the large group, chooses S and writes all kMaxSlices of the partial
// kernel's entries (the first S its slices, the rest without rows) and the plan; blocks G and after zero the rows past
// the last offset.
template <class Small, class Partial>
__global__ void __launch_bounds__(kPrologueThreads)
    grouped_splitk_prologue(GroupedParams p, typename Small::Tables t, typename Partial::Tables partial_tables,
                            SplitKPlan* plan, float* partials, int64_t partial_floats) {
  using Element = typename Small::Element;
  pdl::allow_dependent_grids();
  const int64_t g = blockIdx.x;
  const int64_t total = total_rows(p);
  if (g < p.groups) {
    if (threadIdx.x != 0) return;
    const auto grp = find_group<Element, typename Small::ElementD>(p, g);
    write_group<Small>(t, g, grp, p, !on_partials(grp.rows, total, p, partial_floats));
    return;
  }
  if (g == p.groups) {  // threads s < kMaxSlices: slice count s + 1 and partial-table slot s
    __shared__ int64_t large;
    __shared__ float cost[kMaxSlices];
    if (threadIdx.x == 0) large = -1;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < p.groups; i += blockDim.x) {
      const int64_t start = i == 0 ? 0 : clamped(p.offs[i - 1], 0, p.M);
      if (on_partials(clamped(p.offs[i], start, p.M) - start, total, p, partial_floats)) large = i;  // one at most
    }
    __syncthreads();
    GroupedParams q = p;
    q.bias = nullptr;  // the reduce adds it
    auto grp = find_group<Element, float>(q, large < 0 ? 0 : large);
    const int s = threadIdx.x;
    if (s < kMaxSlices) {
      cost[s] = large < 0 ? -1.0f
                          : splitk_cost(int(grp.rows), int(p.N), int(p.K), p.sm_count, partial_floats, s + 1);
    }
    __syncthreads();
    int64_t slices = 0;
    float best = 0.0f;
    for (int c = 0; c < kMaxSlices; ++c) {
      if (cost[c] >= 0.0f && (slices == 0 || cost[c] < best)) {
        slices = c + 1;
        best = cost[c];
      }
    }
    if (s < kMaxSlices) {
      const int64_t depth = slices == 0 ? 0 : ceil_div(ceil_div(p.K, kSliceBlock), slices) * kSliceBlock;
      const int64_t k0 = s * depth;
      grp.a += k0;
      grp.b += k0;
      grp.depth = s < slices ? (p.K - k0 < depth ? p.K - k0 : depth) : 0;
      const int64_t rows = grp.rows;
      grp.out = partials + s * rows * p.N;
      write_group<Partial>(partial_tables, s, grp, q, s < slices);
      if (s == 0) *plan = {large, grp.start, rows, slices};
    }
  }
  zero_tail_rows<typename Small::ElementD>(p, (g - p.groups) * gridDim.y + blockIdx.y,
                                            int64_t(gridDim.x - p.groups) * gridDim.y);
}

// out rows [start, start + rows) = round(sum of the plan's slices + bias), four columns per thread (N is a multiple
// of 16, so every four are in one row and 16-byte aligned).
template <class ElementD>
__global__ void __launch_bounds__(kReduceThreads)
    splitk_reduce(const SplitKPlan* plan, const float* partials, ElementD* out, const ElementD* bias, int64_t N) {
  pdl::wait_for_prior_grids();
  pdl::allow_dependent_grids();
  const SplitKPlan pl = *plan;
  const int64_t quads = pl.rows * N / 4, slice = pl.rows * N;
  for (int64_t v = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; pl.slices > 0 && v < quads;
       v += int64_t(gridDim.x) * blockDim.x) {
    float4 x[kMaxSlices];
#pragma unroll
    for (int s = 0; s < kMaxSlices; ++s) {  // all loads in flight first
      if (s < pl.slices) x[s] = reinterpret_cast<const float4*>(partials + s * slice)[v];
    }
    float4 sum = x[0];
#pragma unroll
    for (int s = 1; s < kMaxSlices; ++s) {
      if (s < pl.slices) {
        sum.x += x[s].x;
        sum.y += x[s].y;
        sum.z += x[s].z;
        sum.w += x[s].w;
      }
    }
    const int64_t j = 4 * v % N;
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (bias != nullptr) {
      for (int i = 0; i < 4; ++i) b[i] = float(bias[pl.group * N + j + i]);
    }
    ElementD* o = out + pl.start * N + 4 * v;
    o[0] = ElementD(sum.x + b[0]);
    o[1] = ElementD(sum.y + b[1]);
    o[2] = ElementD(sum.z + b[2]);
    o[3] = ElementD(sum.w + b[3]);
  }
}

// A split-K call's workspace: Small's tables and CUTLASS workspace, the partial kernel's (kMaxSlices problems), the
// plan, then the partial sums.
struct SplitKWorkspace {
  size_t small_bytes, partial_bytes, partials_offset, total;
};

template <class SmallConfig, class PartialName>
SplitKWorkspace splitk_workspace(const GroupedParams& p, const GroupedKernelEntry& partial) {
  SplitKWorkspace w;
  w.small_bytes = WorkspaceLayout<GroupedGemm<SmallConfig>>(p, nullptr).total();
  GroupedParams q = p;
  q.groups = kMaxSlices;
  w.partial_bytes = partial.workspace_size(q);
  w.partials_offset = w.small_bytes + w.partial_bytes + 128;  // the plan: 128 bytes
  w.total = w.partials_offset + size_t(splitk_partial_floats(p)) * sizeof(float);
  return w;
}

template <class SmallConfig, class PartialConfig, class PartialName>
size_t grouped_splitk_workspace_size(const GroupedParams& p) {
  const GroupedKernelEntry* partial = GroupedRegistry::find(PartialName::kName);
  const size_t small_alone = grouped_workspace_size<SmallConfig>(p);
  if (partial == nullptr) return small_alone;
  const size_t sliced = splitk_workspace<SmallConfig, PartialName>(p, *partial).total;
  return sliced > small_alone ? sliced : small_alone;
}

template <class SmallConfig, class PartialConfig, class PartialName>
LaunchResult grouped_splitk_launch(const GroupedParams& p) {
  using Small = GroupedGemm<SmallConfig>;
  using Partial = GroupedGemm<PartialConfig>;
  static_assert(std::is_same_v<typename Partial::ElementD, float> && !Partial::kSwapAB && !Partial::kBlockwise &&
                    !Small::kBlockwise && PartialConfig::kTileK == kSliceBlock,
                "split-K: row-wise, a 128-deep unswapped fp32 partial kernel");
  const GroupedKernelEntry* partial = GroupedRegistry::find(PartialName::kName);
  if (partial == nullptr) return {false, "split-K", "its partial kernel is not in this build"};
  // A call that cannot be sliced (named by hand: the dispatch sends none) runs on the small tile alone.
  if (p.form != GroupedForm::k2d3d || p.split_rows <= 0 || p.K < 2 * kSliceBlock || p.N % 16 != 0) {
    return grouped_launch<SmallConfig>(p);
  }
  const SplitKWorkspace w = splitk_workspace<SmallConfig, PartialName>(p, *partial);
  if (p.workspace_bytes < w.total) return {false, "workspace", "smaller than grouped_workspace_size()"};
  char* base = static_cast<char*>(p.workspace);
  const WorkspaceLayout<Small> small(p, base);
  GroupedParams q = p;
  q.groups = kMaxSlices;
  q.bias = nullptr;
  q.tables_written = true;
  q.workspace = base + w.small_bytes;
  q.workspace_bytes = w.partial_bytes;
  const WorkspaceLayout<Partial> partial_layout(q, q.workspace);
  auto* plan = reinterpret_cast<SplitKPlan*>(base + w.small_bytes + w.partial_bytes);
  auto* partials = reinterpret_cast<float*>(base + w.partials_offset);
  grouped_splitk_prologue<Small, Partial><<<prologue_grid(p), kPrologueThreads, 0, p.stream>>>(
      p, small.tables, partial_layout.tables, plan, partials, splitk_partial_floats(p));
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) {
    return {false, "prologue", cudaGetErrorString(err)};
  }
  if (const LaunchResult r = partial->launch(q); !r.ok) return r;
  using ElementD = typename Small::ElementD;
  const int64_t most = ceil_div(p.M * p.N / 4, kReduceThreads), wave = 4 * int64_t(p.sm_count);
  const dim3 grid(static_cast<unsigned>(most < wave ? most : wave));
  if (const cudaError_t err = pdl::launch(splitk_reduce<ElementD>, grid, dim3(kReduceThreads), p.stream,
                                          static_cast<const SplitKPlan*>(plan),
                                          static_cast<const float*>(partials), static_cast<ElementD*>(p.out),
                                          static_cast<const ElementD*>(p.bias), p.N);
      err != cudaSuccess) {
    cudaGetLastError();
    return {false, "reduce", cudaGetErrorString(err)};
  }
  return run_dependent_gemm<typename Small::Gemm>(Small::arguments(p, small.tables), base + small.tables_bytes,
                                                  small.gemm_bytes, p.stream, SkipWithoutTiles{true});
}

}  // namespace fp8ext::sm90

// Beside a small-tile kernel's FP8EXT_SM90_GROUPED_KERNEL: the split kernel NAME of that kernel (CONFIG) with the
// large-tile kernel LARGE_CONFIG, which its own translation unit registers under LARGE_NAME. Its traits are
// CONFIG's.
#define FP8EXT_SM90_GROUPED_SPLIT_KERNEL(NAME, CONFIG, LARGE_CONFIG, LARGE_NAME)                                  \
  namespace {                                                                                                    \
  struct SplitLargeName {                                                                                        \
    static constexpr const char* kName = LARGE_NAME;                                                             \
  };                                                                                                             \
  const bool kSplitRegistered = ::fp8ext::sm90::register_grouped_kernel(                                         \
      {NAME, CONFIG::traits(),                                                                                   \
       &::fp8ext::sm90::grouped_split_launch<CONFIG, LARGE_CONFIG, SplitLargeName>,                               \
       &::fp8ext::sm90::grouped_split_workspace_size<CONFIG, LARGE_CONFIG, SplitLargeName>});                     \
  }

// Beside a small-tile kernel's FP8EXT_SM90_GROUPED_KERNEL: the split-K kernel NAME of that kernel (CONFIG) with the
// partial kernel PARTIAL_CONFIG (fp32 out), which its own translation unit registers under PARTIAL_NAME. Its traits
// are CONFIG's.
#define FP8EXT_SM90_GROUPED_SPLITK_KERNEL(NAME, CONFIG, PARTIAL_CONFIG, PARTIAL_NAME)                             \
  namespace {                                                                                                    \
  struct SplitKPartialName {                                                                                     \
    static constexpr const char* kName = PARTIAL_NAME;                                                           \
  };                                                                                                             \
  const bool kSplitKRegistered = ::fp8ext::sm90::register_grouped_kernel(                                        \
      {NAME, CONFIG::traits(),                                                                                   \
       &::fp8ext::sm90::grouped_splitk_launch<CONFIG, PARTIAL_CONFIG, SplitKPartialName>,                         \
       &::fp8ext::sm90::grouped_splitk_workspace_size<CONFIG, PARTIAL_CONFIG, SplitKPartialName>});               \
  }
