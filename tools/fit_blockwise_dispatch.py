#!/usr/bin/env python3
"""Fit the block-wise dispatch's time model (csrc/sm90/dispatch/blockwise_dispatch.h: t = (a + b * W) * exp(c) per
kernel) on the tuning part of blockwise bench records, and optionally write it to
csrc/sm90/dispatch/blockwise_cost_coeffs.inc.

    python -m fp8ext.bench --suite blockwise --all-kernels --json bw.json       # on the H200
    python tools/fit_blockwise_dispatch.py bw.json [more.json ...] [--write]   # anywhere with a CUDA build
    python tools/fit_blockwise_dispatch.py bw.json ... --custom fresh.json --judge fresh2.json

--custom adds every row of --shapes runs (split 'custom') to the tuning rows; --judge scores the picks of the
compiled-in fits and of the new ones on the rows of other records (run with --all-kernels), which the fit never
reads: a set of fresh shapes timed once judges both the dispatch that ran and its successor.

Every tuning row of a record (DeepSeek-V3's layers) has each bf16 block-scaled kernel's time; with several
records a kernel's time on a row is the geometric mean of theirs. Per kernel, a and b are fitted by least squares
on the relative error, over every row the kernel computes (the decode kernels only M <= 32), W coming from the
extension itself (the _blockwise_work op), so that the fit and the dispatch compute the same W: the serial work
per SM of a tile kernel, the row-wise twin's predicted time of a decode kernel. Decode and tile kernels are thus
compared in microseconds. The kernel's residuals on those rows, ln(measured / (a + b W)), are kept: the dispatch's
correction c interpolates them (blockwise_dispatch.h). torch._scaled_mm's block-wise path, the backstop, is fitted
the same way on the rows torch ran (its `torch_blockwise_us`, M a multiple of 4), as a data-parallel 128 x 128
tile; the margin by which a kernel must be predicted faster than torch is chosen on the scores below.

The fits are scored by the dispatch's own picks (the _selected_blockwise_kernel op with the trial fits): the
geomean over the rows of the pick's time / the fastest's (kernels and torch), and the worst row; in sample, and
leaving out one weight shape (N, K) at a time, which fits on the other shapes and scores the picks on the one left
out, as a new model's weights will be. With the backstop, also torch's time / the pick's per M group over the rows
torch ran, for each margin tried. Held-out rows are never read: they judge the fits, in the next run of the suite.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import torch

import fp8ext
from fp8ext.bench.common import geomean

ROOT = Path(__file__).resolve().parent.parent
COEFFS = ROOT / "csrc" / "sm90" / "dispatch" / "blockwise_cost_coeffs.inc"
MIN_A_US = 0.5  # a fixed cost below this is no launch's: the fit is held there
TORCH = "torch._scaled_mm"  # the backstop's name, as a pick and as a fit
MARGINS = (0.0, 0.02, 0.04, 0.06, 0.08, 0.10)  # the kernel advantages tried
ABOVE_M = (0, 32, 64, 128, 256)  # the M above which the backstop is considered, tried
GROUPS = (("M<=128", lambda m: m <= 128), ("128<M<1024", lambda m: 128 < m < 1024), ("M>=1024", lambda m: m >= 1024))

Fit = tuple[float, float, list[tuple[float, float, float, float]]]  # a, b, residuals (log2 M, N, K, ln ratio)


def tuning_rows(record: dict, splits: tuple[str, ...] = ("tune",)) -> list[dict]:
    """The record's rows of the given splits that have per-kernel times."""
    rows = [r for r in record["rows"] if r["split"] in splits and r.get("kernels_us")]
    if not rows:
        raise SystemExit(f"the record has no {' or '.join(splits)} rows with per-kernel times: run the suite with "
                         "--all-kernels")
    return rows


def merge_rows(records: list[list[dict]]) -> list[dict]:
    """One row per (M, N, K): each kernel's time, and torch's, the geometric mean of the records' (a failure in one
    is left out)."""
    times: dict[tuple[int, int, int], dict[str, list[float]]] = {}
    for rows in records:
        for r in rows:
            per = times.setdefault((r["M"], r["N"], r["K"]), {})
            for k, t in [*r["kernels_us"].items(), (TORCH, r.get("torch_blockwise_us"))]:
                if isinstance(t, (int, float)) and t > 0:
                    per.setdefault(k, []).append(float(t))
    out = []
    for (M, N, K), per in times.items():
        row = {"M": M, "N": N, "K": K, "split": "tune",
               "kernels_us": {k: geomean(ts) for k, ts in per.items() if k != TORCH}}
        if TORCH in per:
            row["torch_blockwise_us"] = geomean(per[TORCH])
        out.append(row)
    return out


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


def measured(name: str, r: dict):
    """A kernel's (or torch's) time on a row; None where it was not timed or failed."""
    t = r.get("torch_blockwise_us") if name == TORCH else r["kernels_us"].get(name)
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def fit(rows: list[dict], sm_count: int) -> dict[str, Fit]:
    built = set(fp8ext.blockwise_kernel_names())  # a kernel timed then but no longer built gets no fit
    names = sorted({k for r in rows for k in r["kernels_us"]} & built)
    if any(measured(TORCH, r) for r in rows):
        names.append(TORCH)
    out = {}
    for name in names:
        points = [(work(name, r, sm_count), measured(name, r), r) for r in rows if measured(name, r)]
        points = [p for p in points if p[0] > 0]  # a decode kernel without its row-wise twin: not fitted
        if len(points) < 2:
            continue
        a, b = fit_kernel([(w, t) for w, t, _ in points])
        residuals = [(math.log2(r["M"]), math.log2(r["N"]), math.log2(r["K"]), math.log(t / (a + b * w)))
                     for w, t, r in points if a + b * w > 0]
        out[name] = (a, b, residuals)
    return out


# fits, residuals, torch_ok, kernel advantage, backstop above M (the last two < 0: the compiled-in ones)
Trial = tuple[list[float], list[float], bool, float, int]


def trial_fits(fits: dict[str, Fit], sm_count: int, with_residuals: bool = True, torch_ok: bool = False,
               margin: float = -1.0, above_m: int = -1) -> Trial:
    """The trial arguments of _selected_blockwise_kernel: [a0, b0, a1, b1, ...] for every built kernel in order (its
    new fit, its bf16 twin's, or its compiled-in line), then torch's where it has one, the residuals [index, log2 M,
    log2 N, log2 K, r, ...] (torch's index after the last kernel's), whether the backstop may run, its margin and
    the M above which it is considered."""
    flat, residuals = [], []
    names = fp8ext.blockwise_kernel_names()
    for i, name in enumerate(names):
        twin = name.rsplit("_", 1)[0] + "_bf16"
        f = fits.get(name, fits.get(twin))
        if f is None:
            flat += torch.ops.fp8ext._blockwise_work(name, 1, 1, 1, sm_count)[1:]
            continue
        flat += [f[0], f[1]]
        if with_residuals:
            for r in f[2]:
                residuals += [float(i), *r]
    if TORCH in fits:
        flat += [fits[TORCH][0], fits[TORCH][1]]
        if with_residuals:
            for r in fits[TORCH][2]:
                residuals += [float(len(names)), *r]
    return flat, residuals, torch_ok, margin, above_m


def pick(r: dict, trial: Trial, sm_count: int) -> str:
    return torch.ops.fp8ext._selected_blockwise_kernel(r["M"], r["N"], r["K"], torch.bfloat16, sm_count, False,
                                                       *trial)


def score(rows: list[dict], trial: Trial, sm_count: int) -> tuple[float, float]:
    """(geomean, worst) of the pick's time / the fastest's (kernels, and torch where the trial lets it run), over
    the rows; a pick that was not timed (it failed) disqualifies the fits. Empty fits score the compiled-in ones."""
    logs, worst = [], 0.0
    built = set(fp8ext.blockwise_kernel_names())
    for r in rows:
        times = {k: t for k, t in r["kernels_us"].items() if isinstance(t, (int, float)) and k in built}
        if trial[2] and measured(TORCH, r):
            times[TORCH] = measured(TORCH, r)
        p = pick(r, trial, sm_count)
        if p not in times:
            return math.inf, math.inf
        x = times[p] / min(times.values())
        logs.append(math.log(x))
        worst = max(worst, x)
    return (math.exp(sum(logs) / len(logs)), worst) if logs else (math.inf, math.inf)


def against_torch(rows: list[dict], trial: Trial, sm_count: int) -> list[float]:
    """log(torch's time / the pick's) on each row torch ran (the acceptance's ratio)."""
    out = []
    for r in rows:
        t = measured(TORCH, r)
        if not t:
            continue
        p = pick(r, trial, sm_count)
        out.append(math.log(t / (t if p == TORCH else r["kernels_us"][p])))
    return out


def leave_one_shape_out(rows: list[dict], sm_count: int, with_residuals: bool, torch_ok: bool = False,
                        margin: float = -1.0, above_m: int = -1) -> tuple[float, float, dict[str, list[float]]]:
    """The score of the picks on each weight shape (N, K) by fits made without that shape's rows; and the
    log ratios against torch per M group."""
    logs, worst = [], 0.0
    vs_torch: dict[str, list[float]] = {g: [] for g, _ in GROUPS}
    for shape in sorted({(r["N"], r["K"]) for r in rows}):
        rest = [r for r in rows if (r["N"], r["K"]) != shape]
        out = [r for r in rows if (r["N"], r["K"]) == shape]
        trial = trial_fits(fit(rest, sm_count), sm_count, with_residuals, torch_ok, margin, above_m)
        g, w = score(out, trial, sm_count)
        logs += [math.log(g)] * len(out)
        worst = max(worst, w)
        for name, in_group in GROUPS:
            vs_torch[name] += against_torch([r for r in out if in_group(r["M"])], trial, sm_count)
    return math.exp(sum(logs) / len(logs)), worst, vs_torch


def torch_summary(logs: dict[str, list[float]]) -> str:
    """Geomean of torch / pick per M group, and the rows below 0.90."""
    parts = [f"{g} {math.exp(sum(v) / len(v)):.3f}" if v else f"{g} -" for g, v in logs.items()]
    low = sum(x < math.log(0.90) for v in logs.values() for x in v)
    return ", ".join(parts) + f", rows < 0.90: {low}"


def compiled_backstop() -> tuple[int, float]:
    """kBlockwiseBackstopAboveM and kBlockwiseKernelAdvantage as blockwise_dispatch.h sets them."""
    text = (ROOT / "csrc" / "sm90" / "dispatch" / "blockwise_dispatch.h").read_text()
    above_m = re.search(r"kBlockwiseBackstopAboveM = (\d+);", text)
    margin = re.search(r"kBlockwiseKernelAdvantage = ([0-9.]+);", text)
    if not above_m or not margin:
        raise SystemExit("blockwise_dispatch.h: the backstop's constants were not found")
    return int(above_m.group(1)), float(margin.group(1))


def write(fits: dict[str, Fit], sources: list[str], customs: list[str], result: tuple[float, float],
          cross: tuple[float, float], backstop: str) -> None:
    lines = ["// Generated by tools/fit_blockwise_dispatch.py --write: the block-wise dispatch's fits",
             "// (blockwise_dispatch.h), per kernel {a us, b us per MAC, residuals}, torch._scaled_mm's (the backstop)",
             "// the same way, from the tuning part of",
             *[f"//   {s}" for s in sources],
             *(["// and every row (--shapes) of", *[f"//   {s}" for s in customs]] if customs else []),
             f"// Picked / fastest kernel over those rows: geomean {result[0]:.4f}, worst {result[1]:.3f} in sample;",
             f"// {cross[0]:.4f}, worst {cross[1]:.3f}, leaving out one weight shape at a time.",
             "// With the backstop, torch / pick, one weight shape left out:",
             f"//   {backstop}.",
             "// b is us per MAC for a tile kernel, us per us of the row-wise twin's prediction for a decode kernel;",
             "// a residual is {log2 M, log2 N, log2 K, ln(measured / (a + b W))} of one tuning row.",
             ""]
    for i, (name, (_, _, res)) in enumerate(sorted(fits.items())):
        if res:
            lines.append(f"constexpr BlockwiseResidual kResiduals{i}[] = {{  // {name}")
            lines += [f"    {{{m:.4f}f, {n:.4f}f, {k:.4f}f, {r:.4f}f}}," for m, n, k, r in res]
            lines.append("};")
    lines.append("")
    lines.append("constexpr FitRow kFits[] = {")
    lines += [f'    {{"{name}", {{{a:.6g}, {b:.6g}, {f"kResiduals{i}" if res else "{}"}}}}},'
              for i, (name, (a, b, res)) in enumerate(sorted(fits.items()))]
    lines.append("};")
    COEFFS.write_text("\n".join(lines) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", type=Path, nargs="+")
    p.add_argument("--custom", type=Path, nargs="*", default=[], metavar="RECORD",
                   help="records of the suite run on --shapes whose rows (split 'custom') are tuning rows too: a "
                        "set of shapes that has judged one fit becomes tuning material for the next, and a new set "
                        "judges that")
    p.add_argument("--judge", type=Path, nargs="*", default=[], metavar="RECORD",
                   help="records (run with --all-kernels) whose rows, of any split, only score the fits")
    p.add_argument("--write", action="store_true", help=f"write the fits to {COEFFS.relative_to(ROOT)}")
    p.add_argument("--backstop", type=str, default=None, metavar="ABOVE_M,MARGIN",
                   help="the backstop's lower M bound and kernel advantage to report with --write (default: of the "
                        "pairs whose score, one shape left out, is within 0.001 of the best, the largest bound, then "
                        "the largest margin: the model errs more on unseen shapes, and torch is the yardstick)")
    args = p.parse_args()
    if not fp8ext.blockwise_kernel_names():
        raise SystemExit("needs a CUDA build of fp8ext (its dispatch picks among the built kernels)")
    records = [json.loads(path.read_text()) for path in args.records]
    customs = [json.loads(path.read_text()) for path in args.custom]
    sm_counts = {int(r["sm_count"]) for r in records + customs}
    if len(sm_counts) != 1:
        raise SystemExit(f"the records come from GPUs with different SM counts: {sorted(sm_counts)}")
    sm_count = sm_counts.pop()
    rows = merge_rows([tuning_rows(r) for r in records] + [tuning_rows(r, ("custom",)) for r in customs])
    before = score(rows, ([], [], False, -1.0, -1), sm_count)
    fits = fit(rows, sm_count)
    line = score(rows, trial_fits(fits, sm_count, with_residuals=False), sm_count)
    after = score(rows, trial_fits(fits, sm_count), sm_count)
    line_out = leave_one_shape_out(rows, sm_count, with_residuals=False)
    after_out = leave_one_shape_out(rows, sm_count, with_residuals=True)
    print(f"{len(rows)} tuning rows from {len(records) + len(customs)} record(s), {sm_count} SMs")
    for n, (a, b, res) in sorted(fits.items()):
        spread = max(abs(r[3]) for r in res) if res else 0.0
        print(f"  {n:40s} a {a:8.3f} us   b {b:.4g}   residuals {len(res):3d}, largest |ln| {spread:.3f}")
    print("picked / fastest kernel, geomean and worst row (kernels only):")
    print(f"  compiled-in fits:           {before[0]:.4f}  {before[1]:.3f}")
    print(f"  new lines only:             {line[0]:.4f}  {line[1]:.3f}   one shape left out: "
          f"{line_out[0]:.4f}  {line_out[1]:.3f}")
    print(f"  new lines with residuals:   {after[0]:.4f}  {after[1]:.3f}   one shape left out: "
          f"{after_out[0]:.4f}  {after_out[1]:.3f}")
    print("torch / pick over the rows torch ran, one weight shape left out:")
    print(f"  kernels only:               {torch_summary(after_out[2])}")
    backstop = {}
    if TORCH in fits:
        print("with the backstop (pick / fastest of kernels and torch; torch / pick), one weight shape left out:")
        for above_m in ABOVE_M:
            for margin in MARGINS:
                g, w, logs = leave_one_shape_out(rows, sm_count, True, torch_ok=True, margin=margin, above_m=above_m)
                backstop[above_m, margin] = (g, torch_summary(logs))
                print(f"  M > {above_m:3d}, margin {margin:.2f}:  {g:.4f}  worst {w:.3f};  "
                      f"{backstop[above_m, margin][1]}")
    for path in args.judge:
        judged = merge_rows([[r for r in json.loads(path.read_text())["rows"] if r.get("kernels_us")]])
        print(f"judged on {path.name} ({len(judged)} rows), pick / fastest of kernels and torch; torch / pick:")
        # Both with the backstop's bounds of blockwise_dispatch.h as trial values: the op leaves the backstop out
        # of an untrialled pick where torch is not the release it was measured with.
        above_m, margin = compiled_backstop()
        for label, trial in (("compiled-in", ([], [], True, margin, above_m)),
                             ("new", trial_fits(fits, sm_count, True, True, margin, above_m))):
            g, w = score(judged, trial, sm_count)
            logs = {name: against_torch([r for r in judged if in_group(r["M"])], trial, sm_count)
                    for name, in_group in GROUPS}
            print(f"  {label:12s} {g:.4f}  worst {w:.3f};  {torch_summary(logs)}")
    if args.write:
        def shown(path: Path) -> str:
            path = path.resolve()
            return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        if args.backstop:
            chosen = tuple(t(x) for t, x in zip((int, float), args.backstop.split(",")))
        else:
            best = min(g for g, _ in backstop.values()) if backstop else 0.0
            chosen = max((k for k, (g, _) in backstop.items() if g <= best + 0.001), default=(0, 0.0))
        summary = backstop.get(chosen, (0, "-"))[1]
        write(fits, [shown(p) for p in args.records], [shown(p) for p in args.custom], after, after_out,
              f"M > {chosen[0]}, margin {chosen[1]:.2f}: {summary}")
        print(f"wrote {COEFFS.relative_to(ROOT)} (set kBlockwiseBackstopAboveM to {chosen[0]} and "
              f"kBlockwiseKernelAdvantage to {chosen[1]:.2f}); rebuild to use it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
