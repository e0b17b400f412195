"""The shape zoo's split (python/fp8ext/zoo.py): fixed, disjoint from everything calibration measures, and never
read by the fit behind the committed cost-model coefficients."""
import json
import subprocess
import sys
from pathlib import Path

from fp8ext import zoo
from fp8ext.zoo import LLAMA_NK, MODEL_WEIGHTS, weights, zoo_rows

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import tune  # noqa: E402


def test_the_split_is_fixed():
    # Changing the zoo changes what "held out" means: a deliberate change updates these numbers.
    assert (len(zoo_rows("tune")), len(zoo_rows("heldout"))) == (184, 140)
    assert len({fam for fam, *_ in MODEL_WEIGHTS}) >= 8
    assert zoo_rows() == zoo_rows()  # no randomness left to the process


def test_heldout_weights_are_never_measured_for_calibration():
    held = {(r["N"], r["K"]) for r in zoo_rows("heldout")}
    tuned = {(r["N"], r["K"]) for r in tune.calibration_rows()}
    assert held and tuned
    assert not held & tuned
    assert not held & set(LLAMA_NK)


def test_the_committed_coefficients_were_fitted_without_a_heldout_row():
    held = {(r["N"], r["K"]) for r in zoo_rows("heldout")}
    sources = tune.coefficient_sources()
    assert sources, "csrc/sm90/dispatch/cost_model_coeffs.inc names no calibration file"
    for src in sources:
        rows = json.loads((ROOT / src).read_text())["rows"]
        assert rows
        assert not {(r["N"], r["K"]) for r in rows} & held, src
        assert all(r.get("split", "tune") == "tune" for r in rows), src


def test_rows_are_valid_calls_with_serving_sized_m():
    rows = zoo_rows()
    assert all(1 <= r["M"] <= 16384 and r["N"] % 16 == 0 and r["K"] % 16 == 0 for r in rows)
    powers = sum(1 for r in rows if r["M"] > 1 and r["M"] & (r["M"] - 1) == 0)
    assert powers == 0
    for split in ("tune", "heldout"):
        ms = [r["M"] for r in zoo_rows(split)]
        assert min(ms) <= 128 and any(128 < m < 1024 for m in ms) and max(ms) >= 1024
    assert all(w["N"] % 64 == 0 and w["K"] % 64 == 0 for w in weights() if w["weight"].startswith("random/"))


def test_the_shape_data_loads_without_the_benchmark():
    # fp8ext.zoo is the leaf that the benchmark and the tools read: importing it must not load fp8ext.bench.
    code = "import sys, fp8ext.zoo; assert 'fp8ext.bench' not in sys.modules, sorted(sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_the_fresh_set_is_fixed_and_read_by_nothing_before_it():
    rows = zoo_rows("fresh")
    assert len(rows) == 60 and rows == zoo_rows("fresh") and {r["split"] for r in rows} == {"fresh"}
    fresh = {(r["N"], r["K"]) for r in rows}
    before = {(w["N"], w["K"]) for w in weights()} | set(LLAMA_NK) | set(zoo.TUNE_GRID_NK)
    before |= {(n, k) for _, n, k in zoo.DEEPSEEK_V3}
    before |= {(n, k) for weights_ in zoo.FRESH_SETS.values() for _, _, n, k, _ in weights_}
    assert not fresh & before
    ms = [r["M"] for r in rows]
    assert min(ms) <= 128 and any(128 < m < 1024 for m in ms) and sum(m >= 1024 for m in ms) >= 15
    assert all(r["N"] % 16 == 0 and r["K"] % 16 == 0 for r in rows)
    assert all(r["split"] != "fresh" for r in zoo_rows())  # not part of the zoo


def test_calibration_refuses_a_fresh_row(tmp_path):
    r = zoo_rows("fresh")[0]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"rows": [dict(r, kernel="k", us=1.0)]}))
    try:
        tune.load_rows([path])
    except SystemExit as e:
        assert "held-out or fresh weight" in str(e)
    else:
        raise AssertionError("tune.load_rows read a fresh row")
