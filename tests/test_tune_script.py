"""tools/tune.py's fit and bookkeeping, without a GPU: the fit recovers known coefficients, refuses held-out
rows, and writes what cost_model.cpp reads."""
import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import tune  # noqa: E402

pytest.importorskip("scipy")


def test_fit_recovers_the_coefficients_of_exact_data():
    rng = random.Random(0)
    truth = [6.0, 0.4, 0.3, 1.5]
    points = []
    for _ in range(60):
        terms = [rng.uniform(1, 2000), rng.uniform(1, 500), rng.uniform(1, 30)]
        points.append((terms, tune.predict(truth, terms)))
    assert tune._fit_one(points) == pytest.approx(truth, rel=1e-6)


def test_fit_keeps_coefficients_non_negative_and_needs_enough_rows():
    rng = random.Random(1)
    rows = []
    for i in range(tune.MIN_ROWS):
        terms = [rng.uniform(1, 100), rng.uniform(1, 100), 1.0, 1, 1, 1, 1]
        rows.append({"M": 1, "N": 16, "K": 16, "weight": f"w{i}", "times": {"k@H1": 5.0 + terms[0]},
                     "terms": {"k@H1": terms}, "torch_rowwise_us": {"fast": 9.0, "precise": 9.0},
                     "torch_terms": terms})
    fitted = tune.fit(rows)
    assert set(fitted) == {"k", "torch_rowwise_fast", "torch_rowwise_precise"}
    assert all(c >= 0 for cs in fitted.values() for c in cs)
    assert "k" not in tune.fit(rows[:-1])  # fewer than MIN_ROWS rows: the kernel keeps its twin's or defaults


def test_loading_refuses_a_heldout_row(tmp_path):
    from fp8ext.zoo import zoo_rows

    r = zoo_rows("heldout")[0]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"rows": [dict(r, times={}, terms={})]}))
    with pytest.raises(SystemExit, match="held-out"):
        tune.load_rows([path])


def test_written_coefficients_name_their_source(tmp_path, monkeypatch):
    out = tmp_path / "coeffs.inc"
    monkeypatch.setattr(tune, "COEFFS", out)
    src = ROOT / "bench" / "tuning" / "some-calibration.json"
    tune.write_coefficients({"a_kernel": [1.0, 2.0, 3.0, 4.0]}, [src])
    assert tune.coefficient_sources(out) == ["bench/tuning/some-calibration.json"]
    assert '{"a_kernel", {1, 2, 3, 4}},' in out.read_text().splitlines()


def test_only_built_kernels_and_torch_keep_their_coefficients():
    kept = tune.built_only({"coop_128x128x128_c1x2_precise_bf16": [1.0] * 4, "a_dropped_kernel": [1.0] * 4,
                            "torch_rowwise_fast": [2.0] * 4})
    assert set(kept) == {"coop_128x128x128_c1x2_precise_bf16", "torch_rowwise_fast"}


def test_the_committed_coefficients_come_from_committed_calibrations():
    sources = tune.coefficient_sources()
    assert sources and all((ROOT / s).is_file() for s in sources)


def test_backstop_score_hands_torch_the_calls_without_a_clear_predicted_advantage():
    # (fast, measured pick, predicted pick, measured torch, predicted torch)
    rows = [(True, 8.0, 9.0, 10.0, 10.0),    # predicted 10% faster: the kernel runs at every advantage up to 0.10
            (True, 12.0, 9.6, 10.0, 10.0),   # predicted 4% faster: runs below an advantage of 0.04, torch above
            (True, 20.0, 11.0, 10.0, 10.0)]  # predicted slower: torch runs unless the advantage is negative
    score = tune.score_backstop(rows)
    assert set(score) == {f"fast advantage {a:+.2f}" for a in (-0.03, 0.0, 0.03, 0.06, 0.10)}
    assert score["fast advantage +0.03"]["below 0.97"] == 1  # the 12 us pick against torch's 10 us
    assert score["fast advantage +0.06"]["below 0.97"] == 0
    assert score["fast advantage +0.06"]["geomean torch/default"] == pytest.approx((10 / 8) ** (1 / 3))
    assert score["fast advantage -0.03"]["below 0.97"] == 1  # 11 > 10 * 1.03: still torch
