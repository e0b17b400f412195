"""The block-wise dispatch's fit (tools/fit_blockwise_dispatch.py and what it fits), the fresh shape sets, and the
check of torch's block-wise path that the backstop rests on (the bench's torch-blockwise suite). CPU only."""
import math

import pytest
import torch

import fp8ext
from fp8ext.testing import random_blockwise_operands


def _script(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_blockwise_check_tells_right_wrong_and_refused(monkeypatch):
    """The torch-blockwise suite, the check to rerun before the backstop is turned on for another torch: on CPU,
    with fp8ext's reference path standing in for torch (right), a scaled copy of it (wrong) and torch's own
    refusal."""
    from fp8ext.bench.suites.torch_blockwise import check_k

    def refuse(*args, **kwargs):
        raise ValueError("Invalid scaling configuration.\n- details")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    assert check_k(640, 8, 128, device="cpu")["torch"] == "refused: Invalid scaling configuration."
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, sa, sb, out_dtype: fp8ext.scaled_mm(a, b, sa, sb))
    row = check_k(640, 8, 128, device="cpu")
    assert row["torch"] == "right" and row["k_groups"] == 5 and not row["k_groups_multiple_of_4"]
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, sa, sb, out_dtype: 1.5 * fp8ext.scaled_mm(a, b, sa, sb))
    row = check_k(512, 8, 128, device="cpu")
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
