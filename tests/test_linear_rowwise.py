"""fp8ext.linear_rowwise, Float8Linear's forward as one op: on CPU, equal to quantize_rowwise followed by scaled_mm
(its definition), its errors (eager and traced) and opcheck; on an sm_90 GPU, the fused decode kernel
(csrc/sm90/decode_linear.cu) against the two ops with the same tensor-core GEMV forced, bit for bit, in every
layout the route admits, in CUDA graphs, under torch.compile, and with fusion turned off."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fp8ext
from fp8ext.testing import random_fp8

E4M3 = torch.float8_e4m3fn
OPCHECK_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
TWINS = ("gemv_tc_m32_r16_s4_fast_bf16", "gemv_tc_m32_r16_s8_fast_bf16")


def operands(M, N, K, lead=None, bias=True, x_dtype=torch.bfloat16, device="cpu"):
    """Fresh random x (not quantized), an e4m3 weight [N, K] with per-row scales, and a bias of x's dtype."""
    x = torch.randn(*(lead or (M,)), K, device=device).to(x_dtype) * 3
    w = random_fp8(N, K, device=device)
    ws = torch.rand(N, device=device) * 0.02 + 0.001
    b = torch.randn(N, device=device).to(x_dtype) if bias else None
    return x, w, ws, b


def two_ops(x, w, ws, b, use_fast_accum=True):
    """The definition: quantize_rowwise, then scaled_mm with b = weight.t()."""
    K, N = w.shape[1], w.shape[0]
    xq, xs = fp8ext.quantize_rowwise(x)
    out = fp8ext.scaled_mm(xq.view(-1, K), w.t(), xs.view(-1, 1), ws, bias=b, out_dtype=x.dtype,
                           use_fast_accum=use_fast_accum)
    return out.view(*x.shape[:-1], N)


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("lead", [(5,), (2, 3)], ids=["2d", "3d"])
@pytest.mark.parametrize("bias", [True, False])
def test_cpu_equals_its_definition(lead, x_dtype, bias):
    x, w, ws, b = operands(None, 48, 64, lead=lead, bias=bias, x_dtype=x_dtype)
    out = fp8ext.linear_rowwise(x, w, ws, b)
    assert out.dtype == x_dtype and out.shape == (*lead, 48)
    assert torch.equal(out, two_ops(x, w, ws, b))


def test_cpu_strided_3d_x_and_empty_rows():
    x, w, ws, b = operands(None, 32, 64, lead=(4, 6))
    view = x[:, ::2]  # 3-D with an outer stride that is not rows x row stride
    assert torch.equal(fp8ext.linear_rowwise(view, w, ws, b), two_ops(view, w, ws, b))
    empty = fp8ext.linear_rowwise(x[:0], w, ws, b)
    assert empty.shape == (0, 6, 32)


def _bad(name):
    x, w, ws, b = operands(4, 48, 64)
    args = {"x": x, "weight": w, "weight_scale": ws, "bias": b}
    args.update({
        "x_k": {"x": torch.randn(4, 40).bfloat16(), "weight": random_fp8(48, 40)},
        "x_4d": {"x": torch.randn(2, 2, 2, 64).bfloat16()},
        "weight_3d": {"weight": w.unsqueeze(0)},
        "weight_dtype": {"weight": w.float()},
        "weight_k": {"weight": random_fp8(48, 32)},
        "weight_scale_shape": {"weight_scale": ws[:3]},
        "weight_scale_dtype": {"weight_scale": ws.double()},
        "bias_dtype": {"bias": b.float()},
        "n_not_16": {"weight": random_fp8(40, 64), "weight_scale": ws[:40], "bias": b[:40]},
    }[name])
    return args


ERRORS = {
    "x_k": r"^fp8ext\.linear_rowwise: x: K = 40 \(the last dimension\) must be a positive multiple of 16",
    "x_4d": r"^fp8ext\.linear_rowwise: x: expected a 2-D \[M, K\] or 3-D \[B, S, K\] tensor",
    "weight_3d": r"^fp8ext\.linear_rowwise: weight: expected a 2-D \[N, K\] tensor",
    "weight_dtype": r"^fp8ext\.linear_rowwise: weight: expected dtype torch\.float8_e4m3fn, got torch\.float32",
    "weight_k": r"^fp8ext\.linear_rowwise: weight: expected \[N, 64\] \(K = the last dimension of x",
    "weight_scale_shape": r"^fp8ext\.linear_rowwise: weight_scale: expected a float32 \[48\] tensor",
    "weight_scale_dtype": r"^fp8ext\.linear_rowwise: weight_scale: expected a float32 \[48\] tensor",
    "bias_dtype": r"^fp8ext\.linear_rowwise: bias: expected a \[48\] tensor of x's dtype torch\.bfloat16",
    "n_not_16": r"^fp8ext\.linear_rowwise: b: N = 40 must be a multiple of 16 .*\(linear_rowwise runs scaled_mm "
                r"with b = weight\.t\(\), scale_b = weight_scale\)",
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_name_the_argument_eager_and_traced(name):
    args = _bad(name)
    with pytest.raises(RuntimeError, match=ERRORS[name]):
        fp8ext.linear_rowwise(**args)
    torch._dynamo.reset()
    traced = torch.compile(lambda a: fp8ext.linear_rowwise(**a), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=ERRORS[name].lstrip("^")):
        traced(args)


def test_grad_mode_is_refused():
    x, w, ws, b = operands(4, 48, 64)
    with pytest.raises(RuntimeError, match="fp8ext.linear_rowwise: x: requires grad"):
        fp8ext.linear_rowwise(x.requires_grad_(), w, ws, b)


@pytest.mark.parametrize("lead,bias,x_dtype", [((5,), True, torch.bfloat16), ((2, 3), False, torch.float32)])
def test_opcheck_cpu(lead, bias, x_dtype):
    x, w, ws, b = operands(None, 48, 64, lead=lead, bias=bias, x_dtype=x_dtype)
    result = torch.library.opcheck(torch.ops.fp8ext.linear_rowwise.default, (x, w, ws, b, True),
                                   test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result


# ---- On the GPU: the fused decode kernel ----

DEV = "cuda"


def _sm_count():
    return torch.cuda.get_device_properties(0).multi_processor_count


def twin(M, N, K):
    """The scaled_mm kernel whose fused twin linear_rowwise runs for M rows ("" where it runs the two ops)."""
    return torch.ops.fp8ext._linear_rowwise_twin(M, N, K, _sm_count())


def fused_kernel_names(fn):
    """The CUDA kernels fn() launches (names as the profiler reports them)."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# (N, K): the 8B and 70B decode shapes' kinds, K not a multiple of 128, N not a multiple of a block's rows.
GPU_SHAPES = [(1024, 4096), (4096, 14336), (272, 4112), (2736, 1040)]


@pytest.mark.gpu
@pytest.mark.parametrize("N,K", GPU_SHAPES, ids=[f"{n}x{k}" for n, k in GPU_SHAPES])
@pytest.mark.parametrize("name", TWINS)
def test_fused_equals_two_ops_with_the_twin_forced_bitwise(name, N, K):
    for M in (1, 2, 3, 5, 8, 9, 13, 16):
        for lead, bias in (((M,), True), ((M, 1), False), ((1, M), True)):
            x, w, ws, b = operands(M, N, K, lead=lead, bias=bias, device=DEV)
            with fp8ext.force_kernel(name):
                got = fp8ext.linear_rowwise(x, w, ws, b)
                want = two_ops(x, w, ws, b)
            assert torch.equal(got, want), f"{name} M={M} {N}x{K} lead={lead} bias={bias}"


@pytest.mark.gpu
def test_fused_kernel_runs_where_the_route_says_and_nowhere_else():
    N, K = 1024, 4096
    for M, fused in ((1, True), (16, True), (17, False)):
        assert bool(twin(M, N, K)) == fused
        x, w, ws, b = operands(M, N, K, device=DEV)
        names = fused_kernel_names(lambda: fp8ext.linear_rowwise(x, w, ws, b))
        assert any("QuantizeIntoSmem" in n for n in names) == fused, (M, names)
        assert any("quantize_rowwise" in n for n in names) != fused, (M, names)
        # The result is the two ops' with the kernel the route names (or the dispatch's own pick).
        with fp8ext.force_kernel(twin(M, N, K) or None):
            assert torch.equal(fp8ext.linear_rowwise(x, w, ws, b), two_ops(x, w, ws, b)), M
    # Calls the fused kernel does not take run the two ops, with the dispatch's own picks.
    x, w, ws, b = operands(4, N, K, device=DEV)
    for reason, args in {
        "fp32 x": (x.float(), w, ws, b.float()),
        "x rows not 16-byte aligned": (torch.cat([x, x], 1)[:, 4:4 + K], w, ws, b),
        "precise accumulation": (x, w, ws, b, False),
    }.items():
        names = fused_kernel_names(lambda: fp8ext.linear_rowwise(*args))
        assert not any("QuantizeIntoSmem" in n for n in names), reason
        assert any("quantize_rowwise" in n for n in names), reason
        assert torch.equal(fp8ext.linear_rowwise(*args), two_ops(*args)), reason


@pytest.mark.gpu
def test_fused_rows_of_zeros_nan_and_outliers():
    M, N, K = 4, 1024, 4096
    x, w, ws, b = operands(M, N, K, device=DEV)
    x[0] = 0
    x[1, 7] = float("nan")
    x[2, 100] = 3e38
    name = twin(M, N, K)
    got = fp8ext.linear_rowwise(x, w, ws, b)
    with fp8ext.force_kernel(name):
        want = two_ops(x, w, ws, b)
    assert torch.equal(got[0], b) and torch.equal(got[0], want[0])  # a zero row gives the bias exactly
    assert got[1].isnan().all() and want[1].isnan().all()
    assert torch.equal(got[2:], want[2:])


@pytest.mark.gpu
def test_fused_inside_a_cuda_graph_reads_what_the_kernel_before_wrote():
    M, N, K = 8, 4096, 4096
    src, w, ws, b = operands(M, N, K, device=DEV)
    x = torch.empty_like(src)
    with torch.inference_mode():
        x.copy_(src * 2)
        fp8ext.linear_rowwise(x, w, ws, b)  # warm up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.copy_(src * 2)  # the kernel right before the fused one writes its input
            out = fp8ext.linear_rowwise(x, w, ws, b)
        for turn in range(3):
            src.copy_(torch.randn_like(src) * (turn + 1))
            graph.replay()
            torch.cuda.synchronize()
            with fp8ext.force_kernel(twin(M, N, K)):
                assert torch.equal(out, two_ops(src * 2, w, ws, b)), turn


@pytest.mark.gpu
def test_float8linear_compiled_at_decode_sizes_uses_the_fused_kernel():
    torch._dynamo.reset()
    linear = torch.nn.Linear(4096, 1024, device=DEV, dtype=torch.bfloat16)
    f8 = fp8ext.Float8Linear.from_linear(linear)
    compiled = torch.compile(f8, fullgraph=True)
    with torch.inference_mode():
        for M in (1, 4, 16):
            x = torch.randn(M, 1, 4096, device=DEV).bfloat16()
            out = compiled(x)
            assert torch.equal(out, f8(x)), M
            assert any("QuantizeIntoSmem" in n for n in fused_kernel_names(lambda: compiled(x))), M


_SCRIPT = textwrap.dedent("""
    import sys, torch, fp8ext
    torch.manual_seed(1234)
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    outs = []
    for M in (1, 8, 16):
        linear = torch.nn.Linear(4096, 6144, device="cuda", dtype=torch.bfloat16)
        layer = fp8ext.nn.Float8Linear.from_linear(linear)
        x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
        with fp8ext.force_kernel(sys.argv[2]):
            outs.append(layer(x).cpu())
            outs.append(torch.ops.fp8ext._linear_rowwise_twin(M, 6144, 4096, sm))
    torch.save(outs, sys.argv[1])
""")


@pytest.mark.gpu
@pytest.mark.parametrize("name", TWINS)
def test_turning_fusion_off_runs_the_two_ops_with_the_same_bits(tmp_path, name):
    outs = {}
    for fusion in ("1", "0"):
        path = tmp_path / f"fusion{fusion}.pt"
        env = dict(os.environ, FP8EXT_LINEAR_FUSION=fusion)
        subprocess.run([sys.executable, "-c", _SCRIPT, str(path), name], env=env, check=True, timeout=300)
        outs[fusion] = torch.load(path)
    on, off = outs["1"], outs["0"]
    assert [on[i] for i in (1, 3, 5)] == [name] * 3  # the forced twin's fused kernel ran
    assert [off[i] for i in (1, 3, 5)] == ["", "", ""]  # nothing fused with FP8EXT_LINEAR_FUSION=0
    for i in (0, 2, 4):
        assert torch.equal(on[i], off[i]), i
