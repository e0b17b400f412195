"""Block-wise scaled fp8ext.scaled_mm (1 x 128 groups of a, 128 x 128 blocks of b) and quantize_blockwise: the
CPU reference path against float64, bit-exact small-integer cases, opcheck and torch.compile on CPU; on the GPU
every block-scaled kernel by name, the default dispatch, CUDA graphs and torch._scaled_mm on the same tensors. The
fused quantize op against the torch ops it replaces, on CPU and (its kernel) on the GPU."""
import math
import re
import warnings

import pytest
import torch

import fp8ext
from fp8ext.testing import (assert_opcheck, blockwise_kernel_out_dtype, check_against_reference,
                            random_blockwise_operands, reference)

E4M3 = torch.float8_e4m3fn
OPCHECK_UTILS = ("test_faketensor", "test_aot_dispatch_dynamic")


def exact_blockwise_operands(M, N, K, device="cpu"):
    """Small integers (|v| <= 4, exact in e4m3) and power-of-two scales: every product and partial sum is exact
    in fp32, so an fp32 result must equal the float64 reference bit for bit."""
    G, H = -(-K // 128), -(-N // 128)
    a = torch.randint(-4, 5, (M, K), device=device).float().to(E4M3)
    b = torch.randint(-4, 5, (N, K), device=device).float().to(E4M3).t()
    sa = torch.exp2(torch.randint(-3, 3, (G, M), device=device).float()).t()
    sb = torch.exp2(torch.randint(-3, 3, (H, G), device=device).float()).t()
    return a, b, sa, sb


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


def _padded_weight_scales(sb):
    """scale_b as s.t() of weight scales s [H, G] stored with padded rows (strides (1, G + 3)): not torch's exact
    layout, which fp8ext reads through its strides."""
    G, H = sb.shape
    wide = torch.zeros(H, G + 3, device=sb.device)
    wide[:, :G] = sb.t()
    return wide[:, :G].t()


def test_scale_a_strides_and_padded_weight_scales_are_read_as_given():
    # scale_a in torch's layout (strides (1, M)) and a contiguous (M, G) copy hold the same values: same result;
    # scale_b as s.t() of weight scales with padded rows too.
    a, b, sa, sb = random_blockwise_operands(8, 256, 512)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    assert torch.equal(fp8ext.scaled_mm(a, b, sa.contiguous(), _padded_weight_scales(sb)), out)


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


OPCHECK_SAMPLES = {
    "bf16": (lambda: random_blockwise_operands(16, 256, 384), {}),
    "bias_fp16": (lambda: random_blockwise_operands(8, 144, 256),
                  {"bias": torch.randn(144).half(), "out_dtype": torch.float16}),
    "m1_fp32": (lambda: random_blockwise_operands(1, 128, 208), {"out_dtype": torch.float32}),
}


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
def test_quantize_blockwise_activations(rows, cols):
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


def _activations(M, K, dtype, device="cpu"):
    """Fresh activations whose groups span many binades, with a NaN, an all-zero group and an infinity planted where
    the shape has room (each is its own group's case)."""
    x = torch.randn(M, K, device=device) * torch.exp2(torch.randint(-10, 10, (M, 1), device=device).float())
    if M >= 3 and K >= 256:
        x[0, 3] = float("nan")
        x[1, 128:256] = 0.0
        x[2, 200] = float("inf")
    return x.to(dtype)


def _same_quantization(got, want):
    """q equal byte for byte but for NaN's sign bit (a NaN's sign is the platform's: the GPU's arithmetic returns
    +NaN, the CPU's keeps an operand's), the scales equal with NaN in the same places, and torch's (M, G) layout,
    strides (1, M)."""
    (q, s), (q2, s2) = got, want
    assert q.dtype == q2.dtype and q.shape == q2.shape and q.is_contiguous()
    nan, nan2 = q.float().isnan().cpu(), q2.float().isnan().cpu()
    assert torch.equal(nan, nan2)
    assert torch.equal(q.view(torch.uint8).cpu()[~nan], q2.view(torch.uint8).cpu()[~nan2])
    assert s.shape == s2.shape and torch.equal(s.isnan().cpu(), s2.isnan().cpu())
    assert torch.equal(s.nan_to_num(0.0).cpu(), s2.nan_to_num(0.0).cpu())
    M, G = s.shape
    assert M <= 1 or (s.stride(0) == 1 and (G == 1 or s.stride(1) == M))


QUANT_SHAPES = [(1, 128), (3, 4096), (5, 4112), (7, 208), (33, 7168), (0, 256)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8", [E4M3, torch.float8_e5m2])
@pytest.mark.parametrize("M,K", QUANT_SHAPES)
def test_fused_quantize_blockwise_equals_the_composed_ops(M, K, dtype, fp8):
    # The fused op (K a multiple of 16, the last dimension contiguous) and the torch ops compute the same bits,
    # NaN, inf and all-zero groups and a partial last group included.
    from fp8ext.quantize import _quantize_blocks_composed

    x = _activations(M, K, dtype)
    _same_quantization(torch.ops.fp8ext.quantize_blockwise(x, fp8), _quantize_blocks_composed(x, (1, 128), fp8))
    _same_quantization(fp8ext.quantize_blockwise(x, dtype=fp8), _quantize_blocks_composed(x, (1, 128), fp8))


def test_quantize_blockwise_takes_rows_apart_and_leaves_the_rest_to_torch_ops():
    from fp8ext.quantize import _quantize_blocks_composed

    wide = _activations(6, 1030, torch.bfloat16)
    for x in (wide[:, :512], wide[:, 2:514]):  # rows apart (the fused op), and a start off 16 bytes
        _same_quantization(torch.ops.fp8ext.quantize_blockwise(x), _quantize_blocks_composed(x, (1, 128), E4M3))
    # What the op refuses goes through torch ops, with the same formula: K not a multiple of 16, a strided last
    # dimension.
    for x in (_activations(4, 100, torch.float32), wide[:, :1024:2]):
        _same_quantization(fp8ext.quantize_blockwise(x), _quantize_blocks_composed(x, (1, 128), E4M3))


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
    _same_quantization(compiled(x), fp8ext.quantize_blockwise(x))
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


def _script(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_blockwise_check_tells_right_wrong_and_refused(monkeypatch):
    """tools/check_torch_blockwise.py, the check to rerun before the backstop is turned on for another torch:
    on CPU, with fp8ext's reference path standing in for torch (right), a scaled copy of it (wrong) and torch's
    own CPU refusal."""
    check = _script("check_torch_blockwise")
    monkeypatch.setattr("fp8ext.testing.random_blockwise_operands",
                        lambda M, N, K, device: random_blockwise_operands(M, N, K))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(check, "M", 8)
    monkeypatch.setattr(check, "N", 128)

    def refuse(*args, **kwargs):
        raise ValueError("Invalid scaling configuration.\n- details")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    assert check.check_k(640)["torch"] == "refused: Invalid scaling configuration."
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, sa, sb, out_dtype: fp8ext.scaled_mm(a, b, sa, sb))
    row = check.check_k(640)
    assert row["torch"] == "right" and row["k_groups"] == 5 and not row["k_groups_multiple_of_4"]
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, sa, sb, out_dtype: 1.5 * fp8ext.scaled_mm(a, b, sa, sb))
    row = check.check_k(512)
    assert row["torch"].startswith("wrong: ") and row["rel_err"] > 0.4 and row["k_groups_multiple_of_4"]


def test_dispatch_fit_recovers_a_linear_time_model_and_scores_the_dispatch_own_picks():
    # tools/fit_blockwise_dispatch.py fits t = a + b W per kernel and scores fits by the dispatch's own
    # selection (no GPU needed).
    if not fp8ext.blockwise_kernel_names():
        pytest.skip("a CPU-only build has no block-scaled kernels to pick from")
    fit = _script("fit_blockwise_dispatch")
    tiles = [k for k in fp8ext.blockwise_kernel_names() if k.endswith("_bf16") and "_gemv_" not in k]
    truth = {k: (3.0 + i, (1.0 + 0.5 * i) * 1e-7) for i, k in enumerate(tiles)}
    rows = []
    for M, N, K in ((64, 7168, 2048), (512, 4096, 7168), (4096, 7168, 16384), (128, 36864, 7168)):
        times = {k: a + b * fit.work(k, {"M": M, "N": N, "K": K}, 132) for k, (a, b) in truth.items()}
        rows.append({"M": M, "N": N, "K": K, "split": "tune", "kernels_us": times})
    fits = fit.fit(rows, 132)
    for k, (a, b) in truth.items():
        assert fits[k][0] == pytest.approx(a, rel=1e-6) and fits[k][1] == pytest.approx(b, rel=1e-6)
        # An exact line leaves no residual.
        assert all(abs(r[3]) < 1e-9 for r in fits[k][2]) and len(fits[k][2]) == len(rows)
    # With the true model the dispatch picks the fastest kernel on every row.
    assert fit.score(rows, fit.trial_fits(fits, 132), 132) == (1.0, 1.0)
    # A pick that was not timed (it failed) disqualifies the fits.
    flat, residuals, *_ = fit.trial_fits(fits, 132)
    pick = torch.ops.fp8ext._selected_blockwise_kernel(64, 7168, 2048, torch.bfloat16, 132, False, flat, residuals)
    untimed = {**rows[0], "kernels_us": {k: t for k, t in rows[0]["kernels_us"].items() if k != pick}}
    assert fit.score([untimed], (flat, residuals, False, -1.0, -1), 132) == (math.inf, math.inf)
    # A kernel without a fit (NaN) is taken only where no fitted kernel computes the call.
    unfitted = list(flat)
    at = 2 * fp8ext.blockwise_kernel_names().index(pick)
    unfitted[at] = unfitted[at + 1] = math.nan
    assert torch.ops.fp8ext._selected_blockwise_kernel(64, 7168, 2048, torch.bfloat16, 132, False, unfitted) != pick
    alone = [math.nan] * len(flat)
    alone[at], alone[at + 1] = flat[at], flat[at + 1]
    assert torch.ops.fp8ext._selected_blockwise_kernel(64, 7168, 2048, torch.bfloat16, 132, False, alone) == pick
    held = {"split": "heldout", "M": 512, "N": 1, "K": 16, "kernels_us": {"x": 1.0}}
    small = {"split": "tune", "M": 16, "N": 1, "K": 16, "kernels_us": {"x": 1.0}}
    assert fit.tuning_rows({"rows": rows + [held, small]}) == rows + [small]
    # A decode kernel's W is its row-wise twin's predicted microseconds, so decode and tile kernels compete in
    # microseconds; above its largest M it is never picked.
    decode = [k for k in fp8ext.blockwise_kernel_names() if k.endswith("_bf16") and "_gemv_" in k]
    for k in decode:
        assert fit.work(k, {"M": 1, "N": 4096, "K": 7168}, 132) > 0
    flat, *_ = fit.trial_fits({k: (0.0, 1e-9, []) for k in decode}, 132)
    assert torch.ops.fp8ext._selected_blockwise_kernel(1, 4096, 7168, torch.bfloat16, 132, False, flat) in decode
    assert torch.ops.fp8ext._selected_blockwise_kernel(33, 4096, 7168, torch.bfloat16, 132, False, flat) not in decode


def test_dispatch_residuals_correct_the_line_near_their_rows_only():
    # blockwise_dispatch.h: t = (a + b W) * exp(c), c the Gaussian-weighted mean of a kernel's residuals in octaves
    # of M, N and K, shrunk by kResidualPrior (0.05) towards 0.
    if not fp8ext.blockwise_kernel_names():
        pytest.skip("a CPU-only build has no block-scaled kernels to pick from")
    fit = _script("fit_blockwise_dispatch")
    tiles = [k for k in fp8ext.blockwise_kernel_names() if k.endswith("_bf16") and "_gemv_" not in k]
    first, second = tiles[0], tiles[1]
    shape = {"M": 4096, "N": 7168, "K": 7168}
    w1, w2 = fit.work(first, shape, 132), fit.work(second, shape, 132)
    # Lines on which `first` is predicted 10% faster than `second` on this shape; every other kernel far slower.
    lines = {k: (1e6, 0.0, []) for k in tiles}
    lines[first] = (1.0, 1.0 / w1 * 99.0, [])
    lines[second] = (1.0, 1.0 / w2 * 109.0, [])
    flat, *_ = fit.trial_fits(lines, 132)
    names = fp8ext.blockwise_kernel_names()
    def select(*args):  # the kernels alone: the backstop has its own test
        return torch.ops.fp8ext._selected_blockwise_kernel(*args, torch_ok=False)

    assert select(4096, 7168, 7168, torch.bfloat16, 132, False, flat) == first
    # `first` measured 30% slower than its line on this very shape: weight 1, so c = ln(1.3) / 1.05 and the
    # prediction 100 * 1.3^(1 / 1.05) = 128 us, above `second`'s 110: the correction flips the pick.
    at_shape = [float(names.index(first)), math.log2(4096), math.log2(7168), math.log2(7168), math.log(1.3)]
    assert select(4096, 7168, 7168, torch.bfloat16, 132, False, flat, at_shape) == second
    # The same residual four octaves away in N: weight exp(-8) = 3e-4, c = ln(1.3) * 3e-4 / 0.0503, a 0.2% change.
    far = [float(names.index(first)), math.log2(4096), math.log2(7168) + 4, math.log2(7168), math.log(1.3)]
    assert select(4096, 7168, 7168, torch.bfloat16, 132, False, flat, far) == first
    # Residuals come in fives and with trial fits.
    with pytest.raises(RuntimeError, match="residuals come in fives"):
        select(4096, 7168, 7168, torch.bfloat16, 132, False, flat, at_shape[:4])
    with pytest.raises(RuntimeError, match="residuals come in fives"):
        select(4096, 7168, 7168, torch.bfloat16, 132, False, [], at_shape)


def test_dispatch_backstop_takes_calls_torch_is_predicted_faster_on():
    # blockwise_dispatch.h: torch._scaled_mm block-wise runs where the best kernel is not predicted at least the
    # margin faster, only above the backstop's lower M bound, for M a multiple of 4, bf16 output, and only where
    # the caller says torch can take the call.
    if not fp8ext.blockwise_kernel_names():
        pytest.skip("a CPU-only build has no block-scaled kernels to pick from")
    names = fp8ext.blockwise_kernel_names()
    flat_kernels = [100.0, 0.0] * len(names)  # every kernel 100 us

    def select(M, torch_us, margin, above_m=64, torch_ok=True, out_dtype=torch.bfloat16, K=4096):
        return torch.ops.fp8ext._selected_blockwise_kernel(M, 4096, K, out_dtype, 132, False,
                                                           flat_kernels + [torch_us, 0.0], [], torch_ok, margin,
                                                           above_m)

    TORCH = "torch._scaled_mm"
    assert select(512, 90.0, 0.04) == TORCH
    assert select(512, 103.0, 0.04) == TORCH  # the kernel is not 4% faster
    assert select(512, 105.0, 0.04) != TORCH  # it is (100 < 105 * 0.96)
    assert select(512, 103.0, 0.0) != TORCH
    # Not where torch's predicted time is under 40 us (kBlockwiseBackstopMinUs): the route's host time shows.
    assert select(512, 30.0, 0.04) != TORCH
    assert select(512, 90.0, 0.04, torch_ok=False) != TORCH
    assert select(514, 90.0, 0.04) != TORCH  # cuBLASLt takes M a multiple of 4 only
    # torch 2.11 returns wrong results where K / 128 is not a multiple of 4 (blockwise_dispatch.h)
    assert select(512, 90.0, 0.04, K=4224) != TORCH and select(512, 90.0, 0.04, K=4608) == TORCH
    assert select(64, 90.0, 0.04) != TORCH and select(68, 90.0, 0.04) == TORCH  # above M = 64 only
    assert select(512, 90.0, 0.04, out_dtype=torch.float16) != TORCH
    backends = fp8ext.backends()
    try:
        fp8ext.set_backends("fp8ext")
        assert select(512, 90.0, 0.04) != TORCH
    finally:
        fp8ext.set_backends(backends)
    # Without a fit torch is never preferred.
    assert select(512, math.nan, 0.04) != TORCH
    # The compiled-in dispatch: never torch at M <= 128, where torch_ok is false, or on a shape torch gets wrong.
    for M in (1, 4, 16, 64, 128, 130, 1000, 4096, 16384):
        for N, K in ((7168, 7168), (36864, 7168), (2048, 768), (7168, 2880)):
            pick = torch.ops.fp8ext._selected_blockwise_kernel(M, N, K, torch.bfloat16, 132, False, torch_ok=False)
            assert pick in names
            if M <= 128 or M % 4 or (-(-K // 128)) % 4:
                assert torch.ops.fp8ext._selected_blockwise_kernel(M, N, K, torch.bfloat16, 132, False) in names


def test_fit_script_reads_custom_rows_and_the_compiled_backstop():
    # --custom: the rows of a --shapes run (split "custom") become tuning rows; --judge compares with the
    # backstop's bounds as blockwise_dispatch.h sets them.
    fit = _script("fit_blockwise_dispatch")
    custom = {"split": "custom", "M": 8, "N": 5120, "K": 25600, "kernels_us": {"x": 50.0}}
    tune = {"split": "tune", "M": 16, "N": 7168, "K": 2048, "kernels_us": {"x": 10.0}}
    untimed = {"split": "custom", "M": 4, "N": 5120, "K": 25600, "kernels_us": {}}
    assert fit.tuning_rows({"rows": [custom, tune, untimed]}, ("custom",)) == [custom]
    assert fit.tuning_rows({"rows": [custom, tune]}) == [tune]
    with pytest.raises(SystemExit, match="no custom rows"):
        fit.tuning_rows({"rows": [tune]}, ("custom",))
    above_m, margin = fit.compiled_backstop()
    assert isinstance(above_m, int) and above_m >= 0 and 0.0 <= margin < 1.0


def test_fresh_shape_sets_are_reproducible_and_read_nothing_read_before():
    # tools/draw_fresh_shapes.py: a set of fresh shapes judges one fit; it must not repeat a weight read before,
    # and it must redraw the M that the suite timed, which fp8ext.zoo records.
    from fp8ext import zoo

    draw = _script("draw_fresh_shapes")
    assert zoo.FRESH_SETS
    for name, weights in zoo.FRESH_SETS.items():
        shapes = draw.shapes(name)
        assert shapes == zoo.fresh_shapes(name) and len(shapes) == 4 * len(weights)
        for i, (m, n, k) in enumerate(shapes):
            lo, hi, four = draw.M_RANGES[i % 4]
            assert lo <= m <= hi and (m % 4 == 0 or not four) and (n, k) == weights[i // 4][2:4]
        assert not {(n, k) for _, _, n, k, _ in weights} & (draw.read_before(name) - draw.SHARED.get(name, set()))
        # The tuning grid is tuning material only: no set judges on its weights.
        assert not {(n, k) for _, _, n, k, _ in weights} & set(zoo.TUNE_GRID_NK)


def test_fit_script_fits_torch_as_the_backstop():
    if not fp8ext.blockwise_kernel_names():
        pytest.skip("a CPU-only build has no block-scaled kernels to pick from")
    fit = _script("fit_blockwise_dispatch")
    tiles = [k for k in fp8ext.blockwise_kernel_names() if k.endswith("_bf16") and "_gemv_" not in k]
    rows = []
    for M, N, K in ((256, 7168, 2048), (512, 4096, 7168), (4096, 7168, 16384), (1024, 36864, 7168)):
        shape = {"M": M, "N": N, "K": K}
        times = {k: 50.0 + 2e-7 * fit.work(k, shape, 132) for k in tiles}
        rows.append({**shape, "split": "tune", "kernels_us": times,
                     "torch_blockwise_us": 45.0 + 1e-7 * fit.work(fit.TORCH, shape, 132)})
    fits = fit.fit(rows, 132)
    assert fits[fit.TORCH][0] == pytest.approx(45.0, rel=1e-6) and fits[fit.TORCH][1] == pytest.approx(1e-7, rel=1e-6)
    # torch's true line is the fastest on every row here (and over 40 us): with the backstop the picks are torch's,
    # and perfect.
    trial = fit.trial_fits(fits, 132, torch_ok=True, margin=0.02, above_m=64)
    assert all(fit.pick(r, trial, 132) == fit.TORCH for r in rows)
    assert fit.score(rows, trial, 132) == (1.0, 1.0)
    assert fit.against_torch(rows, trial, 132) == [0.0] * len(rows)
    # Records merge torch's times as the kernels' (geometric mean; a failure left out).
    failed = [{**r, "torch_blockwise_us": "failed: CUBLAS_STATUS_NOT_SUPPORTED"} for r in rows]
    merged = fit.merge_rows([rows, failed])
    assert [m["torch_blockwise_us"] for m in merged] == pytest.approx([r["torch_blockwise_us"] for r in rows])


# ---- GPU ----

DEV = "cuda"
GPU_SHAPES = [(1, 256, 256), (3, 576, 7168), (16, 7168, 2048), (17, 384, 512), (64, 4096, 7232),
              (127, 1536, 7168), (200, 256, 384), (1000, 7168, 2048)]


def _kernels():
    try:
        return fp8ext.blockwise_kernel_names()
    except Exception:  # noqa: BLE001 - a CPU-only build has none; the GPU tests are skipped there anyway
        return []


@pytest.mark.gpu
def test_build_has_blockwise_kernels_for_every_out_dtype():
    names = fp8ext.blockwise_kernel_names()
    assert names, "a CUDA build without block-scaled kernels"
    assert {blockwise_kernel_out_dtype(n) for n in names} == {torch.bfloat16, torch.float16, torch.float32}


@pytest.mark.gpu
@pytest.mark.parametrize("name", _kernels() or ["<none built>"])
@pytest.mark.parametrize("M,N,K", GPU_SHAPES)
def test_every_kernel_against_float64(name, M, N, K):
    if ("_gemv_m4_" in name and M > 4) or ("_gemv_tc_" in name and M > 32):
        pytest.skip("a decode kernel computes M <= 4 (gemv_m4) or M <= 32 (gemv_tc)")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out_dtype = blockwise_kernel_out_dtype(name)
    bias = torch.randn(N, device=DEV).to(out_dtype) if M % 2 else None
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)
    check_against_reference(out, a, b, sa, sb, bias, use_fast_accum=False, what=f"{name} {M}x{N}x{K}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", _kernels() or ["<none built>"])
def test_every_kernel_bit_exact_small_integers(name):
    if blockwise_kernel_out_dtype(name) != torch.float32 and "_gemv_tc_" not in name:
        pytest.skip("bit-exactness is checked on fp32 output (the bf16-only gemv_tc: on bf16 output)")
    a, b, sa, sb = exact_blockwise_operands(4 if "_gemv_m4_" in name else 24 if "_gemv_tc_" in name else 40, 272,
                                            384, device=DEV)
    out_dtype = blockwise_kernel_out_dtype(name)
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, out_dtype=out_dtype)
    # The exact sum is an fp32 value here, so rounding it once to the output type is the only rounding allowed.
    assert torch.equal(out, reference(a, b, sa, sb).to(out_dtype))


def _overlap_twin(name):
    """The CUTLASS-mainloop kernel an `_ov_` kernel must match bit for bit: the same name without `_ov` (and without
    a swizzle `_swN`), else the same tile and schedule in a 1x1 cluster (a cluster or a swizzle changes which SM
    computes a tile, not the arithmetic)."""
    names = _kernels()
    twin = re.sub(r"_sw\d+_", "_", name.replace("_ov_", "_"))
    if twin not in names:
        twin = re.sub(r"_c\dx\d_", "_c1x1_", twin)
    return twin if twin in names else None


@pytest.mark.gpu
@pytest.mark.parametrize("name", [k for k in _kernels() if "_ov_" in k] or ["<none built>"])
@pytest.mark.parametrize("M,N,K", [(17, 384, 112), (40, 272, 384), (300, 640, 1008), (1000, 1152, 7168)])
def test_overlapped_mainloop_is_bit_identical_to_cutlass(name, M, N, K):
    # overlap_blockwise_mainloop.cuh reorders when the scaling runs, not what it computes: on random operands
    # (1, 3, 8 and 56 K tiles, so every path of its two-tile loop; K and M residues) it must equal CUTLASS's.
    twin = _overlap_twin(name)
    if twin is None:
        pytest.skip(f"no CUTLASS-mainloop twin of {name} in this build")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    bias = torch.randn(N, device=DEV).to(torch.bfloat16)
    with fp8ext.force_kernel(name):
        out = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    with fp8ext.force_kernel(twin):
        ref = fp8ext.scaled_mm(a, b, sa, sb, bias=bias)
    assert torch.equal(out, ref), f"{name} differs from {twin}"


@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 7, 16, 31, 64, 100, 128, 384, 2048, 4100])
def test_default_dispatch_against_float64(M):
    a, b, sa, sb = random_blockwise_operands(M, 2048, 1536, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what=f"dispatch M={M}")
    assert fp8ext.selected_blockwise_kernel(M, 2048, 1536) in fp8ext.blockwise_kernel_names() + ["torch._scaled_mm"]


@pytest.mark.gpu
def test_gemv_is_forced_only_where_it_computes():
    a, b, sa, sb = random_blockwise_operands(5, 256, 256, device=DEV)
    with fp8ext.force_kernel("bw_gemv_m4_bf16"), pytest.raises(RuntimeError, match="computes M <= 4, not M = 5"):
        fp8ext.scaled_mm(a, b, sa, sb)
    # The dispatch picks a decode kernel only where it computes (the CUDA-core gemv up to M = 4, the tensor-core
    # one up to 32), and at M = 1 on a large weight, where it is far faster than any tile kernel.
    assert fp8ext.selected_blockwise_kernel(5, 256, 256) != "bw_gemv_m4_bf16"
    assert "_gemv_" not in fp8ext.selected_blockwise_kernel(33, 4096, 7168)
    assert "_gemv_" in fp8ext.selected_blockwise_kernel(1, 4096, 7168)


@pytest.mark.gpu
def test_contiguous_and_torch_scale_layouts_agree():
    a, b, sa, sb = random_blockwise_operands(33, 1024, 1024, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    assert torch.equal(fp8ext.scaled_mm(a, b, sa.contiguous(), _padded_weight_scales(sb)), out)


@pytest.mark.gpu
@pytest.mark.parametrize("M", [4, 256])
def test_cuda_graph_replay(M):
    a, b, sa, sb = random_blockwise_operands(M, 1024, 2048, device=DEV)
    fp8ext.scaled_mm(a, b, sa, sb)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb)
    for _ in range(2):
        a2, b2, sa2, sb2 = random_blockwise_operands(M, 1024, 2048, device=DEV)
        for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="graph replay")


@pytest.mark.gpu
@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck_cuda(sample):
    make, kwargs = OPCHECK_SAMPLES[sample]
    args = [t.to(DEV) for t in make()]
    kwargs = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    assert_opcheck(torch.ops.fp8ext.scaled_mm.default, args, kwargs, test_utils=OPCHECK_UTILS)


@pytest.mark.gpu
def test_compile_fullgraph_cuda():
    x = torch.randn(64, 2048, device=DEV, dtype=torch.bfloat16)
    wq, sw = fp8ext.quantize_blockwise(torch.randn(1024, 2048, device=DEV), block=(128, 128))

    def f(x):
        xq, sx = fp8ext.quantize_blockwise(x)
        return fp8ext.scaled_mm(xq, wq.t(), sx, sw.t())

    eager, compiled = f(x), torch.compile(f, fullgraph=True)(x)
    # Inductor fuses the quantize's ops into its own kernels; an FP8 rounding may land the other way now and then.
    assert ((compiled.float() - eager.float()).norm() / eager.float().norm()).item() < 2.0**-6


@pytest.mark.gpu
def test_matches_torch_scaled_mm_blockwise():
    # Same tensors, torch's layouts. Where this torch's _scaled_mm has no block-wise path, the test says so.
    a, b, sa, sb = random_blockwise_operands(256, 1024, 2048, device=DEV)
    try:
        ref = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm takes no block-wise scales here: {str(e).splitlines()[0]}")
    out = fp8ext.scaled_mm(a, b, sa, sb)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="fp8ext next to torch blockwise")
    # Both round the same sums to bf16: they agree to about bf16's precision, with the layouts read alike.
    assert ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 2.0**-7


def _torch_blockwise_or_skip():
    if not torch.__version__.startswith("2.11."):
        pytest.skip("the block-wise backstop is on with torch 2.11 only, the release it was measured with")
    a, b, sa, sb = random_blockwise_operands(128, 256, 256, device=DEV)
    try:
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm takes no block-wise scales here: {str(e).splitlines()[0]}")


# Large problems, where cuBLASLt's block-wise kernels beat fp8ext's on every tuning row: the dispatch must hand at
# least one of them to torch.
BACKSTOP_SHAPES = [(4096, 7168, 7168), (16384, 7168, 2048), (4096, 36864, 7168), (1024, 24576, 1536)]


def _backstop_shape():
    shape = next((s for s in BACKSTOP_SHAPES if fp8ext.selected_blockwise_kernel(*s) == "torch._scaled_mm"), None)
    assert shape is not None, "the block-wise dispatch hands none of the large problems to torch"
    return shape


@pytest.mark.gpu
def test_backstop_runs_torch_on_the_same_tensors():
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    # The very call torch makes, on the same tensors (torch takes no fast accumulation with block-wise scales).
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="block-wise backstop")
    # What torch cannot take as given runs on a kernel, within the same bound: a bias, scales not in torch's
    # layouts, an M that is not a multiple of 4. Had any of them reached torch, torch would have refused it and
    # the backstop would be off now (test_backstop_refused_by_torch_falls_back_to_the_kernels).
    bias = torch.randn(N, device=DEV).to(torch.bfloat16)
    assert fp8ext.selected_blockwise_kernel(M, N, K, torch_ok=False) in fp8ext.blockwise_kernel_names()
    cases = {"bias": ((a, b, sa, sb), bias),
             "scales in other layouts": ((a, b, sa.contiguous(), _padded_weight_scales(sb)), None),
             "M - 2": ((a[:-2], b, sa[:-2], sb), None)}
    some = torch.randperm(M - 2, device=DEV)[:64]
    for what, ((a_, b_, sa_, sb_), bias_) in cases.items():
        got = fp8ext.scaled_mm(a_, b_, sa_, sb_, bias=bias_)
        check_against_reference(got[some], a_[some], b_, sa_[some], sb_, bias_, use_fast_accum=False,
                                what=f"block-wise, {what}")
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"
    # And nothing goes to torch with the backstop off.
    backends = fp8ext.backends()
    try:
        fp8ext.set_backends("fp8ext")
        assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
        own = fp8ext.scaled_mm(a, b, sa, sb)
        check_against_reference(own[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="backstop off")
    finally:
        fp8ext.set_backends(backends)


@pytest.mark.gpu
def test_backstop_in_cuda_graph():
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    assert fp8ext.selected_blockwise_kernel(M, N, K, capturing=True) == "torch._scaled_mm"
    fp8ext.scaled_mm(a, b, sa, sb)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8ext.scaled_mm(a, b, sa, sb)
    a2, b2, sa2, sb2 = random_blockwise_operands(M, N, K, device=DEV)
    for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))


@pytest.fixture
def plant():
    yield torch.ops.fp8ext._testing_fault
    torch.ops.fp8ext._testing_fault("")  # also turns the backstop back on after a refusal


@pytest.mark.gpu
@pytest.mark.parametrize("K", [7104, 4032])
def test_backstop_with_a_partial_last_k_group(K):
    # K % 128 = 64 and 64 with K / 128 rounded up a multiple of 4 (56, 32): torch computes these right (measured on
    # the H200), and the backstop may take them.
    _torch_blockwise_or_skip()
    M, N = 4096, 7168
    if fp8ext.selected_blockwise_kernel(M, N, K) != "torch._scaled_mm":
        pytest.skip(f"the dispatch runs {M}x{N}x{K} on a kernel")
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what=f"backstop K={K}")


@pytest.mark.gpu
def test_backstop_never_hands_torch_a_shape_it_gets_wrong():
    # torch 2.11 returns a wrong result, without an error, where K / 128 is not a multiple of 4 (here 23 groups).
    M, N, K = 4096, 7168, 2880
    assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    out = fp8ext.scaled_mm(a, b, sa, sb)
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="K / 128 = 23")


@pytest.mark.gpu
def test_backstop_refused_by_torch_falls_back_to_the_kernels(plant, capfd):
    # A torch whose block-wise checks differ from 2.11's refuses a call the backstop admitted: fp8ext warns once,
    # computes the call on its kernels, and hands torch no more block-wise calls.
    _torch_blockwise_or_skip()
    M, N, K = _backstop_shape()
    a, b, sa, sb = random_blockwise_operands(M, N, K, device=DEV)
    plant("blockwise=refused")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fp8ext.scaled_mm(a, b, sa, sb)
    # A C++ warning reaches Python's warnings module where torch installs its handler, else torch prints it to
    # stderr.
    said = " ".join(str(w.message) for w in caught) + capfd.readouterr().err
    assert said.count("torch._scaled_mm refused a block-wise call") == 1, said[-2000:]
    rows = torch.randperm(M, device=DEV)[:64]
    check_against_reference(out[rows], a[rows], b, sa[rows], sb, use_fast_accum=False, what="after a refusal")
    assert fp8ext.selected_blockwise_kernel(M, N, K) in fp8ext.blockwise_kernel_names()
    plant("")
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"
    # Out of memory is the caller's, not a refusal.
    plant("blockwise=oom")
    with pytest.raises(torch.OutOfMemoryError, match="planted by fp8ext._testing_fault"):
        fp8ext.scaled_mm(a, b, sa, sb)
    assert fp8ext.selected_blockwise_kernel(M, N, K) == "torch._scaled_mm"


@pytest.mark.gpu
def test_forced_kernel_kinds_do_not_mix():
    a, b, sa, sb = random_blockwise_operands(16, 256, 256, device=DEV)
    row = fp8ext.kernel_names()[0]
    with fp8ext.force_kernel(row), pytest.raises(RuntimeError, match="does not compute this block-wise call"):
        fp8ext.scaled_mm(a, b, sa, sb)
    ra, rb = a, b
    rsa, rsb = torch.rand(16, 1, device=DEV), torch.rand(1, 256, device=DEV)
    with fp8ext.force_kernel(fp8ext.blockwise_kernel_names()[0]), \
            pytest.raises(RuntimeError, match="takes block-wise scales and does not compute this call"):
        fp8ext.scaled_mm(ra, rb, rsa, rsb)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fp8", [E4M3, torch.float8_e5m2])
@pytest.mark.parametrize("M,K", QUANT_SHAPES + [(1000, 7168), (4, 29568), (6, 1040)])
def test_quantize_blockwise_kernel_equals_the_cpu_path(M, K, dtype, fp8):
    x = _activations(M, K, dtype, device=DEV)
    got = torch.ops.fp8ext.quantize_blockwise(x, fp8)
    assert got[0].device.type == "cuda" and got[1].device.type == "cuda"
    _same_quantization(got, torch.ops.fp8ext.quantize_blockwise(x.cpu(), fp8))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_quantize_blockwise_kernel_rows_apart_and_unaligned(dtype):
    # Rows a vector access apart (one load a lane) and rows that are not (four loads a lane), and a base pointer
    # off the vector's alignment: the same bits as the CPU path.
    wide = _activations(37, 1030, dtype, device=DEV)
    for x in (wide[:, :1024], wide[:, 2:514], wide[:, 4:516], wide[:1, 2:514]):
        _same_quantization(torch.ops.fp8ext.quantize_blockwise(x), torch.ops.fp8ext.quantize_blockwise(x.cpu()))


@pytest.mark.gpu
def test_quantize_blockwise_kernel_in_graphs_compile_and_opcheck():
    # opcheck compares eager and traced outputs with torch's allclose, where NaN != NaN: finite inputs there.
    torch.library.opcheck(torch.ops.fp8ext.quantize_blockwise.default, (torch.randn(8, 7168, device=DEV).bfloat16(),))
    x = _activations(8, 7168, torch.bfloat16, device=DEV)
    fp8ext.quantize_blockwise(x)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q, s = fp8ext.quantize_blockwise(x)
    for _ in range(2):
        x.copy_(_activations(8, 7168, torch.bfloat16, device=DEV))
        graph.replay()
        torch.cuda.synchronize()
        _same_quantization((q, s), torch.ops.fp8ext.quantize_blockwise(x.cpu()))
    compiled = torch.compile(lambda t: fp8ext.quantize_blockwise(t), fullgraph=True)
    _same_quantization(compiled(x), torch.ops.fp8ext.quantize_blockwise(x))
