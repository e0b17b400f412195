"""Writes the record of a cross-version run of the wheel: bench/results/<gpu>-<date>-wheel-crossversion-<commit>.json.

The wheel is built on one torch and Python and installed with `pip install --no-deps` on a machine with another
(`FP8EXT_WHEEL=... tools/gpu_check.sh`). This joins what that run left behind with a llama benchmark of an
in-place build of the same commit on the same GPU, so that the wheel's ratios can be held against it:

    python tools/wheel_record.py --run-info wheel/run_info.json --pytest-log wheel/pytest.log \
        --wheel-bench wheel/bench-llama.json --inplace-bench inplace/bench-llama.json --out bench/results/...

run_info.json is what gpu_check.sh writes in wheel mode: the installed wheel's name and size, `built_with`
(torch, python: from the wheel's _build_info.json) and `run_with` (torch, python on the GPU machine).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path


def pytest_summary(log: str) -> str:
    """The last line of a pytest run that counts outcomes ("889 passed, 8 skipped, 2 warnings in 159.97s")."""
    lines = [ln.strip("= ").strip() for ln in log.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    if not lines:
        raise ValueError("no pytest summary line in the log")
    return lines[-1]


def geomeans(bench: dict) -> dict[str, float]:
    """The benchmark summary's geomean ratios (the numbers; worst-row entries are left out)."""
    return {k: v for k, v in bench["summary"].items() if isinstance(v, (int, float))}


def compare(wheel: dict[str, float], inplace: dict[str, float]) -> dict:
    """Per geomean: wheel / in-place, and the largest relative departure from 1 over all of them."""
    common = sorted(set(wheel) & set(inplace))
    ratio = {k: wheel[k] / inplace[k] for k in common}
    worst = max(common, key=lambda k: abs(math.log(ratio[k])))
    return {"wheel_over_inplace": ratio, "largest_difference": {"geomean": worst, "ratio": ratio[worst]}}


def row_comparison(wheel_bench: dict, inplace_bench: dict, leave_out: set) -> dict:
    """Per row (M, N, K, accumulation), the in-place ratio over the wheel's, leaving out the (N, K) weight shapes
    in leave_out: the median and 90th percentile of |log| as a fraction, the largest, and the group geomeans of
    both runs over the rows kept (their own grouping: M <= 128, M >= 1024, per accumulation)."""
    def key(r):
        return r["M"], r["N"], r["K"], r["use_fast_accum"]

    def kept(rows):
        return [r for r in rows if (r["N"], r["K"]) not in leave_out]

    def ratio(r):
        return r["torch_rowwise_us"] / r["fp8ext_us"]

    wheel = {key(r): r for r in kept(wheel_bench["rows"])}
    inplace = {key(r): r for r in kept(inplace_bench["rows"]) if key(r) in wheel}
    logs = sorted(abs(math.log(ratio(inplace[k]) / ratio(wheel[k]))) for k in inplace)
    groups = {}
    for fast in (True, False):
        for name, pred in (("M<=128", lambda m: m <= 128), ("M>=1024", lambda m: m >= 1024)):
            label = f"{'fast' if fast else 'precise'} {name} vs rowwise"
            sel = [k for k in inplace if k[3] == fast and pred(k[0])]
            groups[label] = {run: math.exp(sum(math.log(ratio(rows[k])) for k in sel) / len(sel))
                             for run, rows in (("wheel", wheel), ("inplace", inplace))}
    return {"left_out_weight_shapes": sorted(leave_out), "rows": len(logs),
            "median_row_difference": math.expm1(logs[len(logs) // 2]),
            "p90_row_difference": math.expm1(logs[int(0.9 * len(logs))]),
            "largest_row_difference": math.expm1(logs[-1]),
            "geomeans": groups}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-info", required=True, type=Path)
    ap.add_argument("--pytest-log", required=True, type=Path)
    ap.add_argument("--wheel-bench", required=True, type=Path)
    ap.add_argument("--inplace-bench", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--inplace-other-commit", action="store_true",
                    help="accept an in-place benchmark of another commit (the record names both commits)")
    ap.add_argument("--note", action="append", default=[], help="a line for the record's notes (repeatable)")
    ap.add_argument("--leave-out", action="append", default=[], metavar="N,K",
                    help="also compare the runs row by row without this weight shape (repeatable; say why in --note)")
    args = ap.parse_args(argv)

    info = json.loads(args.run_info.read_text())
    wheel_bench = json.loads(args.wheel_bench.read_text())
    inplace_bench = json.loads(args.inplace_bench.read_text())
    if wheel_bench["commit"] != inplace_bench["commit"] and not args.inplace_other_commit:
        sys.exit(f"the two benchmarks ran different commits: {wheel_bench['commit']} and {inplace_bench['commit']} "
                 "(--inplace-other-commit accepts that)")
    wheel_g, inplace_g = geomeans(wheel_bench), geomeans(inplace_bench)
    record = {
        "commit": wheel_bench["commit"],
        "gpu": wheel_bench["gpu"],
        "date": wheel_bench["date"],
        "suite": "wheel-crossversion",
        "wheel": info["wheel"],
        "built_with": info["built_with"],
        "run_with": info["run_with"],
        "pytest": pytest_summary(args.pytest_log.read_text()),
        "bench_suite": wheel_bench["suite"],
        "method": wheel_bench["method"],
        "geomeans_wheel": wheel_g,
        "geomeans_inplace": inplace_g,
        "inplace_commit": inplace_bench["commit"],
        "inplace_date": inplace_bench["date"],
        "inplace_torch": inplace_bench["torch"],
        **compare(wheel_g, inplace_g),
        "row_comparison": row_comparison(wheel_bench, inplace_bench, set()),
        "notes": args.note,
    }
    if args.leave_out:
        leave_out = {tuple(int(x) for x in s.split(",")) for s in args.leave_out}
        record["row_comparison_left_out"] = row_comparison(wheel_bench, inplace_bench, leave_out)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("pytest", "built_with", "run_with", "largest_difference")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
