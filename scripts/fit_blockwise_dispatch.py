#!/usr/bin/env python3
"""Fit the block-wise dispatch's coefficients (csrc/sm90/blockwise_dispatch.h) on the tuning part of a blockwise
bench record, and optionally write them to csrc/sm90/blockwise_cost_coeffs.inc.

    python -m fp8ext.bench --suite blockwise --all-kernels --json bw.json      # on the H200
    python scripts/fit_blockwise_dispatch.py bw.json [--write]                  # anywhere with a CUDA build

Every tuning row of the record (DeepSeek-V3's layers) has each bf16 block-scaled kernel's time. For each
coefficient triple of a grid, the dispatch's own selection (the _selected_blockwise_kernel op, with the trial
coefficients and the record's SM count) picks a kernel per row; the score is the geomean over the rows of the
picked kernel's time / the fastest kernel's, then the worst row. Rows the gemv takes (M <= 4, by rule) are left
out. Held-out rows are never read: they judge the fit, in the next run of the suite.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import torch

import fp8ext

ROOT = Path(__file__).resolve().parent.parent
COEFFS = ROOT / "csrc" / "sm90" / "blockwise_cost_coeffs.inc"
GRID = {"stream_k": [0.4 + 0.05 * i for i in range(25)],   # 0.40 .. 1.60
        "n64": [0.6 + 0.1 * i for i in range(15)],          # 0.6 .. 2.0
        "n32": [0.6 + 0.1 * i for i in range(25)]}          # 0.6 .. 3.0


def tuning_rows(record: dict) -> list[dict]:
    rows = [r for r in record["rows"] if r["split"] == "tune" and r.get("kernels_us")]
    if not rows:
        raise SystemExit("the record has no tuning rows with per-kernel times: run the suite with --all-kernels")
    return rows


def score(rows: list[dict], coeffs: tuple[float, float, float], sm_count: int) -> tuple[float, float]:
    """(geomean, worst) of the picked kernel's time / the fastest timed kernel's, over the rows."""
    logs, worst = [], 0.0
    for r in rows:
        times = {k: t for k, t in r["kernels_us"].items() if isinstance(t, (int, float))}
        pick = torch.ops.fp8ext._selected_blockwise_kernel(r["M"], r["N"], r["K"], torch.bfloat16, sm_count, False,
                                                           list(coeffs))
        if "_gemv_" in pick:
            continue  # M <= 4 goes to the gemv by rule, whatever the coefficients: nothing to fit there
        if pick not in times:
            return math.inf, math.inf  # picked a kernel that failed or was not timed: never the fit
        x = times[pick] / min(times.values())
        logs.append(math.log(x))
        worst = max(worst, x)
    return (math.exp(sum(logs) / len(logs)), worst) if logs else (math.inf, math.inf)


def write(coeffs: tuple[float, float, float], source: str, result: tuple[float, float]) -> None:
    COEFFS.write_text(
        "// The block-wise dispatch's coefficients (blockwise_dispatch.h): {stream-K cost, wgmma inefficiency at MMA "
        "N 64,\n// at MMA N 32}. Written by scripts/fit_blockwise_dispatch.py --write from the tuning part of\n"
        f"// {source}: picked / fastest kernel geomean {result[0]:.4f}, worst {result[1]:.3f}.\n"
        "{" + ", ".join(f"{c:.4g}" for c in coeffs) + "}\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("record", type=Path)
    p.add_argument("--write", action="store_true", help=f"write the best to {COEFFS.relative_to(ROOT)}")
    args = p.parse_args()
    if not fp8ext.blockwise_kernel_names():
        raise SystemExit("needs a CUDA build of fp8ext (its dispatch picks among the built kernels)")
    record = json.loads(args.record.read_text())
    rows, sm_count = tuning_rows(record), int(record["sm_count"])
    current = score(rows, tuple(_current()), sm_count)
    best = min(((score(rows, c, sm_count), c) for c in itertools.product(*GRID.values())), key=lambda x: x[0])
    print(f"{len(rows)} tuning rows, {sm_count} SMs")
    print(f"built-in {_current()}: geomean {current[0]:.4f}, worst {current[1]:.3f}")
    print(f"fit      {tuple(round(c, 4) for c in best[1])}: geomean {best[0][0]:.4f}, worst {best[0][1]:.3f}")
    if args.write:
        path = args.record.resolve()
        write(best[1], str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name, best[0])
        print(f"wrote {COEFFS.relative_to(ROOT)}; rebuild to use it")
    return 0


def _current() -> list[float]:
    """The coefficients in the .inc file: its one line that is not a comment, "{a, b, c}"."""
    line = next(ln for ln in COEFFS.read_text().splitlines() if ln.startswith("{"))
    return [float(x) for x in line.strip("{} ").split(",")]


if __name__ == "__main__":
    sys.exit(main())
