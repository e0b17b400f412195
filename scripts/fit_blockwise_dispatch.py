#!/usr/bin/env python3
"""Fit the block-wise dispatch's time model (csrc/sm90/blockwise_dispatch.h: t = a + b * W per kernel) on the
tuning part of a blockwise bench record, and optionally write the fits to csrc/sm90/blockwise_cost_coeffs.inc.

    python -m fp8ext.bench --suite blockwise --all-kernels --json bw.json      # on the H200
    python scripts/fit_blockwise_dispatch.py bw.json [--write]                  # anywhere with a CUDA build

Every tuning row of the record (DeepSeek-V3's layers) has each bf16 block-scaled kernel's time. Per kernel, a and
b are fitted by least squares on the relative error, over every row the kernel computes (the decode kernels only
M <= 32), W coming from the extension itself (the _blockwise_work op), so that the fit and the dispatch compute
the same W: the serial work per SM of a tile kernel, the row-wise twin's predicted time of a decode kernel. Decode
and tile kernels are thus compared in microseconds. The fits are then scored by the dispatch's own picks (the
_selected_blockwise_kernel op with the trial fits): the geomean over the rows of the picked kernel's time / the
fastest kernel's, and the worst row. Held-out rows are never read: they judge the fits, in the next run of the
suite.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

import fp8ext

ROOT = Path(__file__).resolve().parent.parent
COEFFS = ROOT / "csrc" / "sm90" / "blockwise_cost_coeffs.inc"
MIN_A_US = 0.5  # a fixed cost below this is no launch's: the fit is held there


def tuning_rows(record: dict) -> list[dict]:
    rows = [r for r in record["rows"] if r["split"] == "tune" and r.get("kernels_us")]
    if not rows:
        raise SystemExit("the record has no tuning rows with per-kernel times: run the suite with --all-kernels")
    return rows


def work(name: str, r: dict, sm_count: int) -> float:
    return torch.ops.fp8ext._blockwise_work(name, r["M"], r["N"], r["K"], sm_count)[0]


def fit_kernel(points: list[tuple[float, float]]) -> tuple[float, float]:
    """a, b minimising sum(((a + b W - t) / t)^2) over (W, t), with a >= MIN_A_US."""
    # Weighted least squares, weights 1 / t^2: normal equations of [1, W] against t.
    s00 = sum(1 / t**2 for w, t in points)
    s01 = sum(w / t**2 for w, t in points)
    s11 = sum(w * w / t**2 for w, t in points)
    r0 = sum(1 / t for w, t in points)
    r1 = sum(w / t for w, t in points)
    det = s00 * s11 - s01 * s01
    a, b = ((r0 * s11 - r1 * s01) / det, (s00 * r1 - s01 * r0) / det) if det > 0 else (MIN_A_US, 0.0)
    if a < MIN_A_US:
        a = MIN_A_US
        b = (r1 - a * s01) / s11
    return a, b


def fit(rows: list[dict], sm_count: int) -> dict[str, tuple[float, float]]:
    built = set(fp8ext.blockwise_kernel_names())  # a kernel timed then but no longer built gets no fit
    names = sorted({k for r in rows for k in r["kernels_us"]} & built)
    out = {}
    for name in names:
        points = [(work(name, r, sm_count), r["kernels_us"][name]) for r in rows
                  if isinstance(r["kernels_us"].get(name), (int, float))]
        points = [(w, t) for w, t in points if w > 0]  # a decode kernel without its row-wise twin: not fitted
        if len(points) >= 2:
            out[name] = fit_kernel(points)
    return out


def trial_fits(fits: dict[str, tuple[float, float]], sm_count: int) -> list[float]:
    """[a0, b0, a1, b1, ...] for every built kernel in order: its new fit, its bf16 twin's, or its compiled-in one."""
    flat = []
    for name in fp8ext.blockwise_kernel_names():
        twin = name.rsplit("_", 1)[0] + "_bf16"
        if name in fits or twin in fits:
            flat += list(fits.get(name, fits.get(twin)))
        else:
            flat += torch.ops.fp8ext._blockwise_work(name, 1, 1, 1, sm_count)[1:]
    return flat


def score(rows: list[dict], flat_fits: list[float], sm_count: int) -> tuple[float, float]:
    """(geomean, worst) of the picked kernel's time / the fastest timed kernel's, over the rows; a pick that was not
    timed (it failed) disqualifies the fits."""
    logs, worst = [], 0.0
    built = set(fp8ext.blockwise_kernel_names())
    for r in rows:
        times = {k: t for k, t in r["kernels_us"].items() if isinstance(t, (int, float)) and k in built}
        pick = torch.ops.fp8ext._selected_blockwise_kernel(r["M"], r["N"], r["K"], torch.bfloat16, sm_count, False,
                                                           flat_fits)
        if pick not in times:
            return math.inf, math.inf
        x = times[pick] / min(times.values())
        logs.append(math.log(x))
        worst = max(worst, x)
    return (math.exp(sum(logs) / len(logs)), worst) if logs else (math.inf, math.inf)


def write(fits: dict[str, tuple[float, float]], source: str, result: tuple[float, float]) -> None:
    lines = ["// Per-kernel fits {name, {a us, b us per MAC}} of the block-wise dispatch (blockwise_dispatch.h),",
             "// written by scripts/fit_blockwise_dispatch.py --write from the tuning part of",
             f"// {source}: picked / fastest kernel geomean {result[0]:.4f}, worst {result[1]:.3f} (all M).",
             "// b is us per MAC for a tile kernel, us per us of the row-wise twin's prediction for a decode kernel."]
    lines += [f'{{"{n}", {{{a:.6g}, {b:.6g}}}}},' for n, (a, b) in sorted(fits.items())]
    COEFFS.write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("record", type=Path)
    p.add_argument("--write", action="store_true", help=f"write the fits to {COEFFS.relative_to(ROOT)}")
    args = p.parse_args()
    if not fp8ext.blockwise_kernel_names():
        raise SystemExit("needs a CUDA build of fp8ext (its dispatch picks among the built kernels)")
    record = json.loads(args.record.read_text())
    rows, sm_count = tuning_rows(record), int(record["sm_count"])
    before = score(rows, [], sm_count)
    fits = fit(rows, sm_count)
    after = score(rows, trial_fits(fits, sm_count), sm_count)
    print(f"{len(rows)} tuning rows, {sm_count} SMs")
    for n, (a, b) in sorted(fits.items()):
        print(f"  {n:40s} a {a:8.3f} us   b {b:.4g}")
    print(f"compiled-in fits: picked / fastest geomean {before[0]:.4f}, worst {before[1]:.3f}")
    print(f"new fits:         picked / fastest geomean {after[0]:.4f}, worst {after[1]:.3f}")
    if args.write:
        path = args.record.resolve()
        write(fits, str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name, after)
        print(f"wrote {COEFFS.relative_to(ROOT)}; rebuild to use it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
