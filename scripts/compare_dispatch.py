"""The dispatch with and without the cost model's local correction (csrc/sm90/residual_correction.h), timed side by
side on rows that nothing which picks kernels has read: the zoo's held-out part.

    python scripts/compare_dispatch.py --json out.json                 # eager, L2 flushed, against torch too
    python scripts/compare_dispatch.py --chain --m 1,2,4,8,16,32 --json out.json   # decode steps in CUDA graphs

The corrected dispatch is what fp8ext runs. The formula-only one is rebuilt from the same ranking
(selected_kernel(explain=True) gives each kernel's formula time, line_us): the kernel with the least formula time
(padded-heavy tiles last), and torch's row-wise path where that kernel is not predicted at least `--old-advantage`
(the value dispatch.h had with the formula alone) faster than torch's formula. Where the two agree the row is
not timed again (ratio 1); where they differ, both and torch._scaled_mm run on the same tensors in interleaved
turns (eager: L2 flushed, medians), or both as chains of decode steps in a CUDA graph (--chain: the layer time of
scripts/decode_chain.py, fp8ext's kernels only, as the graph's capture picks them).
"""
import argparse
import json
import sys

import torch

import fp8ext
from fp8ext.bench.common import backends, geomean, make_operands, suite_record
from fp8ext.bench.timing import Timer
from fp8ext.zoo import zoo_rows

TORCH = "torch._scaled_mm"
GROUPS = (("M<=128", lambda m: m <= 128), ("128<M<1024", lambda m: 128 < m < 1024), ("M>=1024", lambda m: m >= 1024),
          ("all", lambda m: True))


def formula_only(M, N, K, fast, capturing, advantage):
    """(kernel, default path) of the dispatch without the correction; default is TORCH where the backstop takes it."""
    e = fp8ext.selected_kernel(M, N, K, torch.bfloat16, fast, capturing=capturing, explain=True)
    best = min(e["ranking"], key=lambda r: (r["tile_ratio"] > 1.10, r["line_us"], r["kernel"]))
    to_torch = 0 < e["torch_line_us"] and best["line_us"] > e["torch_line_us"] * (1 - advantage)
    return best["kernel"], TORCH if to_torch else best["kernel"]


def corrected(M, N, K, fast, capturing):
    with backends("fp8ext"):
        kernel = fp8ext.selected_kernel(M, N, K, torch.bfloat16, fast, capturing=capturing)
    with backends("fp8ext,torch"):
        default = fp8ext.selected_kernel(M, N, K, torch.bfloat16, fast, capturing=capturing)
    return kernel, default


def eager_row(timer, M, N, K, fast, old, new, rounds):
    a, b, sa, sb, _, _ = make_operands(M, N, K)
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)

    def call(name):
        if name == TORCH:
            return lambda: torch._scaled_mm(a, b, sa, sb, **kw)
        return lambda: fp8ext.scaled_mm(a, b, sa, sb, **kw)

    names = list(dict.fromkeys([old, new, TORCH]))
    around = lambda n: fp8ext.force_kernel(n) if n != TORCH else backends("fp8ext")  # noqa: E731
    times = timer.interleaved({n: call(n) for n in names}, rounds, around=around)
    del a, b, sa, sb
    return times


def summarize(rows, key_old, key_new, torch_key=None):
    out = {}
    for accum in ("fast", "precise"):
        for gname, pred in GROUPS:
            sel = [r for r in rows if r["accum"] == accum and pred(r["M"])]
            if not sel:
                continue
            ratios = [r[key_old] / r[key_new] if r[key_old] is not None else 1.0 for r in sel]
            entry = {"rows": len(sel), "differ": sum(r[key_old] is not None for r in sel),
                     "geomean old/new": geomean(ratios), "worst": min(ratios), "best": max(ratios),
                     "new slower by > 3%": sum(x < 0.97 for x in ratios)}
            if torch_key is not None:
                timed = [r for r in sel if r[key_old] is not None]
                if timed:
                    entry["differing rows: geomean torch/old"] = geomean(r[torch_key] / r[key_old] for r in timed)
                    entry["differing rows: geomean torch/new"] = geomean(r[torch_key] / r[key_new] for r in timed)
            out[f"{accum} {gname}"] = entry
    return out


def run_eager(args):
    timer = Timer(rep_ms=args.rep_ms)
    rows = []
    for r in zoo_rows("heldout"):
        for fast in (True, False):
            M, N, K = r["M"], r["N"], r["K"]
            _, old = formula_only(M, N, K, fast, False, args.old_advantage)
            _, new = corrected(M, N, K, fast, False)
            row = {"M": M, "N": N, "K": K, "weight": r["weight"], "accum": "fast" if fast else "precise",
                   "old": old, "new": new, "old_us": None, "new_us": None, "torch_us": None}
            if old != new:
                t = eager_row(timer, M, N, K, fast, old, new, args.rounds)
                row.update(old_us=t[old], new_us=t[new], torch_us=t[TORCH])
                print(json.dumps(row), flush=True)
            rows.append(row)
    return {"method": f"eager, L2 flushed (triton do_bench), {args.rounds} interleaved turns of {args.rep_ms} ms; "
                      "rows where the two dispatches agree are not timed (ratio 1)",
            "old_advantage": args.old_advantage, "summary": summarize(rows, "old_us", "new_us", "torch_us"),
            "rows": rows}


def run_chain(args):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from decode_chain import chain_us

    weights = sorted({(r["N"], r["K"]) for r in zoo_rows("heldout")})
    rows = []
    for N, K in weights:
        for M in (int(m) for m in args.m.split(",")):
            old, _ = formula_only(M, N, K, True, True, args.old_advantage)
            new, _ = corrected(M, N, K, True, True)
            row = {"M": M, "N": N, "K": K, "accum": "fast", "old": old, "new": new, "old_us": None, "new_us": None}
            if old != new:
                torch.manual_seed(M * 1000003 + N * 7 + K)
                row["old_us"] = chain_us(M, N, K, old, args.chain)
                row["new_us"] = chain_us(M, N, K, new, args.chain)
                print(json.dumps(row), flush=True)
                torch.cuda.empty_cache()
            rows.append(row)
    return {"method": f"decode steps (quantize_rowwise + scaled_mm, kernel forced) captured as a chain of {args.chain} "
                      "layers with their own weights in one CUDA graph; us per layer, median of replays",
            "old_advantage": args.old_advantage, "summary": summarize(rows, "old_us", "new_us"), "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chain", action="store_true", help="decode steps in CUDA graphs instead of eager calls")
    p.add_argument("--m", default="1,2,4,8,16,32", help="with --chain: the M of the decode steps")
    p.add_argument("--chain-length", dest="chain", type=int, default=16)
    p.add_argument("--old-advantage", type=float, default=0.06)
    p.add_argument("--rep-ms", type=float, default=24.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args(argv)
    body = run_chain(args) if args.chain else run_eager(args)
    print(json.dumps(body["summary"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**suite_record("compare_dispatch_chain" if args.chain else "compare_dispatch"), **body}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
