#!/usr/bin/env python3
"""Measure every bf16 kernel of the family on the llama shape grid and derive the dispatch table from it.

On the H200 (after building fp8ext):
    python scripts/tune.py --out bench/tuning/h200-<date>.json
Then, on the H200, the tile scheduler's walk (raster M/N x band 1/2/4/8, dispatch.h) for the two best kernels
of every shape with M >= 256 in that run:
    python scripts/tune.py --sweep-from bench/tuning/h200-<date>.json --out bench/tuning/h200-<date>-sched.json
New kernels against the table's own picks (the base run with its sweeps merged), interleaved, on the H200:
    python scripts/tune.py --sweep-from <run.json> --sweep <sched.json> ... --head-to-head --extra k1,k2 \
        [--accum precise] --min-m 1 --out bench/tuning/h200-<date>-<what>-head-to-head-<commit>.json
Here or anywhere, from recorded runs (the sweep's rows replace the base run's rows they re-measured):
    python scripts/tune.py --from-json bench/tuning/h200-<date>.json [--sweep <sched.json>] --write-table

The raw measurements (every kernel's median time per shape, the torch peers beside them) are kept in the repo;
--write-table turns them into csrc/sm90/heuristic_table.inc: for each accumulation mode, M bucket and weight
shape, the fastest kernel and the fastest one without a workspace (not stream-K), which CUDA-graph capture
uses; kernels measured once but no longer built are passed over. A head to head's row keeps its incumbent
pick unless a new kernel beats it by more than KEEP_MARGIN (1%). dispatch.cpp reads that table (nearest
measured weight shape, smallest bucket >= M).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "csrc" / "sm90" / "heuristic_table.inc"
sys.path.insert(0, str(ROOT / "csrc" / "sm90"))
from generate_kernels import ROWS, decode_kernel_names  # noqa: E402  (the kernel table: which names are stream-K)

# Kernels that need a global-memory workspace; dispatch passes over them during CUDA-graph capture.
WORKSPACE_KERNELS = {r.name for r in ROWS if r.schedule == "sk"}
# Every kernel the full build has: a recorded measurement of a kernel dropped since never enters the table.
BUILT_KERNELS = {r.name for r in ROWS} | decode_kernel_names()


def candidates(names: list[str], M: int, fast: bool) -> list[str]:
    """bf16 kernels worth timing at this M (swapped tiles only where M is small enough to gain from them)."""
    from fp8ext.testing import kernel_max_m

    tag = "_fast_bf16" if fast else "_precise_bf16"
    out = []
    for n in names:
        if n.startswith("gemv_"):  # decode kernels, up to the M in their name; a precise one serves both modes
            if n.endswith("_bf16") and M <= kernel_max_m(n) and (n.endswith("_precise_bf16") or fast):
                out.append(n)
            continue
        if not n.endswith(tag):
            continue
        if n.startswith("swap_"):
            mma_n = int(n.split("_")[2].split("x")[1])  # swap_<sched>_<MMA M>x<MMA N>x<K>: MMA N covers M
            if M > max(4 * mma_n, 256):
                continue
        elif M < 16 and not n.startswith("sk_"):
            continue
        out.append(n)
    return out


def time_forced(timer, names, call) -> dict[str, float]:
    """Median time of call() with each named kernel (a KernelChoice's written form) forced in turn."""
    import fp8ext

    times = {}
    for name in names:
        with fp8ext.force_kernel(name):
            times[name] = timer(call)
    return times


def report(i: int, total: int, row: dict) -> None:
    """One progress line: the row's fastest kernel against torch row-wise."""
    best = min(row["kernels"], key=row["kernels"].get)
    print(f"[{i + 1}/{total}] {row['M']}x{row['N']}x{row['K']} {'fast' if row['use_fast_accum'] else 'precise'}: "
          f"best {best} {row['kernels'][best]:.1f} us, torch row-wise {row['torch_rowwise_us']:.1f} us "
          f"({row['torch_rowwise_us'] / row['kernels'][best]:.2f}x)", flush=True)


def save(result: dict, out_path: Path, complete: bool) -> None:
    """Rewritten after every shape, so a run stopped by a time limit still leaves its measurements."""
    result["complete"] = complete
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")


def measure(out_path: Path, rep_ms: int, ms: list[int] | None, deadline: float | None = None) -> dict:
    import time

    import torch

    import fp8ext
    from fp8ext.bench import LLAMA_M, LLAMA_NK, Timer, git_commit, make_operands

    timer = Timer(rep_ms=rep_ms, warmup_ms=max(5, rep_ms // 4))
    names = fp8ext.kernel_names()
    rows = []
    # The llama M values, plus 4 and 8 so that the decode range has buckets of its own.
    grid = [(m, n, k) for n, k in LLAMA_NK for m in (ms or sorted(set(LLAMA_M) | {4, 8}))]
    result = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "method": f"do_bench median rep={rep_ms} ms, L2 flushed", "complete": False, "rows": rows}
    for i, (M, N, K) in enumerate(grid):
        if deadline is not None and time.time() > deadline:
            print(f"deadline reached after {i} of {len(grid)} shapes; the JSON holds what was measured")
            break
        a, b, sa, sb, st_a, st_b = make_operands(M, N, K)
        for fast in (True, False):
            kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
            row = {"M": M, "N": N, "K": K, "use_fast_accum": fast,
                   "kernels": time_forced(timer, candidates(names, M, fast),
                                          lambda: fp8ext.scaled_mm(a, b, sa, sb, **kw))}
            row["torch_rowwise_us"] = timer(lambda: torch._scaled_mm(a, b, sa, sb, **kw))
            row["torch_tensorwise_us"] = timer(lambda: torch._scaled_mm(a, b, st_a, st_b, **kw))
            rows.append(row)
            report(i, len(grid), row)
        del a, b, sa, sb, st_a, st_b
        save(result, out_path, i + 1 == len(grid))
    return result


SCHED_OPTIONS = [f"@{r}{w}" for r in "MN" for w in (1, 2, 4, 8)]


def row_key(r: dict) -> tuple[int, int, int, bool]:
    """A tuning or bench row's identity: (M, N, K, use_fast_accum)."""
    return r["M"], r["N"], r["K"], r["use_fast_accum"]


def parse_rows(text: str) -> set[tuple[int, int, int, bool]]:
    """'MxNxK:fast,MxNxK:precise' -> {(M, N, K, use_fast_accum)}."""
    out = set()
    for item in text.split(","):
        shape, _, accum = item.partition(":")
        if accum not in ("fast", "precise"):
            raise SystemExit(f"--rows: {item!r} does not end in :fast or :precise")
        m, n, k = (int(x) for x in shape.lower().split("x"))
        out.add((m, n, k, accum == "fast"))
    return out


def rows_below(bench: dict, ratio: float) -> set[tuple[int, int, int, bool]]:
    """The rows of a bench run where torch row-wise time / fp8ext time < ratio."""
    return {row_key(r) for r in bench["rows"] if r["torch_rowwise_us"] / r["fp8ext_us"] < ratio}


def sweep_candidates(row: dict, top: int = 2, extra: tuple[str, ...] = ()) -> list[str]:
    """The `top` fastest kernels of a base-run row, plus its fastest one without a workspace, plus those of the
    `extra` kernels (new since the base run) that candidates() would time at this row's M."""
    ranked = sorted((k for k in row["kernels"] if not k.startswith("gemv_")), key=row["kernels"].get)
    picked = ranked[:top]
    if all(k in WORKSPACE_KERNELS for k in picked):
        picked += [k for k in ranked if k not in WORKSPACE_KERNELS][:1]
    picked += [k for k in candidates(list(extra), row["M"], row["use_fast_accum"]) if k not in picked]
    return picked


def heat_up(seconds: float = 3.0) -> None:
    """Runs the tensor cores until the card sits at its power limit, so that the first shapes are not measured
    at a cold card's higher clock while the rest run throttled (scripts/clock_probe.py saw 1980 MHz cold and
    1300-1400 MHz at the 700 W limit)."""
    import time

    import torch

    import fp8ext
    from fp8ext.bench import make_operands

    a, b, sa, sb, _, _ = make_operands(8192, 8192, 8192)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(10):
            fp8ext.scaled_mm(a, b, sa, sb)
        torch.cuda.synchronize()


def incumbents(row: dict) -> list[str]:
    """What the table picks for the base row before a head to head (table_picks): its kernel, and its CUDA-graph
    kernel where that differs (the kernel needs a workspace)."""
    picks = table_picks(row)
    if picks is None:  # no table row: nothing measured in it is built
        return [min(row["kernels"], key=row["kernels"].get)]
    best, capture = picks
    return [best] if capture == best else [best, capture]


def head_to_head_choices(row: dict, extra: tuple[str, ...], built: set[str]) -> list[str]:
    """The row's incumbents, and each `extra` kernel that fits the row's M with the fastest choice's scheduler
    options (the decode kernels have none)."""
    picks = incumbents(row)
    best = picks[0]
    opts = best[best.index("@"):] if "@" in best else ""
    new = [k if k.startswith("gemv_") else k + opts
           for k in candidates(list(extra), row["M"], row["use_fast_accum"]) if k in built]
    return picks + [k for k in new if k not in picks]


def time_interleaved(timer, choices: list[str], call, peer, rounds: int = 3) -> tuple[dict[str, float], float]:
    """Median time of call() under each forced choice and of peer(), in `rounds` turns with the order rotated
    (fp8ext.bench.Timer.interleaved: the clock's wander under the power cap is shared alike)."""
    import contextlib

    import fp8ext

    peer_name = "torch row-wise"  # not a kernel name: no kernel is forced for it
    times = timer.interleaved({**{c: call for c in choices}, peer_name: peer}, rounds,
                              around=lambda n: contextlib.nullcontext() if n == peer_name else fp8ext.force_kernel(n))
    return {c: times[c] for c in choices}, times[peer_name]


def sweep(base: dict, out_path: Path, rep_ms: int, min_m: int, deadline: float | None = None,
          only: set[tuple[int, int, int, bool]] | None = None, extra: tuple[str, ...] = (),
          head_to_head: bool = False) -> dict:
    import time

    import torch

    import fp8ext
    from fp8ext.bench import Timer, git_commit, make_operands

    timer = Timer(rep_ms=rep_ms, warmup_ms=max(5, rep_ms // 4))
    built = set(fp8ext.kernel_names())
    todo = [r for r in base["rows"] if r["M"] >= min_m
            and (only is None or row_key(r) in only)]
    rows = []
    result = {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "method": f"do_bench median rep={rep_ms} ms, L2 flushed, card heated to its power limit first; "
                        + (f"head to head, interleaved in 3 turns: the best choice per row of {base.get('commit')} "
                           f"against the new kernels {list(extra)} with its scheduler options, where they fit the "
                           "row's M" if head_to_head else
                           f"scheduler options {SCHED_OPTIONS} of the 2 best kernels per row of {base.get('commit')}"
                           + (f" and of the new kernels {list(extra)} where they fit the row's M" if extra else "")),
              "complete": False, "rows": rows}
    heat_up()
    for i, base_row in enumerate(todo):
        if deadline is not None and time.time() > deadline:
            print(f"deadline reached after {i} of {len(todo)} rows; the JSON holds what was measured")
            break
        M, N, K, fast = base_row["M"], base_row["N"], base_row["K"], base_row["use_fast_accum"]
        a, b, sa, sb, _, _ = make_operands(M, N, K)
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        call = lambda: fp8ext.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        peer = lambda: torch._scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        row = {"M": M, "N": N, "K": K, "use_fast_accum": fast}
        if head_to_head:
            row["kernels"], row["torch_rowwise_us"] = time_interleaved(
                timer, head_to_head_choices(base_row, extra, built), call, peer)
            row["incumbents"] = incumbents(base_row)  # write_table keeps them unless beaten by KEEP_MARGIN
        else:
            choices = [k + opts for k in sweep_candidates(base_row, extra=extra) if k in built
                       for opts in SCHED_OPTIONS]
            row["kernels"] = time_forced(timer, choices, call)
            row["torch_rowwise_us"] = timer(peer)
        rows.append(row)
        report(i, len(todo), row)
        del a, b, sa, sb
        save(result, out_path, i + 1 == len(todo))
    return result


def merge_sweep(base: dict, sched: dict) -> dict:
    """The base run with every row that the scheduler sweep re-measured replaced by the sweep's row (one
    session's measurements per row, so the kernels within a row stay comparable)."""
    swept = {row_key(r): r for r in sched["rows"] if r["kernels"]}
    merged = dict(base)
    merged["rows"] = [swept.get(row_key(r), r) for r in base["rows"]]
    merged["commit"] = f"{base['commit']} + scheduler sweep {sched['commit']}"
    return merged


def load_merged(base_path: Path, sweep_paths: list[Path]) -> dict:
    """A recorded run with recorded sweeps merged in, in order (later sweeps win): what --write-table uses."""
    result = json.loads(Path(base_path).read_text())
    for sweep_path in sweep_paths:
        result = merge_sweep(result, json.loads(Path(sweep_path).read_text()))
    return result


# A head to head's new kernel replaces the row's incumbent only if it is faster by more than this fraction: the
# interleaved medians still wander by about 1-3% per row between runs, and a flip inside that is a coin toss
# (22 of the 41 rows that session 10's head to heads flipped gained less than 1%). Rows of older sweeps, which
# record no incumbents, take the fastest as before.
KEEP_MARGIN = 0.01


def fastest(times: dict[str, float], incumbents: list[str]) -> str:
    """The fastest of `times`, unless an incumbent among them is within KEEP_MARGIN of it: then that incumbent."""
    best = min(times, key=times.get)
    kept = [k for k in incumbents if k in times and times[k] <= times[best] * (1.0 + KEEP_MARGIN)]
    return min(kept, key=times.get) if kept else best


def table_picks(row: dict) -> tuple[str, str] | None:
    """The table's two columns for a measured row: the fastest built kernel, and the fastest built one without a
    workspace, each keeping a recorded incumbent within KEEP_MARGIN (fastest). None if no kernel without a
    workspace was measured or built."""
    times = {k: t for k, t in row["kernels"].items() if k.split("@")[0] in BUILT_KERNELS}
    no_workspace = {k: t for k, t in times.items() if k.split("@")[0] not in WORKSPACE_KERNELS}
    if not times or not no_workspace:
        return None
    kept = row.get("incumbents", [])
    return fastest(times, kept), fastest(no_workspace, kept)


def write_table(result: dict, source: str) -> None:
    lines = [f"// Generated by scripts/tune.py --write-table from {source}",
             f"// ({result['gpu']}, torch {result['torch']}, commit {result['commit']}): the fastest kernel per",
             "// accumulation mode, M bucket and weight shape, and the fastest one that needs no workspace (used",
             "// during CUDA-graph capture). {OutType, Accum, m_max, n, k, \"kernel\", \"capture kernel\"}"]
    for row in sorted(result["rows"], key=lambda r: (not r["use_fast_accum"], r["N"] * r["K"], r["M"])):
        picks = table_picks(row)
        if picks is None:
            continue
        best, capture = picks
        accum = "kFast" if row["use_fast_accum"] else "kPrecise"
        lines.append(f'{{OutType::kBF16, Accum::{accum}, {row["M"]}, {row["N"]}, {row["K"]}, "{best}", '
                     f'"{capture}"}},')
    TABLE.write_text("\n".join(lines) + "\n")
    print(f"wrote {TABLE.relative_to(ROOT)} ({len(lines) - 4} rows)")


def table_sources(table: Path = TABLE) -> list[str]:
    """The recorded runs a table was written from, as its first line names them (write_table): the base run,
    then the merged sweeps in order, as paths relative to the repository."""
    header = Path(table).read_text().splitlines()[0]
    return header.split(" from ", 1)[1].split(" + ")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="measure on this GPU and write the raw JSON here")
    p.add_argument("--from-json", type=Path, help="use a recorded run instead of measuring")
    p.add_argument("--write-table", action="store_true", help="regenerate csrc/sm90/heuristic_table.inc")
    p.add_argument("--rep-ms", type=int, default=20)
    p.add_argument("--ms", help="comma-separated M values (default: the llama grid)")
    p.add_argument("--deadline", type=float, help="stop measuring at this Unix time (seconds)")
    p.add_argument("--sweep-from", type=Path, help="with --out: sweep the scheduler options on this run's best")
    p.add_argument("--sweep", type=Path, action="append",
                   help="with --from-json or --sweep-from: a recorded scheduler sweep to merge into the base run "
                        "(repeatable; later ones win)")
    p.add_argument("--min-m", type=int, default=256, help="the sweep covers rows with M >= this")
    p.add_argument("--rows", help="sweep only these rows: MxNxK:fast|precise[,...]")
    p.add_argument("--below", type=Path, help="sweep only the rows where this bench JSON (python -m fp8ext.bench "
                                              "--json) has fp8ext slower than --below-ratio x torch row-wise")
    p.add_argument("--below-ratio", type=float, default=0.97)
    p.add_argument("--with-m", help="also sweep every row with M in this comma-separated list (a union with the "
                                    "rows --rows/--below pick)")
    p.add_argument("--head-to-head", action="store_true",
                   help="with --sweep-from and --extra: time only each row's best choice against the extra kernels "
                        "with the same scheduler options, interleaved (a new kernel against the table's pick)")
    p.add_argument("--accum", choices=("fast", "precise"), help="with --sweep-from: only rows of this mode")
    p.add_argument("--table-sources", action="store_true",
                   help="print the recorded runs the committed table was written from, one per line, and exit")
    p.add_argument("--extra", default="", help="comma-separated kernels new since the base run, timed in the "
                                               "sweep wherever candidates() would time them at the row's M")
    args = p.parse_args()
    if args.table_sources:
        print("\n".join(table_sources()))
        return 0
    if args.sweep_from:
        if not args.out:
            p.error("--sweep-from needs --out")
        only = None
        if args.rows:
            only = parse_rows(args.rows)
        if args.below:
            below = rows_below(json.loads(args.below.read_text()), args.below_ratio)
            only = below if only is None else only & below
        # The base run with its recorded sweeps merged in: the table's own measurements.
        base = load_merged(args.sweep_from, args.sweep or [])
        if args.accum:
            base["rows"] = [r for r in base["rows"] if r["use_fast_accum"] == (args.accum == "fast")]
        if args.with_m:
            ms = {int(m) for m in args.with_m.split(",")}
            only = (only or set()) | {row_key(r) for r in base["rows"] if r["M"] in ms}
        extra = tuple(k for k in args.extra.split(",") if k)
        if args.head_to_head and not extra:
            p.error("--head-to-head needs --extra")
        sweep(base, args.out, args.rep_ms, args.min_m, args.deadline, only, extra, args.head_to_head)
        return 0
    if args.from_json:
        result = load_merged(args.from_json, args.sweep or [])
        source = " + ".join(str(x) for x in [args.from_json, *(args.sweep or [])])
    elif args.out:
        result = measure(args.out, args.rep_ms, [int(m) for m in args.ms.split(",")] if args.ms else None,
                         args.deadline)
        source = args.out
    else:
        p.error("give --out (measure) or --from-json")
    if args.write_table:
        def rel(path) -> str:
            path = Path(path).resolve()
            return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        write_table(result, " + ".join(rel(x) for x in str(source).split(" + ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
