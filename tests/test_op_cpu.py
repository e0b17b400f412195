"""The op's contract on CPU (these run in CI): reference correctness, every scale mode, bias, out dtypes, empty
shapes, padded leading dimensions, opcheck, torch.compile and the autograd guard."""
import math

import pytest
import torch

import fp8ext
from fp8ext.testing import assert_opcheck, check_against_reference, random_fp8, random_scales

E4M3 = torch.float8_e4m3fn
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]

# scale_a / scale_b layouts: name -> (shape of scale_a given M, shape of scale_b given N)
SCALE_MODES = {
    "rowwise_2d": (lambda M: (M, 1), lambda N: (1, N)),
    "rowwise_1d": (lambda M: (M,), lambda N: (N,)),
    "tensorwise": (lambda M: (), lambda N: ()),
    "tensorwise_1elem": (lambda M: (1,), lambda N: (1, 1)),
    "mixed_a_tensor": (lambda M: (), lambda N: (1, N)),
    "mixed_b_tensor": (lambda M: (M, 1), lambda N: (1,)),
}


def make_inputs(M, N, K, mode="rowwise_2d", a_dtype=E4M3, device="cpu"):
    a = random_fp8(M, K, a_dtype, device=device)
    w = random_fp8(N, K, E4M3, device=device)  # the row-major weight; the op takes w.t()
    sa_shape, sb_shape = (f(n) for f, n in zip(SCALE_MODES[mode], (M, N)))
    sa = random_scales(math.prod(sa_shape), device=device).reshape(sa_shape)
    sb = random_scales(math.prod(sb_shape), device=device).reshape(sb_shape)
    return a, w.t(), sa, sb


@pytest.mark.parametrize("mode", list(SCALE_MODES))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_float64_reference(mode, out_dtype, with_bias):
    M, N, K = 37, 48, 96
    a, b, sa, sb = make_inputs(M, N, K, mode)
    bias = torch.randn(N).to(out_dtype) if with_bias else None
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    assert out.shape == (M, N) and out.dtype == out_dtype and out.is_contiguous()
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"{mode} {out_dtype}")


def test_default_out_dtype_is_bf16_and_fast_accum_accepted():
    a, b, sa, sb = make_inputs(16, 32, 64)
    out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    assert out.dtype == torch.bfloat16
    check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what="default")


def test_e5m2_activation():
    a, b, sa, sb = make_inputs(20, 32, 64, a_dtype=torch.float8_e5m2)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="e5m2 a")


def test_bit_exact_small_integers():
    # Small integers are exact in e4m3, their products and sums (|sum| <= 64 * 16) are exact in fp32, and
    # power-of-two scales only move the exponent: the fp32 output must equal the exact answer bit for bit.
    M, N, K = 24, 32, 64
    a = torch.randint(-4, 5, (M, K)).float()
    w = torch.randint(-4, 5, (N, K)).float()
    sa = torch.exp2(torch.randint(-3, 4, (M, 1)).float())
    sb = torch.exp2(torch.randint(-3, 4, (1, N)).float())
    bias = torch.randint(-8, 9, (N,)).float()
    out = fp8ext.scaled_mm(a.to(E4M3), w.to(E4M3).t(), sa, sb, bias=bias, out_dtype=torch.float32)
    exact = (a.double() @ w.double().t()) * sa.double() * sb.double() + bias.double()
    assert torch.equal(out.double(), exact)


@pytest.mark.parametrize("with_bias", [False, True])
def test_empty_shapes(with_bias):
    N, K = 32, 64
    bias = torch.randn(N).to(torch.bfloat16) if with_bias else None
    # M == 0
    a, b, sa, sb = make_inputs(0, N, K)
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    assert out.shape == (0, N) and out.dtype == torch.bfloat16
    # K == 0: a sum over nothing is zero, plus bias
    M = 5
    a0 = torch.empty(M, 0, dtype=E4M3)
    b0 = torch.empty(N, 0, dtype=E4M3).t()
    out = fp8ext.scaled_mm(a0, b0, random_scales(M, shape=(M, 1)), random_scales(N, shape=(1, N)), bias=bias)
    expected = bias.expand(M, N) if with_bias else torch.zeros(M, N, dtype=torch.bfloat16)
    assert torch.equal(out, expected)
    # N == 0
    out = fp8ext.scaled_mm(random_fp8(M, K), torch.empty(0, K, dtype=E4M3).t(), random_scales(M, shape=(M, 1)),
                           torch.ones(1, 0),
                           bias=torch.empty(0, dtype=torch.bfloat16) if with_bias else None)
    assert out.shape == (M, 0)


def test_padded_leading_dims_equal_contiguous():
    M, N, K = 33, 48, 64
    a_wide = random_fp8(M, K + 32)
    w_wide = random_fp8(N, K + 48)
    a, w = a_wide[:, :K], w_wide[:, :K]
    assert a.stride(0) == K + 32 and w.t().stride(1) == K + 48
    sa, sb = random_scales(M, shape=(M, 1)), random_scales(N, shape=(1, N))
    padded = fp8ext.scaled_mm(a, w.t(), sa, sb)
    contiguous = fp8ext.scaled_mm(a.contiguous(), w.contiguous().t(), sa, sb)
    assert torch.equal(padded, contiguous)


def test_same_conventions_as_torch_scaled_mm():
    # The exact call torch._scaled_mm takes works unchanged, and both land within the float64 bound. (torch's
    # CPU _scaled_mm takes only tensor-wise scales on some versions; tests/test_gpu.py compares row-wise.)
    M, N, K = 32, 64, 128
    a, b, sa, sb = make_inputs(M, N, K, "tensorwise")
    bias = torch.randn(N).to(torch.bfloat16)
    kwargs = dict(bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)
    ours = fp8ext.scaled_mm(a, b, sa, sb, **kwargs)
    theirs = torch._scaled_mm(a, b, sa, sb, **kwargs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    for out in (ours, theirs):
        check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=True, what="drop-in")



@pytest.mark.parametrize("tail", [(None, None, torch.float32), (None, torch.ones(()), torch.float32),
                                  (None, None, torch.float32, True)], ids=["none", "tensor", "with_fast_accum"])
def test_torch_positional_scale_result_is_named(tail):
    # torch._scaled_mm's positions are bias, scale_result, out_dtype, use_fast_accum; fp8ext's have no scale_result,
    # so torch's out_dtype lands in use_fast_accum's place (or one argument too many). fp8ext's own positions work.
    a, b, sa, sb = make_inputs(16, 32, 64)
    assert fp8ext.scaled_mm(a, b, sa, sb, None, torch.float32).dtype == torch.float32
    with pytest.raises(TypeError, match="scale_result|positional"):
        fp8ext.scaled_mm(a, b, sa, sb, *tail)


OPCHECK_SAMPLES = {
    "rowwise": (lambda: make_inputs(16, 32, 64), {}),
    "rowwise_1d": (lambda: make_inputs(16, 32, 64, "rowwise_1d"), {}),
    "tensorwise": (lambda: make_inputs(16, 32, 64, "tensorwise"), {}),
    "mixed": (lambda: make_inputs(16, 32, 64, "mixed_a_tensor"), {}),
    "bias_bf16": (lambda: make_inputs(16, 32, 64), {"bias": torch.randn(32).bfloat16()}),
    "fp16": (lambda: make_inputs(16, 32, 64), {"out_dtype": torch.float16, "bias": torch.randn(32).half()}),
    "fp32": (lambda: make_inputs(16, 32, 64), {"out_dtype": torch.float32, "use_fast_accum": True}),
    "m0": (lambda: make_inputs(0, 32, 64), {}),
}


@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck(sample):
    # torch's test_schema compares inputs with allclose, which has no fp8 kernel; test_no_mutation_no_alias
    # checks the same properties (inputs untouched, output a fresh tensor) directly.
    make, kwargs = OPCHECK_SAMPLES[sample]
    assert_opcheck(torch.ops.fp8ext.scaled_mm.default, make(), kwargs)


def test_no_mutation_no_alias():
    a, b, sa, sb = make_inputs(16, 32, 64)
    bias = torch.randn(32).bfloat16()
    before = [t.view(torch.uint8).clone() if t.dtype == E4M3 else t.clone() for t in (a, b, sa, sb, bias)]
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    after = [t.view(torch.uint8) if t.dtype == E4M3 else t for t in (a, b, sa, sb, bias)]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    assert all(out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() for t in (a, b, sa, sb, bias))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(dynamic):
    torch._dynamo.reset()

    def f(a, b, sa, sb, bias):
        return fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16).float() * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for M in (16, 40):  # a second M exercises the dynamic-shape path (or a recompile)
        a, b, sa, sb = make_inputs(M, 32, 64)
        bias = torch.randn(32).bfloat16()
        assert torch.equal(compiled(a, b, sa, sb, bias), f(a, b, sa, sb, bias))


def test_requires_grad_is_refused_and_no_grad_works():
    a, b, sa, sb = make_inputs(16, 32, 64)
    sa.requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"scale_a: requires grad, but fp8ext.scaled_mm is not differentiable"):
        fp8ext.scaled_mm(a, b, sa, sb)
    with torch.no_grad():
        out = fp8ext.scaled_mm(a, b, sa, sb)
    assert out.requires_grad is False
    with torch.inference_mode():
        fp8ext.scaled_mm(a, b, sa, sb)


def test_the_op_called_directly_refuses_grad_too():
    a, b, sa, sb = make_inputs(16, 32, 64)
    b.requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"^fp8ext.scaled_mm: b: requires grad, but fp8ext.scaled_mm is not"):
        torch.ops.fp8ext.scaled_mm(a, b, sa, sb)


def test_the_python_functions_skip_the_guard_and_compute_the_same(monkeypatch):
    """The guard's redispatch is a second crossing between Python and C++ per call: the op called directly meets
    it, the Python functions (their eager entry: the same checks, then the op below autograd) do not."""
    redispatched = []
    real = torch._ops.OpOverload.redispatch

    def counting(self, *args, **kwargs):
        redispatched.append(str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch._ops.OpOverload, "redispatch", counting)
    a, b, sa, sb = make_inputs(16, 32, 64)
    x = torch.randn(2, 16, 64)
    w, ws = fp8ext.quantize_rowwise(torch.randn(32, 64))
    for mode in (torch.enable_grad, torch.no_grad):
        with mode():
            ours = [fp8ext.scaled_mm(a, b, sa, sb), fp8ext.linear(x, w, ws), *fp8ext.quantize_rowwise(x),
                    *fp8ext.quantize_blockwise(x[0])]
            assert redispatched == []
            direct = [torch.ops.fp8ext.scaled_mm(a, b, sa, sb), torch.ops.fp8ext.linear(x, w, ws),
                      *torch.ops.fp8ext.quantize_rowwise(x), *torch.ops.fp8ext.quantize_blockwise(x[0])]
            assert {"fp8ext.scaled_mm.default", "fp8ext.linear.default", "fp8ext.quantize_rowwise.default",
                    "fp8ext.quantize_blockwise.default"} <= set(redispatched)
            redispatched.clear()
        for mine, theirs in zip(ours, direct):
            assert not mine.requires_grad
            assert torch.equal(mine.view(torch.uint8) if mine.dtype.itemsize == 1 else mine,
                               theirs.view(torch.uint8) if theirs.dtype.itemsize == 1 else theirs)
