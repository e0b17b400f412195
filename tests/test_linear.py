"""fp8ext.linear (torch.ops.fp8ext.linear): quantize_rowwise then scaled_mm in one call. It must equal the two ops
bit for bit (CPU: its backend is them; GPU: the same kernels, chosen alike), validate its own arguments with the
messages that docs/model_path.md describes (eager and traced alike), pass opcheck, refuse grad, and run in CUDA
graphs."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import fp8ext
from fp8ext.testing import assert_opcheck, random_fp8, random_scales

E4M3 = torch.float8_e4m3fn


def operands(lead, K, N, dtype=torch.bfloat16, bias=False, scale_shape="vector", device="cpu", weight_rows=None):
    """x of shape lead + (K,), a weight [N, K] (rows [16, 16 + N) of a larger one when weight_rows is given), its
    per-row scales and an optional bias; fresh random values."""
    x = torch.randn(*lead, K, device=device).to(dtype)
    rows = weight_rows or N
    full = random_fp8(rows, K, device=device)
    weight = full[16:16 + N] if weight_rows else full
    scales = random_scales(rows, device=device, shape=(rows,))
    weight_scale = scales[16:16 + N] if weight_rows else scales
    if scale_shape == "column":
        weight_scale = weight_scale.view(N, 1)
    b = torch.randn(N, device=device).to(dtype) if bias else None
    return x, weight, weight_scale, b


def two_ops(x, weight, weight_scale, bias, fast):
    """What fp8ext.linear is defined as: the two public ops, with the views between them."""
    K, N = weight.shape[1], weight.shape[0]
    q, s = fp8ext.quantize_rowwise(x)
    out = fp8ext.scaled_mm(q.view(-1, K), weight.t(), s.view(-1, 1), weight_scale.reshape(N), bias=bias,
                           out_dtype=x.dtype, use_fast_accum=fast)
    return out.view(*x.shape[:-1], N)


@pytest.mark.parametrize("lead", [(1,), (7,), (2, 5)], ids=["M1", "M7", "3d"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("scale_shape", ["vector", "column"])
def test_cpu_equals_the_two_ops(lead, dtype, bias, scale_shape):
    x, w, ws, b = operands(lead, 64, 48, dtype, bias, scale_shape)
    for fast in (True, False):
        out = fp8ext.linear(x, w, ws, b, use_fast_accum=fast)
        assert out.shape == (*lead, 48) and out.dtype == dtype and out.is_contiguous()
        assert torch.equal(out, two_ops(x, w, ws, b, fast))


def test_cpu_rows_of_a_larger_weight_and_empty_x():
    x, w, ws, b = operands((9,), 32, 32, bias=True, weight_rows=80)
    assert w.storage_offset() == 16 * 32
    assert torch.equal(fp8ext.linear(x, w, ws, b), two_ops(x, w, ws, b, True))
    empty = fp8ext.linear(torch.empty(0, 32, dtype=torch.bfloat16), w, ws)
    assert empty.shape == (0, 32) and empty.dtype == torch.bfloat16


def bad_cases():
    x, w, ws, b = operands((4,), 64, 32, bias=True)
    return [
        ((x.double(), w, ws, None), r"fp8ext.linear: x: expected dtype torch.bfloat16, torch.float16 or torch.float32, "
                                    r"got torch.float64"),
        ((x[:, :40], w, ws, None), r"fp8ext.linear: x: K = 40 \(the last dimension\) must be a positive multiple"),
        ((x.t().contiguous().t(), w, ws, None), r"fp8ext.linear: x: the last dimension must be contiguous"),
        ((x, w.t(), ws, None), r"fp8ext.linear: weight: expected shape \[N, K\] with K = 64 \(the last dimension "
                               r"of x\), got \[64, 32\]"),
        ((x, w.to(torch.float8_e5m2), ws, None), r"fp8ext.linear: weight: expected dtype torch.float8_e4m3fn, got "
                                                 r"torch.float8_e5m2"),
        ((x, w[:24], ws[:24], None), r"fp8ext.linear: weight: N = 24 \(its rows\) must be a positive multiple of 16"),
        ((x, w.view(16, 128), ws, None), r"fp8ext.linear: weight: expected shape \[N, K\] with K = 64"),
        ((x, w, ws.double(), None), r"fp8ext.linear: weight_scale: expected dtype torch.float32, got torch.float64"),
        ((x, w, ws[:16], None), r"fp8ext.linear: weight_scale: expected one scale per row of the weight, shape "
                                r"\(32,\) or \(32, 1\), got \[16\]"),
        ((x, w, ws.view(1, 32), None), r"fp8ext.linear: weight_scale: expected one scale per row"),
        ((x, w, torch.randn(64).abs()[::2], None), r"fp8ext.linear: weight_scale: expected a contiguous tensor"),
        ((x, w, ws, b.float()), r"fp8ext.linear: bias: expected dtype torch.bfloat16 \(the dtype of x and of the "
                                r"output\), got torch.float32; pass bias.to\(x.dtype\)"),
        ((x, w, ws, b[:16]), r"fp8ext.linear: bias: expected a 1-D tensor of N = 32 elements, got shape \[16\]"),
    ]


@pytest.mark.parametrize("case", range(len(bad_cases())))
def test_bad_arguments_are_named_eager_and_traced(case):
    args, message = bad_cases()[case]
    with pytest.raises(RuntimeError, match=message):
        fp8ext.linear(*args)
    # The fake implementation runs the same C++ checks on metadata: a traced call raises the same message.
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        with pytest.raises(RuntimeError, match=message):
            torch.ops.fp8ext.linear(*fake)


def test_opcheck_cpu():
    for lead, bias in (((5,), True), ((2, 3), False)):
        x, w, ws, b = operands(lead, 64, 32, bias=bias)
        assert_opcheck(torch.ops.fp8ext.linear.default, (x, w, ws, b, True))


def test_grad_is_refused_with_the_fix():
    x, w, ws, _ = operands((4,), 64, 32)
    x.requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"fp8ext.linear: x: requires grad, but fp8ext.linear is not "
                                           r"differentiable"):
        fp8ext.linear(x, w, ws)
    with torch.no_grad():
        assert not fp8ext.linear(x, w, ws).requires_grad


def test_compile_fullgraph_cpu():
    x, w, ws, b = operands((2, 4), 64, 32, bias=True)
    compiled = torch.compile(lambda *a: fp8ext.linear(*a), fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, w, ws, b), fp8ext.linear(x, w, ws, b))


# ---- sm_90 GPU ----

GPU_SHAPES = [((1,), 4096, 4096), ((3,), 1024, 2048), ((16,), 6144, 4096), ((2, 8), 4096, 14336),
              ((64,), 2048, 4096), ((200,), 3072, 1024), ((1, 2048), 1024, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("lead,N,K", GPU_SHAPES, ids=[f"{'x'.join(map(str, l))}-{n}x{k}" for l, n, k in GPU_SHAPES])
@pytest.mark.parametrize("dtype,bias", [(torch.bfloat16, False), (torch.bfloat16, True), (torch.float16, True),
                                        (torch.float32, False)])
def test_gpu_equals_the_two_ops_bitwise(lead, N, K, dtype, bias):
    x, w, ws, b = operands(lead, K, N, dtype, bias, device="cuda")
    for fast in (True, False):
        assert torch.equal(fp8ext.linear(x, w, ws, b, use_fast_accum=fast), two_ops(x, w, ws, b, fast))


@pytest.mark.gpu
def test_gpu_torch_backstop_and_forced_kernels_take_the_same_route():
    # A shape where the dispatch hands the GEMM to torch._scaled_mm (bf16, no bias): linear runs scaled_mm itself.
    shape = next(((M, N, K) for M in (64, 128, 256) for N, K in ((57344, 8192), (16384, 53248), (28672, 8192))
                  if fp8ext.selected_kernel(M, N, K, torch.bfloat16, True) == "torch._scaled_mm"), None)
    assert shape is not None, "no shape of the list goes to torch's backstop any more: pick another"
    M, N, K = shape
    x, w, ws, _ = operands((M,), K, N, device="cuda")
    assert torch.equal(fp8ext.linear(x, w, ws), two_ops(x, w, ws, None, True))
    # A forced kernel (and scheduler options) is what both run.
    x, w, ws, b = operands((24,), 1024, 2048, bias=True, device="cuda")
    for name in ("swap_pp_64x32x128_c1x1_fast_bf16", "gemv_tc_m32_r16_s8_fast_bf16",
                 "pp_64x128x128_c1x1_ov_precise_bf16@H1"):
        with fp8ext.force_kernel(name):
            assert torch.equal(fp8ext.linear(x, w, ws, b), two_ops(x, w, ws, b, True)), name


@pytest.mark.gpu
def test_gpu_rows_of_a_larger_weight_empty_x_and_cuda_graph():
    x, w, ws, b = operands((2, 8), 512, 256, bias=True, device="cuda", weight_rows=512)
    want = two_ops(x, w, ws, b, True)
    assert torch.equal(fp8ext.linear(x, w, ws, b), want)
    assert fp8ext.linear(x[:, :0], w, ws, b).shape == (2, 0, 256)
    fp8ext.linear(x, w, ws, b)  # warm-up: selection memo, module load
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.linear(x, w, ws, b)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, two_ops(x, w, ws, b, True))


@pytest.mark.gpu
def test_opcheck_cuda():
    x, w, ws, b = operands((2, 16), 512, 256, bias=True, device="cuda")
    assert_opcheck(torch.ops.fp8ext.linear.default, (x, w, ws, b, True))
