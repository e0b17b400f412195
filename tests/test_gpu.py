"""The CUDA backend on an sm_90 GPU: correctness against the float64 bound, every kernel of the family forced by
name, bit-exact cases, opcheck, CUDA graphs, streams, padded leading dimensions and empty shapes."""
import math
import re

import pytest
import torch

import fp8ext
from fp8ext.testing import (assert_opcheck, check_against_reference, kernel_dtypes, kernel_max_m, random_fp8,
                            random_operands, random_scales)

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn
DEV = "cuda"
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# N, K: multiples of 16, not powers of two.
NK = [(1040, 2736), (2736, 7168), (7168, 1040)]
MS = [1, 17, 64, 255, 257, 1000, 4096]


def inputs(M, N, K, a_dtype=E4M3):
    return random_operands(M, N, K, device=DEV, a_dtype=a_dtype)


def poison_allocator(nbytes):
    # Fill a block of the output's size with NaN and free it: the caching allocator hands the same block to the
    # op's output next, so an element the kernel fails to write stays NaN and fails the check.
    torch.full(((nbytes + 3) // 4,), float("nan"), device=DEV)


def run_and_check(M, N, K, out_dtype, fast, with_bias, **kw):
    a, b, sa, sb = inputs(M, N, K, **kw)
    bias = (torch.randn(N, device=DEV) * 4).to(out_dtype) if with_bias else None
    poison_allocator(M * N * out_dtype.itemsize)
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, use_fast_accum=fast)
    assert out.shape == (M, N) and out.dtype == out_dtype and out.device.type == "cuda" and out.is_contiguous()
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast,
                            what=f"M={M} N={N} K={K} {out_dtype} fast={fast} bias={with_bias}")


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("N,K", NK)
@pytest.mark.parametrize("M", MS)
def test_bf16_against_float64(M, N, K, fast):
    run_and_check(M, N, K, torch.bfloat16, fast, with_bias=(M % 2 == 1))


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("M", [1, 17, 257, 1000])
@pytest.mark.parametrize("with_bias", [False, True])
def test_other_out_dtypes_against_float64(M, out_dtype, fast, with_bias):
    run_and_check(M, 2736, 1040, out_dtype, fast, with_bias)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("mode", ["a_tensorwise", "b_tensorwise", "both_1d", "tensorwise"])
def test_scale_modes(mode, fast):
    M, N, K = 255, 1040, 2736
    shape_a, shape_b = {"a_tensorwise": ((), (1, N)), "b_tensorwise": ((M, 1), (1,)), "both_1d": ((M,), (N,)),
                        "tensorwise": ((), ())}[mode]
    a = random_fp8(M, K, device=DEV)
    b = random_fp8(N, K, device=DEV).t()
    sa = random_scales(math.prod(shape_a), device=DEV, shape=shape_a)
    sb = random_scales(math.prod(shape_b), device=DEV, shape=shape_b)
    bias = torch.randn(N, device=DEV).bfloat16()
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, use_fast_accum=fast)
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast, what=mode)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
def test_same_call_as_torch_scaled_mm_rowwise(fast):
    # Drop-in: the argument list torch._scaled_mm takes for row-wise scaling, unchanged; both within the bound.
    M, N, K = 257, 2736, 1040
    a, b, sa, sb = inputs(M, N, K)
    bias = torch.randn(N, device=DEV).bfloat16()
    kwargs = dict(bias=bias, out_dtype=torch.bfloat16, use_fast_accum=fast)
    ours, theirs = fp8ext.scaled_mm(a, b, sa, sb, **kwargs), torch._scaled_mm(a, b, sa, sb, **kwargs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype and ours.stride() == theirs.stride()
    for out in (ours, theirs):
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=fast, what="drop-in")


@pytest.mark.parametrize("b_dtype", [E4M3, torch.float8_e5m2])
def test_tensorwise_shapes_cublas_declines(b_dtype):
    # Found by test_fuzz_gpu: torch._scaled_mm raised CUBLAS_STATUS_NOT_SUPPORTED for a valid
    # tensor-wise call with M = 1, K = 16. fp8ext must still return the right result (its own kernels or the
    # reference path), whichever shapes cuBLAS takes.
    for M, N, K in [(1, 160, 16), (1, 16, 16), (3, 48, 32)]:
        a = random_fp8(M, K, device=DEV)
        b = random_fp8(N, K, b_dtype, device=DEV).t()
        sa, sb = random_scales(1, device=DEV, shape=(1, 1)), random_scales(1, device=DEV, shape=())
        for fast in (True, False):
            out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
            check_against_reference(out, a, b, sa, sb, use_fast_accum=fast, what=f"tensor-wise {M}x{N}x{K}")


def test_tensorwise_fp32_out_with_bias():
    # cuBLAS takes no bias with fp32 output; fp8ext adds it after the call.
    M, N, K = 64, 1040, 1040
    a, b, _, _ = inputs(M, N, K)
    sa, sb = random_scales(1, device=DEV, shape=()), random_scales(1, device=DEV, shape=())
    bias = torch.randn(N, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.float32)
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what="tensorwise fp32 bias")


@pytest.mark.parametrize("M", [1, 300])
def test_e5m2_weight_is_not_read_as_e4m3(M):
    # Found by test_fuzz_gpu: e4m3 a x e5m2 b went to kernels that read b as e4m3 and returned wrong
    # numbers. No kernel reads e5m2 weights, so the call must take the (warned) reference path and be right.
    N, K = 1040, 2736
    a = random_fp8(M, K, device=DEV)
    b = random_fp8(N, K, torch.float8_e5m2, device=DEV).t()
    sa, sb = random_scales(M, device=DEV, shape=(M, 1)), random_scales(N, device=DEV, shape=(1, N))
    for fast in (True, False):
        out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
        check_against_reference(out, a, b, sa, sb, use_fast_accum=fast, what=f"e5m2 weight M={M}")


def test_e5m2_activation():
    for fast in (True, False):
        run_and_check(300, 1040, 2736, torch.bfloat16, fast, with_bias=True, a_dtype=torch.float8_e5m2)


@pytest.mark.parametrize("name", fp8ext.kernel_names() or ["<no kernels built>"])
def test_every_kernel_forced_by_name(name):
    if name.startswith("<"):
        pytest.skip("CPU-only build")
    out_dtype, fast, a_dtype = kernel_dtypes(name)
    shapes = [(1, 1040, 2736), (17, 7168, 1040), (257, 2736, 7168), (1000, 1040, 1040)]
    if name.startswith("gemv_m4"):  # the GEMV computes M <= 4 only
        shapes = [(1, 1040, 2736), (3, 7168, 1040), (4, 2736, 7168)]
    elif name.startswith("gemv_tc_"):  # M up to the name's, in 1, 2 or 4 tiles of 8 tokens; K a multiple of 16
        shapes = [(M, N, K) for M, N, K in [(1, 1040, 2736), (8, 7168, 1040), (9, 2736, 272), (16, 1040, 16),
                                            (17, 7168, 1040), (32, 2736, 7168)] if M <= kernel_max_m(name)]
    with fp8ext.force_kernel(name):
        for M, N, K in shapes:
            run_and_check(M, N, K, out_dtype, fast, with_bias=True, a_dtype=a_dtype)


OVERLAP_KERNELS = [n for n in fp8ext.kernel_names() if "_ov_" in n]


@pytest.mark.parametrize("name", OVERLAP_KERNELS or ["<no overlapped-promotion kernel built>"])
def test_overlapped_promotion_is_bitwise_cutlass_precise(name):
    # overlap_promotion_mainloop.cuh computes the same fp32 sum of the same per-128-K partials, in the same order,
    # as CUTLASS's precise mainloop; it only schedules the adds differently. So its output must equal, bit for
    # bit, that of the CUTLASS kernel of the same tile. K from 1 to 6 tiles, with partial last tiles, takes
    # every exit of its two-fragment loop (odd and even tile counts).
    if name.startswith("<"):
        pytest.skip("no overlapped-promotion kernel in this build")
    twin = name.replace("_ov_", "_")
    if twin not in fp8ext.kernel_names():
        # The cluster only changes how operand tiles reach shared memory (multicast), not the sums: the same tile
        # with another cluster (none first) is as good a twin.
        same_tile = [re.sub(r"_c\d+x\d+_", f"_c{c}_", twin) for c in ("1x1", "1x2", "2x1", "4x1")]
        twin = next((t for t in same_tile if t in fp8ext.kernel_names()), twin)
    assert twin in fp8ext.kernel_names(), f"no CUTLASS precise kernel of {name}'s tile is built"
    for M, N, K in [(100, 1040, 16), (100, 1040, 128), (37, 2736, 256), (100, 1040, 272), (257, 1040, 512),
                    (100, 7168, 640), (1000, 1040, 768)]:
        a, b, sa, sb = inputs(M, N, K)
        bias = (torch.randn(N, device=DEV) * 4).to(torch.bfloat16)
        with fp8ext.force_kernel(name):
            out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=False)
        with fp8ext.force_kernel(twin):
            ref = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=False)
        assert torch.equal(out, ref), f"{name} differs from {twin} at M={M} N={N} K={K}"
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"{name} M={M} N={N} K={K}")


SCHEDULER_OPTIONS = [f"@{r}{w}" for r in "MNH" for w in (1, 2, 4, 8)]


@pytest.mark.parametrize("opts", SCHEDULER_OPTIONS)
def test_scheduler_options_against_float64(opts):
    # Every raster/band, on the cluster, stream-K and swapped kernels, with tile grids that are not a multiple of
    # band x cluster (CUTLASS then walks padded, empty tiles, which must write nothing).
    names = [n for n in fp8ext.kernel_names() if n.endswith("_bf16") and not n.startswith("gemv_")
             and ("_c1x1_" not in n or "sk_" in n or n.startswith("swap_pp_128"))]
    if not names:
        pytest.skip("no CUTLASS kernel with a persistent scheduler in this build")
    for name in names:
        out_dtype, fast, a_dtype = kernel_dtypes(name)
        with fp8ext.force_kernel(name + opts):
            for M, N, K in [(1000, 1040, 1040), (257, 2736, 7168), (3000, 7168, 272)]:
                run_and_check(M, N, K, out_dtype, fast, with_bias=True, a_dtype=a_dtype)


def test_forced_kernel_must_match_the_call():
    names = [n for n in fp8ext.kernel_names() if n.endswith("_fast_bf16")]
    a, b, sa, sb = inputs(16, 1040, 1040)
    with fp8ext.force_kernel(names[0]):
        with pytest.raises(RuntimeError, match="does not compute this call"):
            fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float16)
    with fp8ext.force_kernel("gemv_m4_precise_bf16"):  # M = 16 is beyond the GEMV
        with pytest.raises(RuntimeError, match="does not compute this call"):
            fp8ext.scaled_mm(a, b, sa, sb)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("M", [1, 16, 200])
def test_bit_exact_small_integers(M, fast):
    N, K = 256, 128
    a = torch.randint(-4, 5, (M, K), device=DEV).float()
    w = torch.randint(-4, 5, (N, K), device=DEV).float()
    sa = torch.exp2(torch.randint(-3, 4, (M, 1), device=DEV).float())
    sb = torch.exp2(torch.randint(-3, 4, (1, N), device=DEV).float())
    bias = torch.randint(-8, 9, (N,), device=DEV).float()
    out = fp8ext.scaled_mm(a.to(E4M3), w.to(E4M3).t(), sa, sb, bias=bias, out_dtype=torch.float32,
                           use_fast_accum=fast)
    exact = (a.double() @ w.double().t()) * sa.double() * sb.double() + bias.double()
    assert torch.equal(out.double(), exact)


TC_DECODE_KERNELS = [n for n in fp8ext.kernel_names() if n.startswith("gemv_tc_")]


@pytest.mark.parametrize("name", TC_DECODE_KERNELS or ["<no tensor-core decode kernel built>"])
def test_tensor_core_decode_exact_on_small_integers_and_reads_e5m2(name):
    # gemv_tensor_core.cu feeds each lane's 16 loaded bytes to two MMAs in a permuted K order and adds its K slices
    # through shared memory: with small integers and power-of-two scales every partial sum is exact, so any
    # mispaired byte, lost slice or misplaced token shows as an inexact result. M covers 1, 2 and 4 tiles of 8
    # tokens, N = 272 a last block of partial weight tiles; K = 1040 ends mid-chunk and leaves the last slices of
    # s8 empty.
    if name.startswith("<"):
        pytest.skip("no tensor-core decode kernel in this build")
    with fp8ext.force_kernel(name):
        for M, N, K in [(1, 256, 128), (8, 272, 1040), (13, 256, 512), (16, 1040, 272), (17, 256, 1040),
                        (32, 272, 256)]:
            if M > kernel_max_m(name):
                continue
            a = torch.randint(-4, 5, (M, K), device=DEV).float()
            w = torch.randint(-4, 5, (N, K), device=DEV).float()
            sa = torch.exp2(torch.randint(-3, 4, (M, 1), device=DEV).float())
            sb = torch.exp2(torch.randint(-3, 4, (1, N), device=DEV).float())
            out = fp8ext.scaled_mm(a.to(E4M3), w.to(E4M3).t(), sa, sb, out_dtype=torch.bfloat16,
                                   use_fast_accum=True)
            exact = ((a.double() @ w.double().t()) * sa.double() * sb.double()).to(torch.bfloat16)
            assert torch.equal(out, exact), f"{name} M={M} N={N} K={K}"
        for M in (3, kernel_max_m(name)):  # e5m2 activations take the mixed-type MMA
            run_and_check(M, 2736, 1040, torch.bfloat16, True, with_bias=True, a_dtype=torch.float8_e5m2)




@pytest.mark.parametrize("kwargs", [{}, {"out_dtype": torch.float32, "use_fast_accum": True},
                                    {"bias": "bf16"}, {"tensorwise": True}], ids=["rowwise", "fp32", "bias",
                                                                                  "tensorwise"])
def test_opcheck_cuda(kwargs):
    kwargs = dict(kwargs)
    a, b, sa, sb = inputs(64, 1040, 1040)
    if kwargs.pop("tensorwise", False):
        sa, sb = sa[:1, :1].contiguous(), sb[:1, :1].contiguous()
    if kwargs.get("bias") == "bf16":
        kwargs["bias"] = torch.randn(1040, device=DEV).bfloat16()
    assert_opcheck(torch.ops.fp8ext.scaled_mm.default, (a, b, sa, sb), kwargs)


@pytest.mark.parametrize("M", [8, 300])
def test_cuda_graph_replay_with_new_inputs(M):
    N, K = 2736, 1040
    a, b, sa, sb = inputs(M, N, K)
    bias = torch.randn(N, device=DEV).bfloat16()
    fp8ext.scaled_mm(a, b, sa, sb, bias=bias)  # warm up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    for _ in range(3):
        a2, b2, sa2, sb2 = inputs(M, N, K)
        a.copy_(a2), b.copy_(b2), sa.copy_(sa2), sb.copy_(sb2), bias.copy_(torch.randn(N, device=DEV))
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what="graph replay")


def test_runs_on_current_stream_with_delayed_producer():
    M, N, K = 512, 2736, 1040
    a, b, sa, sb = inputs(M, N, K)
    fresh = random_fp8(M, K, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the producer is slow: if the op ran on another stream it would read stale a
        a.copy_(fresh)
        out = fp8ext.scaled_mm(a, b, sa, sb)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    check_against_reference(out, fresh, b, sa, sb, use_fast_accum=False, what="side stream")


@pytest.mark.parametrize("M", [1, 257])
def test_padded_leading_dims_equal_contiguous(M):
    N, K = 1040, 2736
    a_wide = random_fp8(M, K + 64, device=DEV)
    w_wide = random_fp8(N, K + 32, device=DEV)
    sa, sb = random_scales(M, device=DEV, shape=(M, 1)), random_scales(N, device=DEV, shape=(1, N))
    for fast in (True, False):
        padded = fp8ext.scaled_mm(a_wide[:, :K], w_wide[:, :K].t(), sa, sb, use_fast_accum=fast)
        contiguous = fp8ext.scaled_mm(a_wide[:, :K].contiguous(), w_wide[:, :K].contiguous().t(), sa, sb,
                                      use_fast_accum=fast)
        assert torch.equal(padded, contiguous)


@pytest.mark.parametrize("with_bias", [False, True])
def test_empty_shapes(with_bias):
    N, K = 1040, 1040
    bias = torch.randn(N, device=DEV).bfloat16() if with_bias else None
    a, b, sa, sb = inputs(0, N, K)
    assert fp8ext.scaled_mm(a, b, sa, sb, bias=bias).shape == (0, N)
    M = 7
    out = fp8ext.scaled_mm(torch.empty(M, 0, device=DEV, dtype=E4M3), torch.empty(N, 0, device=DEV, dtype=E4M3).t(),
                           random_scales(M, device=DEV, shape=(M, 1)), random_scales(N, device=DEV, shape=(1, N)),
                           bias=bias)
    assert torch.equal(out, bias.expand(M, N) if with_bias else torch.zeros(M, N, device=DEV, dtype=torch.bfloat16))


def test_compile_fullgraph_cuda():
    torch._dynamo.reset()
    a, b, sa, sb = inputs(128, 1040, 2736)
    f = torch.compile(lambda *x: fp8ext.scaled_mm(*x, use_fast_accum=True), fullgraph=True)
    assert torch.equal(f(a, b, sa, sb), fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True))


def test_deterministic_run_to_run():
    a, b, sa, sb = inputs(257, 2736, 7168)
    for fast in (True, False):
        first = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast)
        for _ in range(3):
            assert torch.equal(fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=fast), first)
