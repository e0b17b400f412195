"""fp8ext.quantize_rowwise: the CPU path against the float64 formula, errors, opcheck and torch.compile; on an sm_90
GPU, the CUDA kernel against the CPU path bit for bit."""
import pytest
import torch

import fp8ext
from fp8ext import testing as fp8ext_testing

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
IN_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def formula(x, dtype=E4M3, scale_ub=None):
    """The documented numerics, in float64 where nothing rounds: amax is exact in any precision, a quotient of two
    float32 numbers computed in float64 and rounded to float32 is the correctly rounded float32 quotient, and a
    product of two float32 numbers is exact in float64, so rounding it to float32 gives what the op computes."""
    fmax = FP8_MAX[dtype]
    xd = x.double()
    amax = xd.abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = amax.clamp(max=float(torch.tensor(scale_ub, dtype=torch.float32)))
    amax = amax.clamp(min=float(torch.tensor(1e-12, dtype=torch.float32)))
    scale = (amax / fmax).float()
    inv = (torch.full_like(amax, fmax) / amax).float()  # a true division (fmax / amax would be a reciprocal)
    q = (xd * inv.double()).float().clamp(-fmax, fmax).to(dtype)
    return q, scale


def assert_same(got, want):
    (q, s), (q_ref, s_ref) = got, want
    assert q.dtype == q_ref.dtype and q.shape == q_ref.shape
    assert s.dtype == torch.float32 and s.shape == s_ref.shape
    assert torch.equal(s.cpu(), s_ref.cpu())
    assert torch.equal(q.cpu().view(torch.uint8), q_ref.cpu().view(torch.uint8))


def random_rows(*shape, dtype=torch.bfloat16, device="cpu"):
    # Rows of very different magnitudes, so that the per-row scales differ and some values land on subnormals.
    span = 10 if dtype == torch.float16 else 20  # float16 overflows past 65504
    x = torch.randn(*shape, device=device)
    x = x * torch.exp2(torch.randint(-span, span, (*shape[:-1], 1), device=device).float())
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(65, 160), (3, 21, 160)])
def test_the_testing_helper_quantizes_as_the_op(in_dtype, dtype, shape):
    # fp8ext.testing.quantize_rowwise is the torch-ops peer of the benchmarks and the model suite: it must give
    # the op's bits, or the peers compare different activations; over the last dimension, at any rank.
    x = random_rows(*shape, dtype=in_dtype)
    assert_same(fp8ext_testing.quantize_rowwise(x, dtype), fp8ext.quantize_rowwise(x, dtype=dtype))


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(7, 64), (1, 16), (3, 5, 32)])
def test_cpu_matches_formula(shape, in_dtype, dtype):
    x = random_rows(*shape, dtype=in_dtype)
    got = fp8ext.quantize_rowwise(x, dtype=dtype)
    assert got[0].shape == x.shape and got[1].shape == (*shape[:-1], 1)
    assert got[0].is_contiguous() and got[1].is_contiguous()
    assert_same(got, formula(x, dtype))
    # The point of it: q * scale is x to FP8's relative precision (2^-4 for e4m3, 2^-3 for e5m2, halved for
    # round to nearest), apart from values below the smallest normal of the row's scale.
    q, s = got
    err = (q.double() * s.double() - x.double()).abs()
    tol = (2.0 ** -4 if dtype == E4M3 else 2.0 ** -3) * x.double().abs() + s.double() * 2.0 ** (-9 if dtype == E4M3
                                                                                             else -16)
    assert bool((err <= tol).all())


def test_zero_row_and_scale_ub():
    x = random_rows(4, 32, dtype=torch.float32)
    x[1] = 0
    x[2, 3] = 1e6  # an outlier the bound caps
    x[3, 0] = float("inf")
    q, s = fp8ext.quantize_rowwise(x)
    assert torch.isfinite(s[1]).all() and s[1].item() == pytest.approx(1e-12 / 448) and not q[1].float().any()
    assert_same((q[:3], s[:3]), formula(x[:3]))
    ub = 100.0
    q, s = fp8ext.quantize_rowwise(x, scale_ub=ub)
    assert_same((q, s), formula(x, scale_ub=ub))
    assert s[2].item() == pytest.approx(ub / 448) and q[2, 3].float().item() == 448.0
    assert q[3, 0].float().item() == 448.0 and torch.isfinite(s[3]).all()


def test_nan_row_is_nan():
    x = random_rows(3, 32)
    x[1, 5] = float("nan")
    q, s = fp8ext.quantize_rowwise(x)
    assert torch.isnan(s[1]).all() and torch.isnan(q[1].float()).all()
    assert_same((q[0::2], s[0::2]), formula(x[0::2]))


def test_nan_scale_is_positive_nan_whatever_the_sign_of_the_nan():
    # The kernels' amax comes from integer keys with the sign cleared, so a NaN row's scale is +NaN there; the CPU
    # path gives the same bits (abs_max_nan clears a NaN's sign), for row-wise and block-wise scales.
    x = random_rows(2, 256).bfloat16()
    x.view(torch.int16)[1, 5] = -64  # 0xffc0: a quiet NaN with the sign bit set (a float -> bf16 cast drops it)
    assert torch.isnan(x[1, 5]) and torch.signbit(x[1, 5])
    # Row 1's scale, and its first 1 x 128 group's (the NaN is at k = 5).
    for scale in (fp8ext.quantize_rowwise(x)[1][1], fp8ext.quantize_blockwise(x)[1][1, 0]):
        assert torch.isnan(scale).all() and not torch.signbit(scale).any()


def test_strided_inputs_match_contiguous():
    wide = random_rows(6, 80)
    x = wide[:, 16:64]  # a padded row stride and an offset that is a multiple of 16 bytes
    assert_same(fp8ext.quantize_rowwise(x), fp8ext.quantize_rowwise(x.contiguous()))
    x3 = random_rows(4, 3, 32).transpose(0, 1)  # [3, 4, 32] with non-collapsible leading strides
    assert_same(fp8ext.quantize_rowwise(x3), fp8ext.quantize_rowwise(x3.contiguous()))
    odd = random_rows(5, 33)[:, 1:]  # rows start 2 bytes past 16-byte boundaries
    assert_same(fp8ext.quantize_rowwise(odd), formula(odd))


def test_empty_rows():
    q, s = fp8ext.quantize_rowwise(torch.empty(0, 32, dtype=torch.bfloat16))
    assert q.shape == (0, 32) and s.shape == (0, 1)
    q, s = fp8ext.quantize_rowwise(torch.empty(2, 0, 32, dtype=torch.bfloat16))
    assert q.shape == (2, 0, 32) and s.shape == (2, 0, 1)


BAD = [
    (lambda: (torch.randn(4, 32).double(), {}),
     r"fp8ext.quantize_rowwise: x: expected dtype torch.bfloat16, torch.float16 or torch.float32, got torch.float64"),
    (lambda: (torch.randn(4, 32).to(E4M3), {}), r"x: expected dtype .* got torch.float8_e4m3fn"),
    (lambda: (torch.randn(32).bfloat16(), {}),
     r"x: expected a 2-D \[M, K\] or 3-D \[B, S, K\] tensor, got a 1-D tensor of shape \[32\]"),
    (lambda: (torch.randn(2, 2, 2, 32).bfloat16(), {}), r"got a 4-D tensor of shape \[2, 2, 2, 32\]"),
    (lambda: (torch.randn(4, 40).bfloat16(), {}),
     r"x: K = 40 \(the last dimension\) must be a positive multiple of 16 \(x is \[4, 40\]\)"),
    (lambda: (torch.randn(4, 0).bfloat16(), {}), r"x: K = 0 \(the last dimension\) must be a positive multiple"),
    (lambda: (torch.randn(32, 4).bfloat16().t(), {}),
     r"x: the last dimension must be contiguous \(stride 1\), got strides \[1, 4\]; pass x.contiguous\(\)"),
    (lambda: (torch.randn(4, 32).bfloat16(), {"dtype": torch.bfloat16}),
     r"dtype: expected torch.float8_e4m3fn or torch.float8_e5m2, got torch.bfloat16"),
    (lambda: (torch.randn(4, 32).bfloat16(), {"scale_ub": 0.0}), r"scale_ub: expected a finite number > 0"),
    (lambda: (torch.randn(4, 32).bfloat16(), {"scale_ub": float("inf")}), r"scale_ub: expected a finite number"),
    (lambda: (torch.randn(4, 32).bfloat16(), {"scale_ub": 1e300}), r"scale_ub: expected a finite number"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_inputs_raise_one_clear_error(case):
    make, pattern = BAD[case]
    x, kwargs = make()
    with pytest.raises(RuntimeError, match=pattern):
        fp8ext.quantize_rowwise(x, **kwargs)
    # The fake implementation runs the same checks: tracing raises the same message.
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode, pytest.raises(RuntimeError, match=pattern):
        fp8ext.quantize_rowwise(mode.from_tensor(x), **kwargs)


def test_requires_grad_is_refused():
    x = torch.randn(4, 32, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"fp8ext.quantize_rowwise: x: requires grad, but fp8ext.quantize_rowwise "
                                           r"is not differentiable"):
        fp8ext.quantize_rowwise(x)
    with torch.no_grad():
        q, s = fp8ext.quantize_rowwise(x)
    assert not q.requires_grad and not s.requires_grad


OPCHECK_SAMPLES = {
    "bf16_2d": lambda: ((random_rows(8, 64),), {}),
    "fp16_3d_e5m2": lambda: ((random_rows(2, 3, 32, dtype=torch.float16),), {"dtype": E5M2}),
    "fp32_ub": lambda: ((random_rows(5, 48, dtype=torch.float32),), {"scale_ub": 3.0}),
    "padded": lambda: ((random_rows(4, 64)[:, :32],), {}),
}


@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck(sample):
    args, kwargs = OPCHECK_SAMPLES[sample]()
    result = torch.library.opcheck(torch.ops.fp8ext.quantize_rowwise.default, args, kwargs, test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamic):
    torch._dynamo.reset()

    def f(x):
        q, s = fp8ext.quantize_rowwise(x, scale_ub=1e4)
        return q.float() * s

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for M in (16, 40):
        x = random_rows(M, 64)
        assert torch.equal(compiled(x), f(x))


# ---- the CUDA kernel on an sm_90 GPU: bit-exact with the CPU path ----

# Every width of the one-pass kernel (a row of 16-bit values: 32 threads up to K = 1024, then 64, 128, 256, 512 and
# 1024 threads up to K = 32768; float32 rows need twice the threads; rows that end inside a width's last packs:
# 4112, 8208 and 12288) and the aligned two-pass kernel past 64 KiB a row (32768 and 36864; 28672 in float32 too).
GPU_SHAPES = [(1, 16), (3, 48), (17, 1040), (255, 2048), (33, 4096), (7, 8192), (5, 16384), (5, 28672),
              (1000, 4096), (2, 9, 4096), (4, 1, 128), (3, 32768), (3, 36864), (1, 4112), (32, 8208),
              (2, 3, 12288)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cuda_matches_cpu_bit_exactly(shape, in_dtype, dtype):
    x = random_rows(*shape, dtype=in_dtype)
    x[..., 0, :3] = 0  # zeros and a fully zero row among random ones
    x.view(-1, shape[-1])[-1] = 0
    for ub in (None, 2.0 ** 10):
        got = fp8ext.quantize_rowwise(x.cuda(), dtype=dtype, scale_ub=ub)
        assert got[0].device.type == "cuda" and got[1].device.type == "cuda"
        assert got[0].is_contiguous() and got[1].is_contiguous()
        assert_same(got, fp8ext.quantize_rowwise(x, dtype=dtype, scale_ub=ub))


@pytest.mark.gpu
@pytest.mark.parametrize("in_dtype", IN_DTYPES)
def test_cuda_strided_and_unaligned_inputs(in_dtype):
    x = random_rows(64, 4096 + 64, dtype=in_dtype, device="cuda")
    for view in (x[:, :4096], x[:, 16:4096 + 16], x[:, 1:4096 + 1], x.view(8, 8, -1)[:, :, :1024].transpose(0, 1)):
        assert_same(fp8ext.quantize_rowwise(view), fp8ext.quantize_rowwise(view.cpu()))
    # Few long rows with row strides, 2-D and 3-D.
    x = random_rows(16, 2 * 8192, dtype=in_dtype, device="cuda")
    for view in (x[:, 8192:], x.view(4, 4, -1)[:, :, :8192].transpose(0, 1)):
        assert_same(fp8ext.quantize_rowwise(view), fp8ext.quantize_rowwise(view.cpu()))


@pytest.mark.gpu
def test_cuda_nan_and_inf_rows():
    x = random_rows(4, 2048, dtype=torch.float32, device="cuda")
    x[1, 7] = float("nan")
    x[2, 9] = float("inf")
    q, s = fp8ext.quantize_rowwise(x)
    assert torch.isnan(s[1]).all() and torch.isnan(q[1].float()).all()
    assert_same((q[0::3], s[0::3]), fp8ext.quantize_rowwise(x[0::3].cpu()))
    q, s = fp8ext.quantize_rowwise(x, scale_ub=8.0)
    assert q[2, 9].float().item() == 448.0 and s[2].item() == pytest.approx(8.0 / 448)


@pytest.mark.gpu
def test_cuda_opcheck_and_compile():
    x = random_rows(33, 1024, device="cuda")
    result = torch.library.opcheck(torch.ops.fp8ext.quantize_rowwise.default, (x,), {"scale_ub": 5.0},
                                   test_utils=OPCHECK_UTILS)
    assert all(v == "SUCCESS" for v in result.values()), result
    torch._dynamo.reset()
    f = torch.compile(lambda t: fp8ext.quantize_rowwise(t), fullgraph=True)
    assert_same(f(x), fp8ext.quantize_rowwise(x))


@pytest.mark.gpu
def test_cuda_runs_on_the_current_stream_and_allocates_only_its_outputs():
    x = random_rows(256, 4096, device="cuda")
    fp8ext.quantize_rowwise(x)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # a slow producer: an op on another stream would read the old x
        fresh = random_rows(256, 4096, device="cuda")
        x.copy_(fresh)
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        q, s = fp8ext.quantize_rowwise(x)
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 2
    torch.cuda.current_stream().wait_stream(side)
    assert_same((q, s), fp8ext.quantize_rowwise(fresh.cpu()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("fp8", [E4M3, E5M2])
@pytest.mark.parametrize("block,rows,cols", [((128, 128), 300, 400), ((128, 128), 2048, 7168), ((1, 128), 33, 200)])
def test_quantize_blockwise_torch_ops_path_on_cuda_equals_the_cpu_path(block, rows, cols, dtype, fp8):
    # quantize_blockwise's torch-ops path (128 x 128 weight blocks; activations whose K is not a multiple of 16)
    # must give the CPU's bits on the GPU too. Its scale once divided by a Python scalar, which CUDA computes as a
    # multiply by the reciprocal: 1-ulp scales on some blocks (seen on the H200 at 300 x 400 bf16).
    x = torch.randn(rows, cols, device="cuda", dtype=dtype) * torch.rand(rows, 1, device="cuda", dtype=dtype) * 40
    q, scale = fp8ext.quantize_blockwise(x, block, dtype=fp8)
    q_cpu, scale_cpu = fp8ext.quantize_blockwise(x.cpu(), block, dtype=fp8)
    assert torch.equal(scale.cpu(), scale_cpu)
    assert torch.equal(q.cpu().view(torch.uint8), q_cpu.view(torch.uint8))


def test_quantize_blockwise_takes_the_block_as_a_list_as_configs_store_it():
    x = random_rows(256, 256)
    assert_same(fp8ext.quantize_blockwise(x, [128, 128]), fp8ext.quantize_blockwise(x, (128, 128)))
