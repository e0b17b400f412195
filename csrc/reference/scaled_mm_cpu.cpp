// The float32 reference path: the CPU backend, and the fallback of the CUDA backend where no sm_90a kernel
// applies, for tensor-wise, row-wise and block-wise scales. Written with aten ops only (PyTorch's stable ABI:
// torch/csrc/stable), so it runs on any device the inputs are on.
#include <algorithm>
#include <array>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include "ops/torch_calls.h"
#include "reference/scaled_mm_reference.h"

namespace fp8ext {
namespace {

namespace st = torch::stable;

// self *= other, broadcasting other (aten::mul_.Tensor; ops.h has no wrapper for it).
void mul_(Tensor& self, const Tensor& other) {
  std::array<StableIValue, 2> stack{st::detail::from(self), st::detail::from(other)};
  call_aten("aten::mul_", "Tensor", stack);
}

// self * other, broadcasting (aten::mul.Tensor).
Tensor mul(const Tensor& self, const Tensor& other) {
  std::array<StableIValue, 2> stack{st::detail::from(self), st::detail::from(other)};
  call_aten("aten::mul", "Tensor", stack);
  return st::detail::to<Tensor>(stack[0]);
}

// self += other, broadcasting: self - (-1) * other, which is exact in the -1 (the stable ABI has subtract with a
// double alpha, and no in-place add). Its one temporary is freed at once.
void add_(Tensor& self, const Tensor& other) { st::copy_(self, st::subtract(self, other, -1.0)); }

// out = self @ other into a given tensor (aten::mm.out).
void mm_out(Tensor& out, const Tensor& self, const Tensor& other) {
  std::array<StableIValue, 3> stack{st::detail::from(self), st::detail::from(other), st::detail::from(out)};
  call_aten("aten::mm", "out", stack);
}

// out = self * other, broadcasting, into a given tensor (aten::mul.out).
void mul_out(Tensor& out, const Tensor& self, const Tensor& other) {
  std::array<StableIValue, 3> stack{st::detail::from(self), st::detail::from(other), st::detail::from(out)};
  call_aten("aten::mul", "out", stack);
}

// A view of [start, start + length) along dim (st::narrow takes a non-const reference).
Tensor narrowed(Tensor t, int64_t dim, int64_t start, int64_t length) { return st::narrow(t, dim, start, length); }

Tensor t2(const Tensor& t) { return st::transpose(t, 0, 1); }

// A contiguous [rows, cols] view of the first rows * cols elements of a 1-D buffer.
Tensor leading(const Tensor& buffer, int64_t rows, int64_t cols) {
  return st::reshape(narrowed(buffer, 0, 0, rows * cols), {rows, cols});
}

// The tiles' float32 temporaries, allocated once per call and reused by every tile: fresh ones per tile leave the
// host allocator holding freed chunks (peak RSS grew by 2.9-8.2 GiB beyond the output at M = 2^20, N = 1024,
// K = 256), where these stay within the budget.
class TileBuffers {
 public:
  // a's rows (rows * K floats), b's columns (K * cols) and `tiles` result-sized buffers (rows * cols each).
  TileBuffers(const Tensor& like, int64_t rows, int64_t cols, int64_t K, int tiles)
      : a_rows_(st::new_empty(like, {rows * K}, ScalarType::Float)),
        b_cols_(st::new_empty(like, {K * cols}, ScalarType::Float)),
        tiles_(st::new_empty(like, {tiles * rows * cols}, ScalarType::Float)),
        tile_size_(rows * cols) {}
  // b's columns [c0, c0 + nc) in float32, as a [K, nc] column-major view (fp8 -> fp32 is exact).
  Tensor b_columns(const Tensor& b, int64_t c0, int64_t nc, int64_t K) {
    Tensor cols_by_k = leading(b_cols_, nc, K);
    st::copy_(cols_by_k, t2(narrowed(b, 1, c0, nc)));
    return t2(cols_by_k);
  }
  // a's rows [r0, r0 + nr) in float32, [nr, K] row-major.
  Tensor a_rows(const Tensor& a, int64_t r0, int64_t nr, int64_t K) {
    Tensor rows_by_k = leading(a_rows_, nr, K);
    st::copy_(rows_by_k, narrowed(a, 0, r0, nr));
    return rows_by_k;
  }
  // Result-sized buffer i as a contiguous [nr, nc] tile.
  Tensor tile(int64_t i, int64_t nr, int64_t nc) {
    return leading(narrowed(tiles_, 0, i * tile_size_, tile_size_), nr, nc);
  }

 private:
  Tensor a_rows_, b_cols_, tiles_;
  int64_t tile_size_;
};


// Each column of t repeated `times` times in place: [R, C] -> [R, C * times] (aten::repeat_interleave.self_int).
Tensor repeat_interleave_cols(const Tensor& t, int64_t times) {
  std::array<StableIValue, 4> stack{st::detail::from(t), st::detail::from(times),
                                    st::detail::from(std::optional<int64_t>(1)),
                                    st::detail::from(std::optional<int64_t>())};
  call_aten("aten::repeat_interleave", "self_int", stack);
  return st::detail::to<Tensor>(stack[0]);
}

// K == 0 is a sum over nothing: zeros, plus bias when given.
Tensor scaled_mm_empty_k(const Tensor& a, const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  Tensor out = st::new_empty(a, {problem.M, problem.N}, problem.out_dtype);
  if (bias.has_value()) {
    st::copy_(out, st::unsqueeze(*bias, 0));  // copy_ broadcasts the [1, N] row over the M rows
  } else {
    st::zero_(out);
  }
  return out;
}

// out = sum over K groups g of (a_g @ b_g) * scale_a[:, g] * scale_b[g, j / 128] (+ bias): one fp32 product per
// group, scaled and then accumulated, as the block-scaled kernels' mainloop promotes once per group. Tiles of
// whole 128-column blocks of b (the scale_b blocks they span, expanded to columns once per tile) and as many rows
// as the budget holds: rows * K + K * cols + 4 * rows * cols + G * cols floats (a's rows, b's columns, the sum,
// a group's product, its scale product and the sum's temporary, scale_b's columns).
Tensor scaled_mm_reference_blockwise(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                                     const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  const int64_t M = problem.M, N = problem.N, K = problem.K;
  const int64_t groups = problem.groups_k();
  constexpr int64_t kBudget = kReferenceChunkBytes / static_cast<int64_t>(sizeof(float));
  const int64_t cols = std::min(std::max<int64_t>(kBudget / 2 / (K + groups) / kBlockN, 1) * kBlockN, N);
  const int64_t rows = std::clamp<int64_t>((kBudget - (K + groups) * cols) / (K + 4 * cols), 1, M);
  Tensor out = st::new_empty(a, {M, N}, problem.out_dtype);
  TileBuffers buffers(a, rows, cols, K, 3);  // the sum, a group's product and its scales
  for (int64_t c0 = 0; c0 < N; c0 += cols) {
    const int64_t nc = std::min(cols, N - c0);
    const Tensor b_cols = buffers.b_columns(b, c0, nc, K);
    // scale_b's blocks for these columns, one column per column of b: [G, nc].
    const int64_t h0 = c0 / kBlockN, nh = (c0 + nc - 1) / kBlockN - h0 + 1;
    const Tensor sb_cols = narrowed(repeat_interleave_cols(narrowed(scale_b, 1, h0, nh), kBlockN), 1, 0, nc);
    const std::optional<Tensor> bias_cols =
        bias.has_value() ? std::optional<Tensor>(st::to(narrowed(*bias, 0, c0, nc), ScalarType::Float)) : std::nullopt;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t nr = std::min(rows, M - r0);
      const Tensor a_rows = buffers.a_rows(a, r0, nr, K);
      const Tensor sa_rows = narrowed(scale_a, 0, r0, nr);
      Tensor acc = buffers.tile(0, nr, nc), part = buffers.tile(1, nr, nc), scales = buffers.tile(2, nr, nc);
      st::zero_(acc);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t k0 = g * kBlockK, kg = std::min(kBlockK, K - k0);
        mm_out(part, narrowed(a_rows, 1, k0, kg), narrowed(b_cols, 0, k0, kg));
        mul_out(scales, narrowed(sa_rows, 1, g, 1), narrowed(sb_cols, 0, g, 1));  // [nr, 1] x [1, nc]
        mul_(part, scales);
        add_(acc, part);
      }
      if (bias_cols.has_value()) add_(acc, st::unsqueeze(*bias_cols, 0));
      Tensor tile = narrowed(narrowed(out, 0, r0, nr), 1, c0, nc);
      st::copy_(tile, acc);  // the one rounding to out_dtype
    }
  }
  return out;
}

}  // namespace

Tensor scaled_mm_reference(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                           const std::optional<Tensor>& bias, const ScaledMmProblem& problem) {
  if (problem.M == 0 || problem.N == 0) return st::new_empty(a, {problem.M, problem.N}, problem.out_dtype);
  if (problem.K == 0) return scaled_mm_empty_k(a, bias, problem);
  if (problem.blockwise) return scaled_mm_reference_blockwise(a, b, scale_a, scale_b, bias, problem);
  const int64_t M = problem.M, N = problem.N, K = problem.K;
  // Tile sizes: columns of b first (their fp32 copy is shared by all of a's rows), half the budget at most, then
  // as many rows as the rest holds: rows * K + K * cols + 3 * rows * cols floats (a's rows, b's columns, the
  // tile's result, its scale product and the bias sum's temporary) <= the budget.
  constexpr int64_t kBudget = kReferenceChunkBytes / static_cast<int64_t>(sizeof(float));
  const int64_t cols = std::clamp<int64_t>(kBudget / 2 / K, 1, N);
  const int64_t rows = std::clamp<int64_t>((kBudget - K * cols) / (K + 3 * cols), 1, M);
  // (M, 1) * (1, N) broadcasting; a tensor-wise scale is viewed as a 0-d tensor.
  const Tensor sa_all = problem.scale_a_per_row ? st::reshape(scale_a, {M, 1}) : st::reshape(scale_a, {});
  const Tensor sb_all = problem.scale_b_per_col ? st::reshape(scale_b, {1, N}) : st::reshape(scale_b, {});
  Tensor out = st::new_empty(a, {M, N}, problem.out_dtype);
  TileBuffers buffers(a, rows, cols, K, 2);  // the tile's result and its scale product
  for (int64_t c0 = 0; c0 < N; c0 += cols) {
    const int64_t nc = std::min(cols, N - c0);
    // fp8 -> fp32 is exact, so the only rounding before the output cast is the fp32 accumulation. The operands are
    // copied into contiguous float32 buffers: a padded or transposed fp8 view is legal input, and the plain matmul
    // path is the one every backend has.
    const Tensor b_cols = buffers.b_columns(b, c0, nc, K);
    const Tensor sb = problem.scale_b_per_col ? narrowed(sb_all, 1, c0, nc) : sb_all;
    const std::optional<Tensor> bias_cols =
        bias.has_value() ? std::optional<Tensor>(st::to(narrowed(*bias, 0, c0, nc), ScalarType::Float)) : std::nullopt;
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t nr = std::min(rows, M - r0);
      Tensor acc = buffers.tile(0, nr, nc);
      mm_out(acc, buffers.a_rows(a, r0, nr, K), b_cols);
      const Tensor sa = problem.scale_a_per_row ? narrowed(sa_all, 0, r0, nr) : sa_all;
      // The scales are multiplied first, as the sm90 epilogue does: no intermediate overflow unless the scale
      // product itself overflows. Only one per row and one per column make a full tile of products.
      if (problem.scale_a_per_row && problem.scale_b_per_col) {
        Tensor scales = buffers.tile(1, nr, nc);
        mul_out(scales, sa, sb);
        mul_(acc, scales);
      } else {
        mul_(acc, mul(sa, sb));  // a scalar, a column or a row
      }
      if (bias_cols.has_value()) add_(acc, st::unsqueeze(*bias_cols, 0));
      Tensor tile = narrowed(narrowed(out, 0, r0, nr), 1, c0, nc);
      st::copy_(tile, acc);  // the one rounding to out_dtype, as .to() does
    }
  }
  return out;
}

namespace {

Tensor scaled_mm_cpu(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, std::optional<Tensor> bias,
                     std::optional<ScalarType> out_dtype, bool /*use_fast_accum: fp32 either way*/) {
  const ScaledMmProblem problem = check_scaled_mm_args(a, b, scale_a, scale_b, bias, out_dtype);
  return scaled_mm_reference(a, b, scale_a, scale_b, bias, problem);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(fp8ext, CPU, m) { m.impl("scaled_mm", TORCH_BOX(&scaled_mm_cpu)); }

}  // namespace fp8ext
