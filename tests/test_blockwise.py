"""Block-wise scaled fp8ext.scaled_mm (1 x 128 groups of a, 128 x 128 blocks of b) and quantize_blockwise on the
CPU: the reference path against float64, bit-exact small-integer cases, the scale layouts, opcheck and torch.compile;
the fused quantize op against the torch ops it replaces. The kernels on the GPU: tests/test_blockwise_gpu.py; the
dispatch's fit and the tools around it: tests/test_blockwise_dispatch.py."""
import math

import pytest
import torch

import fp8ext
from fp8ext.testing import assert_opcheck, check_against_reference, random_blockwise_operands, reference

from blockwise_cases import (E4M3, OPCHECK_SAMPLES, OPCHECK_UTILS, QUANT_SHAPES, activations,
                             exact_blockwise_operands, padded_weight_scales, same_quantization)


# ---- CPU: the reference path, the scale layouts, quantize_blockwise ----

@pytest.mark.parametrize("M,N,K", [(1, 128, 256), (5, 144, 208), (33, 256, 384), (64, 48, 1024), (17, 16, 128)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reference_path_matches_float64(M, N, K, out_dtype):
    a, b, sa, sb = random_blockwise_operands(M, N, K)
    bias = torch.randn(N).to(out_dtype)
    out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    assert out.shape == (M, N) and out.dtype == out_dtype
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"cpu blockwise {M}x{N}x{K}")


def test_reference_path_bit_exact_small_integers():
    a, b, sa, sb = exact_blockwise_operands(24, 272, 384)
    out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    assert torch.equal(out.double(), reference(a, b, sa, sb))


def test_block_scales_differ_per_group_and_block():
    # A scale change in one group of one row moves only that row, and in one block of b only its 128 columns.
    a, b, sa, sb = exact_blockwise_operands(4, 256, 256)
    base = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    sa2 = sa.clone()
    sa2[2, 1] *= 2
    moved = fp8ext.scaled_mm(a, b, sa2, sb, out_dtype=torch.float32) != base
    assert not moved[[0, 1, 3]].any()
    sb2 = sb.clone()
    sb2[0, 1] *= 2
    moved = fp8ext.scaled_mm(a, b, sa, sb2, out_dtype=torch.float32) != base
    assert not moved[:, :128].any()
    assert torch.equal(fp8ext.scaled_mm(a, b, sa2, sb2, out_dtype=torch.float32).double(),
                       reference(a, b, sa2, sb2))


def test_scale_a_strides_and_padded_weight_scales_are_read_as_given():
    # scale_a in torch's layout (strides (1, M)) and a contiguous (M, G) copy hold the same values: same result;
    # scale_b as s.t() of weight scales with padded rows too.
    a, b, sa, sb = random_blockwise_operands(8, 256, 512)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    assert torch.equal(fp8ext.scaled_mm(a, b, sa.contiguous(), padded_weight_scales(sb)), out)


@pytest.mark.parametrize("K,N", [(256, 256), (7168, 7168), (512, 256)])
def test_untransposed_weight_scales_are_refused(K, N):
    # A weight's [N / 128, K / 128] scales s passed as scale_b=s instead of s.t(): on a square grid (K = N) the shape
    # check passes, and every block would be scaled by its transposed neighbour's scale (99.6% of the result's max
    # off at K = N = 256). scale_b takes s.t()'s strides only, so a contiguous (G, H) is refused on any grid.
    a, b, sa, sb = random_blockwise_operands(4, N, K)
    s = sb.t().contiguous()  # the weight's scales as a checkpoint stores them: [H, G]
    wrong = s if K == N else s.t().contiguous()  # square: s itself; otherwise the contiguous (G, H) copy
    with pytest.raises(RuntimeError, match=r"scale_b: block-wise 128 x 128 scales are taken as s\.t\(\) of the "
                                           r"weight's .* pass scale_b=s\.t\(\)"):
        fp8ext.scaled_mm(a, b, sa, wrong)
    assert torch.equal(fp8ext.scaled_mm(a, b, sa, s.t()), fp8ext.scaled_mm(a, b, sa, sb))


def test_one_k_group_row_and_block_forms_agree():
    # K <= 128: scale_a (M, 1) is both the row-wise and the block-wise form, and block scales factor out.
    a, b, sa, sb = exact_blockwise_operands(8, 256, 128)
    assert sa.shape == (8, 1) and sb.shape == (1, 2)
    out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    assert torch.equal(out.double(), reference(a, b, sa, sb))
    sb = sb[:, :1].expand(1, 2).contiguous()  # one value for both blocks: then it is row-wise a x tensor-wise b
    out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    assert torch.equal(out, fp8ext.scaled_mm(a, b, sa, sb[:, :1].contiguous(), out_dtype=torch.float32))


def test_empty_m():
    a, b, sa, sb = random_blockwise_operands(0, 256, 256)
    assert fp8ext.scaled_mm(a, b, sa, sb).shape == (0, 256)


@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck_cpu(sample):
    make, kwargs = OPCHECK_SAMPLES[sample]
    assert_opcheck(torch.ops.fp8ext.scaled_mm.default, make(), kwargs, test_utils=OPCHECK_UTILS)


def test_compile_fullgraph_quantize_and_matmul_cpu():
    x = torch.randn(16, 384)
    w = torch.randn(256, 384)

    def f(x, w):
        xq, sx = fp8ext.quantize_blockwise(x)
        wq, sw = fp8ext.quantize_blockwise(w, block=(128, 128))
        return fp8ext.scaled_mm(xq, wq.t(), sx, sw.t())

    eager = f(x, w)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(x, w)
    assert torch.equal(eager, compiled)


@pytest.mark.parametrize("rows,cols", [(1, 128), (7, 200), (64, 1024), (130, 384)])
def test_quantize_blockwiseactivations(rows, cols):
    x = torch.randn(rows, cols) * torch.exp2(torch.randint(-8, 8, (rows, 1)).float())
    q, s = fp8ext.quantize_blockwise(x)
    G = math.ceil(cols / 128)
    assert q.dtype == E4M3 and q.shape == x.shape and q.is_contiguous()
    assert s.dtype == torch.float32 and s.shape == (rows, G) and s.stride() == (1, rows)
    for g in range(G):
        blk = x[:, g * 128:(g + 1) * 128]
        amax = blk.abs().amax(dim=1).clamp(min=1e-12)
        assert torch.equal(s[:, g], amax / 448.0)
        expect = (blk * (torch.full_like(amax, 448.0) / amax)[:, None]).clamp(-448, 448).to(E4M3)
        assert torch.equal(q[:, g * 128:(g + 1) * 128].view(torch.uint8), expect.view(torch.uint8))
    # Dequantized, each value is within e4m3's half-ulp (2^-4 relative) of its block's amax scale.
    deq = q.float() * s.repeat_interleave(128, dim=1)[:, :cols]
    assert ((deq - x).abs() <= 2.0**-4 * x.abs() + s.repeat_interleave(128, dim=1)[:, :cols] * 2.0**-9).all()


@pytest.mark.parametrize("rows,cols", [(128, 128), (256, 384), (200, 208)])
def test_quantize_blockwise_weights(rows, cols):
    w = torch.randn(rows, cols)
    w[:128, :128] = 0  # an all-zero block gets the eps scale and zeros
    q, s = fp8ext.quantize_blockwise(w, block=(128, 128))
    assert q.shape == w.shape and s.shape == (math.ceil(rows / 128), math.ceil(cols / 128)) and s.is_contiguous()
    assert s[0, 0] == torch.tensor(1e-12) / 448.0 and not q[:128, :128].float().any()
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            assert s[i, j] == blk.abs().amax().clamp(min=1e-12) / 448.0


def test_quantize_blockwise_rejects():
    with pytest.raises(ValueError, match=r"block must be \(1, 128\) \(activations\) or \(128, 128\)"):
        fp8ext.quantize_blockwise(torch.randn(4, 128), block=(1, 64))
    with pytest.raises(ValueError, match="expected a 2-D tensor"):
        fp8ext.quantize_blockwise(torch.randn(2, 4, 128))
    with pytest.raises(ValueError, match="expected a bfloat16, float16 or float32 tensor"):
        fp8ext.quantize_blockwise(torch.randn(4, 128).double())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8", [E4M3, torch.float8_e5m2])
@pytest.mark.parametrize("M,K", QUANT_SHAPES)
def test_fused_quantize_blockwise_equals_the_composed_ops(M, K, dtype, fp8):
    # The fused op (K a multiple of 16, the last dimension contiguous) and the torch ops compute the same bits,
    # NaN, inf and all-zero groups and a partial last group included.
    from fp8ext.quantize import _quantize_blocks_composed

    x = activations(M, K, dtype)
    same_quantization(torch.ops.fp8ext.quantize_blockwise(x, fp8), _quantize_blocks_composed(x, (1, 128), fp8))
    same_quantization(fp8ext.quantize_blockwise(x, dtype=fp8), _quantize_blocks_composed(x, (1, 128), fp8))


def test_quantize_blockwise_takes_rows_apart_and_leaves_the_rest_to_torch_ops():
    from fp8ext.quantize import _quantize_blocks_composed

    wide = activations(6, 1030, torch.bfloat16)
    for x in (wide[:, :512], wide[:, 2:514]):  # rows apart (the fused op), and a start off 16 bytes
        same_quantization(torch.ops.fp8ext.quantize_blockwise(x), _quantize_blocks_composed(x, (1, 128), E4M3))
    # What the op refuses goes through torch ops, with the same formula: K not a multiple of 16, a strided last
    # dimension.
    for x in (activations(4, 100, torch.float32), wide[:, :1024:2]):
        same_quantization(fp8ext.quantize_blockwise(x), _quantize_blocks_composed(x, (1, 128), E4M3))


@pytest.mark.parametrize("x, message", [
    (torch.randn(4, 100), r"x: K = 100 \(the last dimension\) must be a positive multiple of 16"),
    (torch.randn(2, 3, 128), r"x: expected a 2-D \[M, K\] tensor, got a 3-D tensor of shape \[2, 3, 128\]"),
    (torch.randn(4, 256).double(), "x: expected dtype torch.bfloat16, torch.float16 or torch.float32"),
    (torch.randn(256, 4).t(), r"x: the last dimension must be contiguous \(stride 1\)"),
])
def test_quantize_blockwise_op_rejects(x, message):
    with pytest.raises(RuntimeError, match="fp8ext.quantize_blockwise: " + message):
        torch.ops.fp8ext.quantize_blockwise(x)
    with pytest.raises(RuntimeError, match="fp8ext.quantize_blockwise: dtype: expected torch.float8_e4m3fn"):
        torch.ops.fp8ext.quantize_blockwise(torch.randn(4, 128), torch.bfloat16)


def test_quantize_blockwise_op_is_a_proper_op_cpu():
    for args in ((torch.randn(5, 384).bfloat16(),), (torch.randn(3, 400), torch.float8_e5m2)):
        torch.library.opcheck(torch.ops.fp8ext.quantize_blockwise.default, args)
    x = torch.randn(9, 640).bfloat16()
    compiled = torch.compile(lambda t: fp8ext.quantize_blockwise(t), fullgraph=True)
    same_quantization(compiled(x), fp8ext.quantize_blockwise(x))
    with pytest.raises(RuntimeError, match="x: requires grad, but fp8ext.quantize_blockwise is not differentiable"):
        fp8ext.quantize_blockwise(torch.randn(4, 256, requires_grad=True))


def test_quantized_model_layer_end_to_end_cpu():
    # The whole recipe: a bf16 layer quantized block-wise is close to its bf16 result.
    x = torch.randn(32, 512).bfloat16()
    w = (torch.randn(384, 512) / 20).bfloat16()
    xq, sx = fp8ext.quantize_blockwise(x)
    wq, sw = fp8ext.quantize_blockwise(w, block=(128, 128))
    out = fp8ext.scaled_mm(xq, wq.t(), sx, sw.t())
    ref = x.float() @ w.float().t()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 0.05
