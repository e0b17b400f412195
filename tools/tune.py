#!/usr/bin/env python3
"""Calibrate the dispatch cost model (csrc/sm90/dispatch/cost_model.h): measure on the tuning shapes, fit, write.

On an H100/H200 with fp8ext built (every kernel):
    python tools/tune.py --calibrate --out bench/tuning/h200-<date>-calibration-<commit>.json
times every built bf16 kernel that the cost model offers for each row of the zoo's tuning part and the llama grid
(fast accumulation, which every bf16 kernel serves; a kernel's time does not depend on what the call asked for),
each with the scheduler options the model chooses for the call, and torch._scaled_mm row-wise (fast and precise),
on the same tensors, timed by fp8ext.bench's Timer (L2 flushed before every timing, the host held out of it),
in interleaved turns. Beside each time it records the model's terms for that
kernel (fp8ext's _cost_terms), so that the fit needs no GPU and no build.

Anywhere (numpy and scipy):
    python tools/tune.py --fit bench/tuning/<calibration>.json [more.json ...] --write
fits c0..c3 of every kernel with enough rows (and of torch's row-wise path) by non-negative least squares on the
relative error of predicted against measured time, and writes csrc/sm90/dispatch/cost_model_coeffs.inc; --report prints, per weight left out of
the fit in turn, how far the model's pick is from the fastest measured kernel (leave-one-weight-out).

Only the zoo's tuning part and the llama grid are ever measured here: the held-out part is the benchmark's
(python -m fp8ext.bench --suite zoo), and tests/test_zoo.py checks that no fitted row is held out.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COEFFS = ROOT / "csrc" / "sm90" / "dispatch" / "cost_model_coeffs.inc"
if importlib.util.find_spec("fp8ext") is None:  # run from a source tree without an installed fp8ext
    sys.path.append(str(ROOT / "python"))

TORCH = "torch._scaled_mm"
MIN_ROWS = 6  # a kernel measured on fewer rows keeps its twin's or the default coefficients
PREFILTER = 4.0  # only kernels the model predicts within this factor of its best are timed
SLOW_CUTOFF = 3.0  # a candidate slower than this times the row's fastest first sample is timed no further


# ---- measuring (GPU) -----------------------------------------------------------------------------------------

def calibration_rows(include_llama: bool = True) -> list[dict]:
    """The zoo's tuning part, then the llama grid (M = 1..16384 on the 12 llama weights), in a fixed shuffled
    order so that a run cut short by its deadline still covers every kind of shape."""
    from fp8ext.zoo import llama_rows, zoo_rows

    rows = [dict(r, source="zoo") for r in zoo_rows("tune")]
    if include_llama:
        rows += llama_rows("tune", source="llama")
    random.Random(0).shuffle(rows)
    return rows


def measure_row(timer, row: dict, rounds: int) -> dict:
    """Every candidate of one row: a first sample each (after an untimed call), then timer.calls samples in `rounds`
    interleaved turns for those within SLOW_CUTOFF of the fastest first sample (torch's two peers always); the
    timer is fp8ext.bench's (L2 flushed before every timing, the host held out of it)."""
    import torch

    import fp8ext
    from fp8ext.bench import make_operands
    from fp8ext.bench.timing import median

    M, N, K = row["M"], row["N"], row["K"]
    a, b, sa, sb, _, _ = make_operands(M, N, K)
    ranking = fp8ext.selected_kernel(M, N, K, torch.bfloat16, True, explain=True)["ranking"]
    # Kernels the (uncalibrated or calibrated) model puts beyond PREFILTER x its best are not worth the device
    # time: a 64x16 swapped tile at M = 16384 on a large weight runs for a second.
    floor = min((r["predicted_us"] for r in ranking), default=0.0)
    choices = [r["kernel"] for r in ranking if r["predicted_us"] <= PREFILTER * floor]

    def call(name):
        if name.startswith(TORCH):
            fast = name.endswith(":fast")
            return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
        return lambda: fp8ext.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)

    def forced(name):
        return fp8ext.force_kernel(None if name.startswith(TORCH) else name)

    peers = [f"{TORCH}:fast", f"{TORCH}:precise"]
    samples = {}
    for name in choices + peers:
        with forced(name):
            samples[name] = timer.samples(call(name), calls=1)
    fastest = min(samples[c][0] for c in choices) if choices else math.inf
    timed = [c for c in choices if samples[c][0] <= SLOW_CUTOFF * fastest] + peers
    more = timer.interleaved_samples({name: call(name) for name in timed}, rounds, around=forced)
    for name, xs in more.items():
        samples[name] += xs
    out = dict(row)
    out["times"] = {c: median(samples[c]) for c in choices}
    out["samples"] = {c: len(samples[c]) for c in choices}
    out["terms"] = {c: list(torch.ops.fp8ext._cost_terms(c, M, N, K, torch.bfloat16)) for c in choices}
    out["torch_rowwise_us"] = {"fast": median(samples[peers[0]]), "precise": median(samples[peers[1]])}
    out["torch_terms"] = list(torch.ops.fp8ext._cost_terms(TORCH, M, N, K, torch.bfloat16))
    del a, b, sa, sb
    return out


def calibrate(out_path: Path, deadline: float | None, include_llama: bool) -> dict:
    import torch

    import fp8ext
    from fp8ext.bench import run_record
    from fp8ext.bench.timing import TIMER_METHOD, Timer

    rounds, reps = 2, 3
    timer = Timer(warmup_ms=0, calls=rounds * reps)  # samples a candidate, not a time budget
    rows = calibration_rows(include_llama)
    result = {**run_record(), "kind": "cost-model calibration", "kernels": fp8ext.kernel_names(),
              "method": "per row: every kernel the cost model offers (fast accumulation call, bf16 out) with the "
                        "model's scheduler options, and torch._scaled_mm row-wise fast and precise; "
                        f"{TIMER_METHOD}; warm-up + 1 sample each, then {rounds} interleaved turns of {reps} "
                        f"samples for those within {SLOW_CUTOFF}x of the fastest first sample; median",
              "complete": False, "rows": []}
    start = time.time()
    for i, row in enumerate(rows):
        if deadline is not None and time.time() > deadline:
            print(f"deadline reached after {i} of {len(rows)} rows; the JSON holds what was measured")
            break
        r = measure_row(timer, row, rounds)
        result["rows"].append(r)
        best = min(r["times"], key=r["times"].get)
        print(f"[{i + 1}/{len(rows)} {time.time() - start:.0f}s] {r['M']}x{r['N']}x{r['K']}: {len(r['times'])} "
              f"kernels, best {best} {r['times'][best]:.1f} us, torch {r['torch_rowwise_us']['fast']:.1f} us",
              flush=True)
        if i % 20 == 19:
            out_path.write_text(json.dumps(result) + "\n")
    result["complete"] = len(result["rows"]) == len(rows)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result) + "\n")
    torch.cuda.synchronize()
    return result


# ---- fitting (anywhere) --------------------------------------------------------------------------------------

def predict(c, terms) -> float:
    """The formula of cost_model.h: c0 + c1 * f1 + c2 * f2 + c3 * f3."""
    return c[0] + c[1] * terms[0] + c[2] * terms[1] + c[3] * terms[2]


def _fit_one(points: list[tuple[list[float], float]]) -> list[float]:
    """c0..c3 >= 0 minimising the squared relative error of predicted against measured time (non-negative least
    squares on the rows scaled by 1 / measured)."""
    import numpy as np
    from scipy.optimize import nnls

    t = np.array([p[1] for p in points], dtype=float)
    x = np.array([[1.0, *p[0][:3]] for p in points], dtype=float) / t[:, None]
    c, _ = nnls(x, np.ones_like(t))
    return [float(v) for v in c]


def points_by_kernel(rows: list[dict]) -> dict[str, list]:
    """{kernel name (no options): [(terms, measured us), ...]} plus torch_rowwise_fast / torch_rowwise_precise."""
    pts: dict[str, list] = {}
    for r in rows:
        for choice, us in r["times"].items():
            pts.setdefault(choice.split("@")[0], []).append((r["terms"][choice], us))
        for accum in ("fast", "precise"):
            pts.setdefault(f"torch_rowwise_{accum}", []).append((r["torch_terms"], r["torch_rowwise_us"][accum]))
    return pts


def fit(rows: list[dict]) -> dict[str, list[float]]:
    return {name: _fit_one(p) for name, p in sorted(points_by_kernel(rows).items()) if len(p) >= MIN_ROWS}


def load_rows(paths: list[Path]) -> list[dict]:
    from fp8ext.zoo import zoo_rows

    judges = {(r["N"], r["K"]) for r in zoo_rows("heldout") + zoo_rows("fresh")}
    rows = []
    for p in paths:
        for r in json.loads(p.read_text())["rows"]:
            if (r["N"], r["K"]) in judges:
                raise SystemExit(f"{p}: row {r['M']}x{r['N']}x{r['K']} is a held-out or fresh weight; calibration "
                                 "may not read it")
            rows.append(r)
    return rows


def model_pick(coeffs: dict, row: dict, fast: bool, twin_of) -> str | None:
    """What cost_model.cpp would pick among the row's measured kernels (precise calls: precise kernels only;
    tile ratio over 1.10 last; a kernel without coefficients: its twin's, else skipped here)."""
    from fp8ext.kernels import kernel_traits

    best, key_best = None, None
    for choice, terms in row["terms"].items():
        name = choice.split("@")[0]
        if not fast and kernel_traits(name)["accum"] != "precise":
            continue
        c = coeffs.get(name) or coeffs.get(twin_of(name) or "")
        if c is None:
            continue
        key = (terms[4] / max(terms[3], 1) > 1.10, predict(c, terms))
        if key_best is None or key < key_best:
            best, key_best = choice, key
    return best


def report(rows: list[dict]) -> dict:
    """Leave-one-weight-out: for each weight, fit without its rows and score the model's picks on them."""
    from fp8ext.kernels import kernel_traits

    weights = sorted({r["weight"] for r in rows})
    regrets = {True: [], False: []}
    vs_torch = {True: [], False: []}
    backstop_rows = []  # (fast, measured pick, predicted pick, measured torch, predicted torch)
    for w in weights:
        coeffs = fit([r for r in rows if r["weight"] != w])
        for r in (r for r in rows if r["weight"] == w):
            for fast in (True, False):
                mine = {c: t for c, t in r["times"].items()
                        if fast or kernel_traits(c)["accum"] == "precise"}
                if not mine:
                    continue
                pick = model_pick(coeffs, r, fast, lambda n: kernel_traits(n)["twin"])
                if pick is None:
                    continue
                best = min(mine.values())
                regrets[fast].append(mine[pick] / best)
                accum = "fast" if fast else "precise"
                vs_torch[fast].append(r["torch_rowwise_us"][accum] / mine[pick])
                name = pick.split("@")[0]
                c, tc = coeffs.get(name) or coeffs[kernel_traits(name)["twin"]], coeffs.get(f"torch_rowwise_{accum}")
                if tc is not None:
                    backstop_rows.append((fast, mine[pick], predict(c, r["terms"][pick]), r["torch_rowwise_us"][accum],
                                          predict(tc, r["torch_terms"])))
    out = {}
    for fast in (True, False):
        tag = "fast" if fast else "precise"
        xs = regrets[fast]
        out[tag] = {"rows": len(xs), "geomean pick/best": math.exp(sum(map(math.log, xs)) / len(xs)),
                    "within 3%": sum(x <= 1.03 for x in xs) / len(xs), "worst": max(xs),
                    "geomean torch/pick": math.exp(sum(map(math.log, vs_torch[fast])) / len(xs))}
    out["backstop"] = score_backstop(backstop_rows)
    return out


def score_backstop(rows: list[tuple]) -> dict:
    """The default path (dispatch.h: the model's pick where it is predicted at least `advantage` faster than torch,
    else torch row-wise) for a few advantages: geomean torch / default and the calls below 0.97x of torch."""
    out = {}
    for advantage in (-0.03, 0.0, 0.03, 0.06, 0.10):
        for fast in (True, False):
            ratios = [torch_us / (torch_us if pick_pred > torch_pred * (1 - advantage) else pick_us)
                      for f, pick_us, pick_pred, torch_us, torch_pred in rows if f == fast]
            if ratios:
                out[f"{'fast' if fast else 'precise'} advantage {advantage:+.2f}"] = {
                    "geomean torch/default": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                    "below 0.97": sum(x < 0.97 for x in ratios), "rows": len(ratios)}
    return out


def built_only(coeffs: dict[str, list[float]]) -> dict[str, list[float]]:
    """The rows of kernels the manifest still builds, and torch's: a calibration file outlives kernels dropped since,
    and cost_model.cpp looks rows up by name, so a stale row would only mislead."""
    built = {k["name"] for k in json.loads((ROOT / "python" / "fp8ext" / "kernel_manifest.json").read_text())["kernels"]}
    return {name: c for name, c in coeffs.items() if name in built or name.startswith("torch_rowwise_")}


def write_coefficients(coeffs: dict[str, list[float]], sources: list[Path]) -> None:
    names = " + ".join(str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else p.name
                       for p in sources)
    lines = [f"// Generated by tools/tune.py --fit {names} --write: c0..c3 of the cost model",
             "// (cost_model.h), fitted on the zoo's tuning part and the llama grid. {name, {c0, c1, c2, c3}}"]
    for name, c in sorted(coeffs.items()):
        lines.append(f'{{"{name}", {{{c[0]:.6g}, {c[1]:.6g}, {c[2]:.6g}, {c[3]:.6g}}}}},')
    COEFFS.write_text("\n".join(lines) + "\n")
    print(f"wrote {COEFFS}: {len(coeffs)} rows")


def coefficient_sources(path: Path = COEFFS) -> list[str]:
    """The calibration files the committed coefficients were fitted on (the .inc's first line)."""
    first = path.read_text().splitlines()[0] if path.exists() else ""
    if "--fit " not in first:
        return []
    return first.split("--fit ", 1)[1].split(" --write")[0].split(" + ")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calibrate", action="store_true", help="measure on this GPU (needs every kernel built)")
    p.add_argument("--out", type=Path, help="with --calibrate: the JSON to write")
    p.add_argument("--no-llama", action="store_true", help="with --calibrate: the zoo's tuning part only")
    p.add_argument("--deadline", type=float, help="with --calibrate: stop measuring at this Unix time")
    p.add_argument("--fit", type=Path, nargs="+", help="calibration JSON files to fit on")
    p.add_argument("--write", action="store_true", help="with --fit: write csrc/sm90/dispatch/cost_model_coeffs.inc")
    p.add_argument("--report", action="store_true", help="with --fit: leave-one-weight-out scores")
    p.add_argument("--sources", action="store_true", help="print the files the committed coefficients came from")
    args = p.parse_args()
    if args.sources:
        print("\n".join(coefficient_sources()))
        return 0
    if args.calibrate:
        if args.out is None:
            p.error("--calibrate needs --out")
        calibrate(args.out, args.deadline, not args.no_llama)
        return 0
    if args.fit:
        rows = load_rows(args.fit)
        if args.report:
            print(json.dumps(report(rows), indent=1))
        if args.write:
            write_coefficients(built_only(fit(rows)), args.fit)
        return 0
    p.print_help()
    return 1


if __name__ == "__main__":
    sys.exit(main())
