#!/usr/bin/env python3
"""A small workload for compute-sanitizer: every built kernel, row-wise, block-wise and grouped (forced by name), on
tail shapes, the quantize_rowwise kernel at each of its row widths, with and without 16-byte alignment, and
quantize_blockwise in both block forms.

Row-wise: M in {1, 17, 255, 257} (no tile multiple), N = 144 (not a multiple of 64 or 128), K = 16 (the minimum),
K = 272 and K = 2064 (17 K tiles of 128: more than any kernel's pipeline stages, so each stage is refilled while
its neighbours are read, several times over), with bias. Block-wise: the same M, N = 144 and 272 (one and three
128-wide weight blocks, a partial last one), K = 272 and 2064, scales in torch's layouts, bias on odd M. Plus the
tensor-wise route and empty shapes. Results are checked against float64 too, so a kernel that writes out of
bounds *and* one that computes garbage both fail. Run it through tools/sanitize.sh.

    --quick             one tail shape per kernel at the pipeline-wrapping K (M = 257, or the decode kernels'
                        largest M; K = 2064): for racecheck, which is slow, and whose subject (shared memory
                        reuse) needs the pipeline to wrap, not many shapes
    --kernels PATTERNS  only the kernels matching these fnmatch patterns (comma-separated; quantize_rowwise and
                        quantize_blockwise are names too)
    --no-check          do not read the outputs back (for initcheck: it does not see the epilogue's TMA stores,
                        so every read of a CUTLASS kernel's output is reported as uninitialized; measured on the
                        H200, 2026-11-29: all 152640 output elements of one kernel's sweep, while the same outputs
                        passed the element-wise float64 check)
Each launch is announced on stdout before it runs, so a sanitizer report can be traced to its kernel.
"""
import argparse
import fnmatch
import sys

import torch

import fp8ext
from fp8ext.testing import (blockwise_kernel_out_dtype, check_against_reference, kernel_dtypes, kernel_max_m,
                            random_blockwise_operands, random_fp8, random_scales)

WRAP_K = 2064  # 17 K tiles: wraps every kernel's pipeline (at most 8 stages) twice
SHAPES = [(M, 144, K) for M in (1, 17, 255, 257) for K in (16, 272, WRAP_K)]
BLOCKWISE_SHAPES = [(M, N, K) for M in (1, 17, 255, 257) for N in (144, 272) for K in (272, WRAP_K)]


def decode_shapes(max_m: int, shapes: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The hand-written decode kernels compute M <= max_m: the shapes' N and K at M in {1, 3, max_m / 2 + 1,
    max_m}."""
    nk = sorted({(N, K) for _, N, K in shapes})
    return [(M, N, K) for M in sorted({1, 3, max_m // 2 + 1, max_m}) for N, K in nk]


def blockwise_max_m(name: str) -> int | None:
    """The largest M a block-scaled decode kernel computes (bw_gemv_m4: 4, bw_gemv_tc_m32: 32); None for a tile
    kernel."""
    return 4 if "_gemv_m4_" in name else 32 if "_gemv_tc_" in name else None


def blockwise_launches(patterns: list[str], quick: bool, check: bool) -> tuple[int, int]:
    """Every block-scaled kernel matching the patterns, forced by name, on BLOCKWISE_SHAPES (--quick: one shape at
    the pipeline-wrapping K). Returns (launches, kernels)."""
    names = [n for n in fp8ext.blockwise_kernel_names() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    launches = 0
    for name in names:
        out_dtype = blockwise_kernel_out_dtype(name)
        max_m = blockwise_max_m(name)
        shapes = decode_shapes(max_m, BLOCKWISE_SHAPES) if max_m else BLOCKWISE_SHAPES
        if quick:
            shapes = [(max_m or 257, 272, WRAP_K)]
        with fp8ext.force_kernel(name):
            for M, N, K in shapes:
                print(f"launch {name} {M}x{N}x{K}", flush=True)
                a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
                bias = torch.randn(N, device="cuda").to(out_dtype) if M % 2 else None
                out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
                if check:
                    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"{name} {M}x{N}x{K}")
                launches += 1
    return launches, len(names)


# Grouped calls (2d x 3d, as MoE experts): empty, 1-row and unaligned groups with one of several tiles' rows, and
# one group holding most rows (a split kernel's large tile), N = 144 and 272, K = WRAP_K.
GROUPED_SIZES = ([0, 1, 17, 0, 255, 3], [2, 0, 1, 300, 0, 5, 1])


def grouped_launches(patterns: list[str], quick: bool, check: bool) -> tuple[int, int]:
    """Every grouped kernel matching the patterns, by name, on GROUPED_SIZES (--quick: the first). Returns
    (launches, kernels)."""
    from fp8ext.bench.suites.grouped import experts, operands
    names = [n for n in torch.ops.fp8ext._grouped_kernel_names() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    launches = 0
    for name in names:
        blockwise, fast = name.startswith("grp_bw_"), "_fast_" in name
        for sizes in GROUPED_SIZES[:1] if quick else GROUPED_SIZES:
            N = 272 if blockwise else 144
            print(f"launch {name} groups {sizes} N {N} K {WRAP_K}", flush=True)
            w = random_fp8(len(sizes) * N, WRAP_K, device="cuda").view(len(sizes), N, WRAP_K)
            sb = (random_scales(len(sizes) * -(-N // 128) * -(-WRAP_K // 128), device="cuda")
                  .view(len(sizes), -(-N // 128), -(-WRAP_K // 128)).transpose(-2, -1) if blockwise
                  else random_scales(len(sizes) * N, device="cuda").view(len(sizes), N))
            a, b, sa, sb, offs = operands(sizes, WRAP_K, blockwise, w, sb)
            bias = torch.randn(len(sizes), N, device="cuda").to(torch.bfloat16)
            out = torch.ops.fp8ext._scaled_grouped_mm_with_kernel(a, b, sa, sb, offs, bias, None, fast, name)
            if check:  # experts() lists the groups with rows, in order
                for g, (a_g, b_g, sa_g, sb_g) in zip([g for g, n in enumerate(sizes) if n],
                                                     experts(a, b, sa, sb, sizes, blockwise)):
                    start = sum(sizes[:g])
                    check_against_reference(out[start:start + a_g.size(0)], a_g, b_g, sa_g, sb_g, bias[g],
                                            use_fast_accum=fast, what=f"{name} {sizes} group {g}")
            launches += 1
    return launches, len(names)


def quantize_blockwise_launches(check: bool) -> int:
    """quantize_blockwise: the fused kernel on 1 x 128 groups (a partial last group, a padded row stride, one row)
    and the 128 x 128 weight blocks (torch ops), from each input dtype; checked bit for bit against the CPU
    path."""
    launches = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for M, K, block, pad in ((1, 7168, (1, 128), 0), (33, 272, (1, 128), 0), (257, 2064, (1, 128), 16),
                                 (300, 400, (128, 128), 0)):
            wide = torch.randn(M, K + pad, device="cuda", dtype=dtype)
            x = wide[:, :K]
            print(f"launch quantize_blockwise {block} {M}x{K} {dtype} row stride {K + pad}", flush=True)
            q, scale = fp8ext.quantize_blockwise(x, block)
            if check:
                q_ref, scale_ref = fp8ext.quantize_blockwise(x.cpu(), block)
                assert torch.equal(q.cpu().view(torch.uint8), q_ref.view(torch.uint8)), (block, M, K, dtype)
                assert torch.equal(scale.cpu(), scale_ref), (block, M, K, dtype)
            launches += 1
    return launches


def quantize_launches(check: bool) -> int:
    """quantize_rowwise on rows of each width class of its kernels (one pass: 32 to 1024 threads per row; two
    passes: a warp, 128 or 512 threads), from each input dtype to each FP8 format, 2-D and 3-D, aligned and not (a
    view that starts one element into a wider buffer takes the element-wise, two-pass loads; K = 36864 takes the
    aligned two-pass kernel); checked bit for bit against the CPU path."""
    launches = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for fp8 in (torch.float8_e4m3fn, torch.float8_e5m2):
            for M, K in ((1, 16), (9, 1024), (9, 2048), (3, 8192), (2, 16384), (2, 28672), (2, 36864)):
                wide = torch.randn(M, K + 16, device="cuda", dtype=dtype)
                for what, x in (("aligned", wide[:, :K]), ("unaligned", wide[:, 1:1 + K]),
                                ("3-D", wide[:, :K].reshape(1, M, K))):
                    print(f"launch quantize_rowwise {what} {M}x{K} {dtype} -> {fp8}", flush=True)
                    q, scale = fp8ext.quantize_rowwise(x, dtype=fp8, scale_ub=1.5 if M == 9 else None)
                    if check:
                        q_ref, scale_ref = fp8ext.quantize_rowwise(x.cpu(), dtype=fp8, scale_ub=1.5 if M == 9 else None)
                        assert torch.equal(q.cpu().view(torch.uint8), q_ref.view(torch.uint8)), (what, M, K, dtype)
                        assert torch.equal(scale.cpu(), scale_ref), (what, M, K, dtype)
                    launches += 1
    return launches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kernels", default="*")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    patterns = args.kernels.split(",")
    names = [n for n in fp8ext.kernel_names() if any(fnmatch.fnmatch(n, p) for p in patterns)]
    torch.manual_seed(0)
    launches = 0
    for name in names:
        out_dtype, fast, a_dtype = kernel_dtypes(name)
        max_m = kernel_max_m(name)
        shapes = decode_shapes(max_m, SHAPES) if max_m else SHAPES
        if args.quick:
            shapes = [(max_m or 257, 144, WRAP_K)]
        with fp8ext.force_kernel(name):
            for M, N, K in shapes:
                print(f"launch {name} {M}x{N}x{K}", flush=True)
                a = random_fp8(M, K, a_dtype, device="cuda")
                b = random_fp8(N, K, device="cuda").t()
                sa = random_scales(M, device="cuda", shape=(M, 1))
                sb = random_scales(N, device="cuda", shape=(1, N))
                bias = torch.randn(N, device="cuda").to(out_dtype)
                out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
                if not args.no_check:
                    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast, what=f"{name} {M}x{N}x{K}")
                launches += 1
    bw_launches, bw_kernels = blockwise_launches(patterns, args.quick, check=not args.no_check)
    grouped, grouped_kernels = grouped_launches(patterns, args.quick, check=not args.no_check)
    launches += bw_launches + grouped
    if any(fnmatch.fnmatch("quantize_rowwise", p) for p in patterns):
        launches += quantize_launches(check=not args.no_check)
    if any(fnmatch.fnmatch("quantize_blockwise", p) for p in patterns):
        launches += quantize_blockwise_launches(check=not args.no_check)
    # tensor-wise (cuBLAS route) and the empty shapes
    a, b = random_fp8(17, 272, device="cuda"), random_fp8(144, 272, device="cuda").t()
    one = torch.ones((), device="cuda")
    fp8ext.scaled_mm(a, b, one, one)
    fp8ext.scaled_mm(a[:0], b, torch.ones(0, 1, device="cuda"), random_scales(144, device="cuda", shape=(1, 144)))
    torch.cuda.synchronize()
    checked = "launched" if args.no_check else "checked against float64"
    print(f"sanitize workload: {launches} kernel launches over {len(names)} row-wise, {bw_kernels} block-wise and "
          f"{grouped_kernels} grouped kernels {checked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
