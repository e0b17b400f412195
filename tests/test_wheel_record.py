"""tools/wheel_record.py: the row-by-row comparison of a wheel's benchmark with an in-place build's."""
import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "tools" / "wheel_record.py"
_spec = importlib.util.spec_from_file_location("wheel_record", _PATH)
wheel_record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheel_record)


def bench(ratios):
    """A llama-style record: rows with torch_rowwise_us / fp8ext_us = ratio."""
    return {"rows": [{"M": m, "N": n, "K": k, "use_fast_accum": fast, "torch_rowwise_us": 10.0 * x,
                      "fp8ext_us": 10.0} for (m, n, k, fast), x in ratios.items()]}


def test_row_comparison_and_leaving_a_shape_out():
    base = {(m, n, 4096, fast): 1.0 + 0.1 * (m <= 128) for m in (16, 2048) for n in (6144, 8192)
            for fast in (True, False)}
    slowed = dict(base)
    slowed[(16, 6144, 4096, True)] = 0.25  # a transient in one row of one weight shape
    r = wheel_record.row_comparison(bench(base), bench(slowed), set())
    assert r["rows"] == 8 and r["largest_row_difference"] == pytest.approx(1.1 / 0.25 - 1)
    assert r["geomeans"]["fast M<=128 vs rowwise"]["wheel"] == pytest.approx(1.1)
    assert r["geomeans"]["fast M<=128 vs rowwise"]["inplace"] == pytest.approx(math.sqrt(1.1 * 0.25))
    kept = wheel_record.row_comparison(bench(base), bench(slowed), {(6144, 4096)})
    assert kept["rows"] == 4 and kept["largest_row_difference"] == 0.0
    assert kept["left_out_weight_shapes"] == [(6144, 4096)]
