#!/usr/bin/env python3
"""Fit the grouped GEMM's kernel choice (csrc/ops/scaled_grouped_mm_cuda.cpp: groups that average at most T rows
run the swapped 32-token tile, larger ones the 128 x 128 cooperative tile) on grouped bench records of the tuning
models, and optionally write T to csrc/sm90/grouped/grouped_dispatch.inc.

    python -m fp8ext.bench --suite grouped --models <tuning models> --all-kernels --json tune.json   # on the H200
    python tools/fit_grouped_dispatch.py tune.json [more.json ...] [--one-expert more.json ...] [--write]
    python tools/fit_grouped_dispatch.py tune.json ... --judge judged.json

Each row of a record run with --all-kernels holds every grouped kernel's time for its scales and accumulation
(`kernels_us`). Per family (row-wise fast, row-wise precise, block-wise), T is the threshold on the row's mean rows
per group that minimises the geomean of the picked kernel's time over the fastest kernel's, over the family's rows;
candidates are the midpoints between the rows' distinct means. It is scored in sample and leaving out one model
at a time (fitted on the others, scored on the one left out). --judge scores the compiled-in rule (what the
record's `fp8ext_us` ran) on other records' rows against torch there: those rows are never fitted on.

A call of at most T rows per group on average but more rows in all than S runs the family's split kernel: its
groups of more than S rows that also hold more than half of the call's rows on the large tile, the others on the
swapped one (the host cannot see how the rows fall; the half-the-rows condition is fixed, not fitted).
S is fitted the same way on the rows whose routing sent every row to one expert (`one`), where one group's time is
the whole call's: the threshold on that group's rows; --one-expert adds records (of tuning models) whose one-expert
rows count for S only. The split kernels' own times are fitted on by neither.

Above T, row-wise fast accumulation also has a 128 x 256 tile (WIDE_TILE): W is the mean rows per group up to which
the 128 x 128 tile runs and beyond which the wide one does, fitted the same way on the rows above T that timed both;
--wide adds records whose rows count for W only. Without positional records T and S stay the compiled-in ones. Only
kernels the manifest lists are choices.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INC = ROOT / "csrc" / "sm90" / "grouped" / "grouped_dispatch.inc"
MANIFEST = ROOT / "python" / "fp8ext" / "kernel_manifest.json"
WIDE_TILE = "_128x256x128_"  # the row-wise fast family's tile for groups of hundreds of rows and more
FAMILIES = {"rowwise_fast": ("rowwise", "fast"), "rowwise_precise": ("rowwise", "precise"),
            "blockwise": ("blockwise", "precise")}


def swapped(kernel: str) -> bool:
    return "_swap_" in kernel


def split(kernel: str) -> bool:
    return "_split_" in kernel


def built() -> set[str]:
    """The grouped kernels of the manifest: a record's times of kernels since removed are not choices."""
    return {k["name"] for k in json.loads(MANIFEST.read_text())["grouped_kernels"]}


def family_rows(records: list[dict], family: str) -> list[dict]:
    scaling, accum = FAMILIES[family]
    names = built()
    out = []
    for rec in records:
        for r in rec["rows"]:
            # the grouped decode kernels are chosen by a bound on the rows, not by this fit
            times = {k: t for k, t in (r.get("kernels_us") or {}).items()
                     if isinstance(t, float) and not split(k) and "_gemv_" not in k and k in names}
            if r["scaling"] == scaling and r["accum"] == accum and len(times) >= 2 and r["rows"] > 0:
                out.append({**r, "times": times})
    return out


def wide(kernel: str) -> bool:
    return WIDE_TILE in kernel


def pick(row: dict, threshold: float, key: str = "rows_per_group") -> float:
    """The time of the kernel the rule picks on this row: swapped where row[key] <= threshold, else the 128 x 128
    tile."""
    want_swap = row[key] <= threshold
    return min(t for k, t in row["times"].items() if AMONG[pick](k) and swapped(k) == want_swap)


def pick_wide(row: dict, threshold: float, key: str = "rows_per_group") -> float:
    """Above the swap limit: the 128 x 128 tile where row[key] <= threshold, the wide tile above it."""
    return min(t for k, t in row["times"].items() if AMONG[pick_wide](k) and wide(k) == (row[key] > threshold))


AMONG = {pick: lambda k: not wide(k), pick_wide: lambda k: not swapped(k)}  # the kernels each rule chooses among


def score(rows: list[dict], threshold: float, key: str = "rows_per_group", rule=pick) -> tuple[float, float]:
    """(geomean, worst) over the rows of the pick's time / the fastest of the kernels the rule chooses among."""
    ratios = [rule(r, threshold, key) / min(t for k, t in r["times"].items() if AMONG[rule](k)) for r in rows]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), max(ratios)


def fit(rows: list[dict], key: str = "rows_per_group", rule=pick) -> float:
    values = sorted({r[key] for r in rows})
    candidates = [0.0] + [(x + y) / 2 for x, y in zip(values, values[1:])] + [values[-1] + 1.0]
    return min(candidates, key=lambda t: (score(rows, t, key, rule)[0], t))


def report(family: str, rows: list[dict], key: str = "rows_per_group", what: str = "T", rule=pick) -> float:
    t = fit(rows, key, rule)
    g, worst = score(rows, t, key, rule)
    print(f"{family}: {len(rows)} rows, {what} = {t:g} ({key}): picked/fastest geomean {g:.4f}, worst {worst:.3f}")
    for model in sorted({r["model"] for r in rows}):
        rest = [r for r in rows if r["model"] != model]
        out = [r for r in rows if r["model"] == model]
        if rest:
            t_out = fit(rest, key, rule)
            g_out, w_out = score(out, t_out, key, rule)
            print(f"  leaving out {model}: {what} = {t_out:g}, on it {g_out:.4f} (worst {w_out:.3f})")
    return t


def judge(records: list[dict]) -> None:
    for rec in records:
        for key, name in (("torch_grouped_us", "torch._scaled_grouped_mm"), ("torch_loop_us", "torch loop")):
            for family, (scaling, accum) in FAMILIES.items():
                rows = [r for r in rec["rows"] if r["scaling"] == scaling and r["accum"] == accum
                        and isinstance(r.get(key), float) and isinstance(r.get("fp8ext_us"), float)]
                if rows:
                    ratios = [r[key] / r["fp8ext_us"] for r in rows]
                    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
                    print(f"judged, {family} vs {name}: {len(rows)} rows, geomean {g:.3f}, worst {min(ratios):.3f}")


def write(thresholds: dict[str, float], splits: dict[str, float], narrow: dict[str, float]) -> None:
    lines = ["// Generated by tools/fit_grouped_dispatch.py from grouped bench records of the tuning models: a call",
             "// whose groups average at most kSwapMaxRowsPerGroup rows runs the swapped 32-token tile, and its split",
             "// kernel if it has more rows in all than kSplitMaxGroupRows: groups of more rows than that on the large",
             "// tile. Above the swap limit, a family with a 128 x 256 tile runs the 128 x 128 tile up to",
             "// kNarrowMaxRowsPerGroup rows per group and the 128 x 256 tile beyond. Do not edit by hand."]
    for family, t in thresholds.items():
        lines.append(f"constexpr double kSwapMaxRowsPerGroup_{family} = {t:g};")
    for family, s in splits.items():
        lines.append(f"constexpr int64_t kSplitMaxGroupRows_{family} = {math.floor(s)};")
    for family, w in narrow.items():
        lines.append(f"constexpr double kNarrowMaxRowsPerGroup_{family} = {w:g};")
    INC.write_text("\n".join(lines) + "\n")
    print(f"wrote {INC}")


def compiled() -> dict[str, dict[str, float]]:
    """The limits in the compiled-in include: {"Swap": {family: T}, "Split": {...}, "Narrow": {...}}."""
    out: dict[str, dict[str, float]] = {"Swap": {}, "Split": {}, "Narrow": {}}
    for kind, family, value in re.findall(r"k(Swap|Split|Narrow)Max\w*?_(\w+) = ([0-9.]+);", INC.read_text()):
        out[kind][family] = float(value)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="*", help="grouped bench records run with --all-kernels on the tuning models "
                   "(none: keep the compiled-in swap and split limits)")
    p.add_argument("--write", action="store_true", help=f"write the thresholds to {INC.name}")
    p.add_argument("--one-expert", nargs="*", default=[],
                   help="more records of tuning models whose one-expert rows fit the split limit S only")
    p.add_argument("--wide", nargs="*", default=[],
                   help="more records of tuning models whose rows above the swap limit fit W only")
    p.add_argument("--judge", nargs="*", default=[], help="records of other models, scored, never fitted on")
    args = p.parse_args()
    records = [json.loads(Path(f).read_text()) for f in args.records]
    more = [json.loads(Path(f).read_text()) for f in args.one_expert]
    wider = [json.loads(Path(f).read_text()) for f in args.wide]
    kept = compiled()
    thresholds, splits, narrow = {}, {}, {}
    for family in FAMILIES:
        if records:
            rows = family_rows(records, family)
            one = [r for r in rows + family_rows(more, family) if r["routing"] == "one"]
            if not rows or not one:
                print(f"{family}: no rows with every kernel timed" + ("" if rows else ", none routed to one expert"))
                return 1
            thresholds[family] = report(family, rows)
            splits[family] = report(family + " (one expert)", one, key="largest_group", what="S")
        else:
            rows = []
            thresholds[family], splits[family] = kept["Swap"][family], kept["Split"][family]
        above = [r for r in rows + family_rows(wider, family)
                 if r["rows_per_group"] > thresholds[family] and any(map(wide, r["times"]))]
        if above:
            narrow[family] = report(family + " (128 x 256 tile)", above, what="W", rule=pick_wide)
        elif family in kept["Narrow"]:
            narrow[family] = kept["Narrow"][family]
    judge([json.loads(Path(f).read_text()) for f in args.judge])
    if args.write:
        write(thresholds, splits, narrow)
    return 0


if __name__ == "__main__":
    sys.exit(main())
