"""compile: fp8ext.compile measured. Per shape, torch._scaled_mm compiled under max-autotune with and without the
switch, and eager fp8ext; then Llama-3-8B-shaped models compiled with and without it (bench/compile_models.py).

Shape rows: the 8B projections of the Llama grid at M = 1, 16, 128, 1024 and 4096, and every tenth row of the zoo's
held-out split, fast accumulation. For each, f(a, w, sa, sb) = torch._scaled_mm(a, w.t(), sa, sb, out_dtype=bf16,
use_fast_accum=True) is compiled (mode max-autotune-no-cudagraphs, static shapes) with the switch and then without it;
the second compile reads its candidates' times from Inductor's autotune cache, so both choose on one set of
measurements (its compile_without_s is therefore not a whole compile). `chosen` is what the graph with the switch
runs (fp8ext's kernel, "aten", or a Triton template). The two compiled functions and eager fp8ext.scaled_mm are
then timed on the same tensors: the Timer (L2 flushed before each call, host held out, medians of interleaved
turns).
"""
from __future__ import annotations

import os
import time
import types
from typing import Optional

import torch

from ... import compile as fp8ext_compile
from ... import kernels, ops
from ...zoo import LLAMA3_LAYERS, zoo_rows
from ..common import geomean, make_operands
from ..compile_models import phase_deltas, phase_seconds
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

SHAPE_M = (1, 4096, 16, 1024, 128)  # small and large M in turns
METHOD = __doc__.split("\n\n")[1].replace("\n", " ") + " " + TIMER_METHOD
ZOO_EVERY = 10
MODE = "max-autotune-no-cudagraphs"


def shapes() -> list[dict]:
    """The Llama rows and the zoo's in turns, so that a --shape-budget-s that runs out leaves out some of each."""
    llama = [{"M": m, "N": n, "K": k, "split": "llama"} for m in SHAPE_M for n, k in LLAMA3_LAYERS["8b"].values()]
    zoo = [{"M": r["M"], "N": r["N"], "K": r["K"], "split": "heldout"} for r in zoo_rows("heldout")[::ZOO_EVERY]]
    rows = []
    for i in range(max(len(llama), len(zoo))):
        rows += llama[i:i + 1] + zoo[i:i + 1]
    return rows


def _scaled_mm(a, w, sa, sb):
    return torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def compiled(a, w, sa, sb, switch: bool) -> tuple:
    """f compiled afresh under MODE with the switch on or off: (the compiled function, seconds to compile and run it
    once, what it runs). Each compile gets a code object of its own: Dynamo keeps its graphs per code object and does
    not guard on the switch, so two compiled wrappers of one function would both run whichever graph came last."""
    own = types.FunctionType(_scaled_mm.__code__.replace(co_name=f"scaled_mm_{'with' if switch else 'without'}"),
                             _scaled_mm.__globals__)
    start = time.perf_counter()
    with fp8ext_compile.enabled() if switch else _off():
        fn = torch.compile(own, mode=MODE, dynamic=False, fullgraph=True)
        code = _code_of_first_call(fn, a, w, sa, sb)
    torch.cuda.synchronize()
    return fn, time.perf_counter() - start, fp8ext_compile.chosen(code)


def _code_of_first_call(fn, *args) -> list[str]:
    """The code Inductor generates (or loads) for fn's first call. Not torch._inductor.utils.run_and_get_code: that
    resets Dynamo first, which drops every other function's compiled graphs too; a wrapper whose graphs are dropped
    compiles again on its next call, under whatever the switch is then."""
    from unittest import mock
    from torch._inductor.graph import GraphLowering
    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        fn(*args)
    return codes


class _off:
    def __enter__(self):
        self.was = fp8ext_compile.is_enabled()
        fp8ext_compile.disable()

    def __exit__(self, *exc):
        if self.was:
            fp8ext_compile.enable()


def chosen_rows(args) -> list:
    """(index, row) of the shape rows that --no-shapes, --shape-rows and --shape-max-m leave."""
    todo = [] if args.no_shapes else list(enumerate(shapes()))
    if args.shape_rows and ":" in args.shape_rows:
        first, _, last = args.shape_rows.partition(":")
        todo = todo[int(first) if first else None:int(last) if last else None]
    elif args.shape_rows:
        wanted = {int(i) for i in args.shape_rows.split(",")}
        todo = [(i, row) for i, row in todo if i in wanted]
    return [(i, row) for i, row in todo if args.shape_max_m is None or row["M"] <= args.shape_max_m]


def shape_row(row: dict, timer: Timer, rounds: int) -> dict:
    M, N, K = row["M"], row["N"], row["K"]
    a, b, sa, sb = make_operands(M, N, K)[:4]
    w = b.t()
    torch._dynamo.reset()
    # The switch's compile first: it times every candidate, and the compile without the switch then finds its own
    # candidates' times in Inductor's autotune cache, so both choose on the same measurements.
    before = phase_seconds()
    with_fp8ext, with_s, chosen = compiled(a, w, sa, sb, switch=True)
    phases = phase_deltas(before, phase_seconds())
    without, without_s, without_chosen = compiled(a, w, sa, sb, switch=False)
    eager = lambda: ops.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)  # noqa: E731
    t = timer.interleaved({"with": lambda: with_fp8ext(a, w, sa, sb), "without": lambda: without(a, w, sa, sb),
                           "eager": eager}, rounds=rounds)
    return {**row, "accum": "fast", "compiled_with_fp8ext_us": t["with"], "compiled_without_us": t["without"],
            "eager_fp8ext_us": t["eager"], "ratio": t["without"] / t["with"], "chosen": chosen[0] if chosen else None,
            "chosen_without": without_chosen[0] if without_chosen else None,
            "compile_with_s": with_s, "compile_with_phases_s": phases, "compile_without_s": without_s,
            "eager_fp8ext_kernel": kernels.selected_kernel(M, N, K)}


def summarize_shapes(rows: list[dict]) -> dict:
    def gm(pred):
        picked = [r["ratio"] for r in rows if pred(r["M"])]
        return (geomean(picked), len(picked)) if picked else (None, 0)

    small, small_n = gm(lambda m: m <= 128)
    large, large_n = gm(lambda m: m >= 1024)
    worst = min(rows, key=lambda r: r["ratio"]) if rows else None
    return {"shapes": len(rows),
            "geomean with/without, M <= 128": small, "rows at M <= 128": small_n,
            "geomean with/without, M >= 1024": large, "rows at M >= 1024": large_n,
            "geomean with/without, all": geomean([r["ratio"] for r in rows]) if rows else None,
            "worst row": None if worst is None else f"{worst['M']}x{worst['N']}x{worst['K']}: {worst['ratio']:.3f}",
            "rows below 0.98": sum(r["ratio"] < 0.98 for r in rows),
            "fp8ext chosen": sum(bool(r["chosen"]) and r["chosen"] != "aten"
                                 and not r["chosen"].startswith("triton_") for r in rows),
            "compile s with the switch (sum; the compiles without it reuse its timings)":
                round(sum(r["compile_with_s"] for r in rows), 1)}


@register_suite("compile", help="fp8ext.compile: torch._scaled_mm compiled with and without the switch, per shape "
                                "and in Llama-3-8B-shaped models (torchao PerRow, fp8ext.convert)",
                defaults={"accum": "fast"},
                options={"--shape-budget-s": dict(type=float, default=900,
                                                   help="compile suite: seconds for the shape rows (900)"),
                         "--shape-rows": dict(default=None,
                                              help="compile suite: a slice START:END of the shape rows (in the order "
                                                   "they run), or their indices I,J,...; a record taken in parts"),
                         "--shape-max-m": dict(type=int, default=None,
                                               help="compile suite: only the shape rows of M up to this"),
                         "--no-shapes": dict(action="store_true", help="compile suite: the model section only"),
                         "--no-models": dict(action="store_true", help="compile suite: the shape rows only"),
                         "--model-layers": dict(type=int, default=32, help="compile suite: decoder layers (32)"),
                         "--model-runs": dict(default=None,
                                              help="compile suite: the model runs to take, comma-separated (default "
                                                   "all: bf16, fp8ext_fused, fp8ext_fused_no_switch, torchao_switch, "
                                                   "torchao)"),
                         "--model-budget-s": dict(type=float, default=None,
                                                  help="compile suite: seconds for the model section's compilations; "
                                                       "shapes left when they run out are not measured"),
                         "--model-shapes": dict(default="decode_b1,decode_b8,prefill_1x2048",
                                                help="compile suite: the model shapes to take, comma-separated"),
                         "--inductor-pdl": dict(action="store_true",
                                                help="compile suite: the model section's runs (every one) compile "
                                                     "with Inductor's programmatic dependent launch "
                                                     "(triton.enable_pdl)"),
                         "--gpus": dict(type=int, default=1,
                                        help="compile suite: spread the shape rows and model shapes over this many "
                                             "GPUs of the host, a process each (bench/fanout.py); 0 = all"),
                         "--fanout-deadline-s": dict(type=float, default=None,
                                                     help="compile suite with --gpus: stop the jobs still running "
                                                          "after this many seconds and record what finished")})
def compile_suite(args) -> dict:
    from ..compile_models import model_section
    if args.gpus != 1:
        return fanned_out(args)
    timer = Timer(rep_ms=args.rep_ms or 60)
    rows, left_out, start = [], [], time.time()
    for index, row in chosen_rows(args):
        if time.time() - start > args.shape_budget_s:
            left_out.append(f"{row['M']}x{row['N']}x{row['K']}")
            continue
        got = {"row": index, **shape_row(row, timer, args.rounds)}
        rows.append(got)
        if not args.quiet:
            print(f"{got['M']}x{got['N']}x{got['K']} ({got['split']}): with {got['compiled_with_fp8ext_us']:.1f} us "
                  f"({got['chosen']}), without {got['compiled_without_us']:.1f} us ({got['chosen_without']}): "
                  f"{got['ratio']:.3f}x; eager fp8ext {got['eager_fp8ext_us']:.1f} us", flush=True)
    summary = summarize_shapes(rows) if rows else {}
    if left_out:
        summary["not measured (out of --shape-budget-s)"] = ", ".join(left_out)
    import torch._inductor.config as inductor_config
    record = {"method": METHOD, "summary": summary,
              "inductor": {"compile_threads": inductor_config.compile_threads, "cpus": len(os.sched_getaffinity(0))},
              "rows": rows}
    if args.no_models:
        return record
    runs = None if args.model_runs is None else [r.strip() for r in args.model_runs.split(",")]
    return with_model(record, model_section(args.model_layers, quiet=args.quiet, runs=runs,
                                            shapes=tuple(x.strip() for x in args.model_shapes.split(",")),
                                            budget_s=args.model_budget_s, inductor_pdl=args.inductor_pdl))


ROWS_PER_JOB = 3
MODEL_RUN_GROUPS = (("bf16", "fp8ext_fused", "fp8ext_fused_no_switch"), ("torchao_switch", "torchao"))


def fanned_out(args) -> dict:
    """The suite spread over --gpus GPUs (bench/fanout.py): the shape rows ROWS_PER_JOB to a job, and the model
    section one shape and one group of MODEL_RUN_GROUPS to a job, so that every ratio the record holds divides two
    times that one process took on one GPU."""
    from ..compile_models import merge_model_parts
    from ..fanout import Job, bench_command, run_jobs, visible_gpus
    gpus = args.gpus or visible_gpus()
    common = ["--rep-ms", str(args.rep_ms), "--rounds", str(args.rounds)]
    rows = [i for i, _ in chosen_rows(args)]
    parts_of_rows = [",".join(map(str, rows[j:j + ROWS_PER_JOB])) for j in range(0, len(rows), ROWS_PER_JOB)]
    jobs = [Job(f"shape rows {part}", [*common, "--no-models", "--shape-budget-s", str(args.shape_budget_s),
                                       "--shape-rows", part], 60.0 * (part.count(",") + 1)) for part in parts_of_rows]
    wanted = None if args.model_runs is None else {r.strip() for r in args.model_runs.split(",")}
    for shape in ([] if args.no_models else [x.strip() for x in args.model_shapes.split(",")]):
        for group in MODEL_RUN_GROUPS:
            runs = [r for r in group if wanted is None or r in wanted]
            if runs:
                budget = [] if args.model_budget_s is None else ["--model-budget-s", str(args.model_budget_s)]
                jobs.append(Job(f"model {shape} {','.join(runs)}",
                                [*common, "--no-shapes", "--model-layers", str(args.model_layers),
                                 *(["--inductor-pdl"] if args.inductor_pdl else []),
                                 "--model-shapes", shape, "--model-runs", ",".join(runs), *budget],
                                100.0 * len(runs)))
    done = run_jobs(bench_command("compile"), jobs, gpus, args.fanout_deadline_s, quiet=args.quiet)
    got_rows, parts = [], []
    # the shape-row jobs come first in `jobs`, one per part of parts_of_rows
    unmeasured = [part for part, entry in zip(parts_of_rows, done) if entry.get("record") is None]
    for entry in done:
        record = entry.get("record")
        if record is not None:
            got_rows += [{**row, "gpu": entry["gpu"]} for row in record["rows"]]
            if "model" in record:
                parts.append(record["model"])
    got_rows.sort(key=lambda r: r["row"])
    summary = summarize_shapes(got_rows) if got_rows else {}
    if unmeasured:
        summary["rows not measured (their job failed or was stopped)"] = ",".join(unmeasured)
    first = next((e["record"] for e in done if e.get("record")), {})
    record = {"method": METHOD + f" Spread over {gpus} GPUs of one host, a process each; each row and each model "
                                 "ratio comes from one process.",
              "summary": summary, "inductor": {**first.get("inductor", {}), "gpus": gpus},
              "jobs": [{k: v for k, v in e.items() if k != "record"} for e in done], "rows": got_rows}
    return with_model(record, merge_model_parts(parts) if parts else None)


def with_model(record: dict, model: Optional[dict]) -> dict:
    """The record with its model section, whose summary joins the record's."""
    if model is not None:
        record["model"] = model
        record["summary"].update({f"model {k}": v for k, v in model["summary"].items()})
    return record
