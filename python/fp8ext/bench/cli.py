"""The command line of `python -m fp8ext.bench`: one parser for every registered suite, the GPU check, the CPU
demo, and the record: header, summary, JSON and plot."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

import torch

from .. import kernels, ops
from ..testing import check_against_reference
from . import suites  # noqa: F401  (registers the suites)
from .common import make_operands, parse_shapes, suite_record, write_record
from .registry import SUITES, Suite

# The shared options that a suite may give its own default (Suite.defaults).
SHARED_DEFAULTS = {"rep_ms": 100, "accum": "fast,precise"}


def build_parser() -> argparse.ArgumentParser:
    doc = sys.modules[__package__].__doc__
    listing = "\n".join(f"  {s.name:14s} {s.help}" for s in SUITES.values())
    p = argparse.ArgumentParser(prog="python -m fp8ext.bench", description=doc,
                                epilog=f"suites:\n{listing}", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="quick", choices=list(SUITES), help="what to measure (default: quick)")
    p.add_argument("--split", choices=["tune", "heldout", "fresh"],
                   help="zoo and blockwise suites: one part of the zoo only (default: both), or the row-wise fresh set")
    p.add_argument("--shapes", help="custom and blockwise suites: these shapes only, MxNxK[,MxNxK...]")
    p.add_argument("--accum", default=None, help="fast, precise or both (default, or the suite's own)")
    p.add_argument("--json", help="write the record (header: commit, GPU, torch, CUDA, date, suite, host; then the "
                                  "method, summary and rows) to this file")
    p.add_argument("--plot", help="write a PNG plot here (peer suites: TFLOP/s vs M per weight shape; zoo: speed-up "
                                  "vs M, tuning and held-out rows)")
    p.add_argument("--rep-ms", type=float, default=None,
                   help="timed repetition time per measurement in ms (default 100, or the suite's own)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved turns per shape: every peer is timed for rep-ms / rounds per turn, in an order "
                        "rotated each turn (1 = one block per peer, the method of the records before 2026-11-30)")
    p.add_argument("--compile-peer", action="store_true", help="also time torch.compile max-autotune _scaled_mm")
    p.add_argument("--no-check", action="store_true", help="skip the float64 spot check of each shape")
    p.add_argument("--quiet", action="store_true")
    added = set()  # a flag that several suites read is declared by each, added once
    for s in SUITES.values():
        if s.options:
            group = p.add_argument_group(f"--suite {s.name}")
            for flag, kw in s.options.items():
                if flag not in added:
                    group.add_argument(flag, **kw)
                    added.add(flag)
    return p


def normalize_accum(text: str) -> str:
    """--accum as the suites read it: "fast", "precise" or "fast,precise" ("both" is the last). Anything else is an
    error: a suite reading an unknown word as precise would time the wrong kernels without a word."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    out: list[str] = []
    for w in words:
        for a in (["fast", "precise"] if w == "both" else [w]):
            if a not in ("fast", "precise"):
                raise ValueError(f"--accum {text!r}: {w!r} is not fast, precise or both")
            if a not in out:
                out.append(a)
    if not out:
        raise ValueError("--accum is empty: give fast, precise or both")
    return ",".join(out)


def gpu_problem() -> Optional[str]:
    """Why this process cannot time fp8ext's kernels, or None where it can."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"{torch.cuda.get_device_name()} is not compute capability 9.0"
    if not kernels.kernel_names():
        return "this fp8ext build has no CUDA kernels"
    return None


def cpu_demo(why: Optional[str] = None, args=None, unused: tuple = ()) -> int:
    """Without an sm_90 GPU: show that the op is correct (float64 bound) on a few shapes, and say where speed is.
    ``args``: the command line (--json writes the demo's rows); ``unused``: the options given that the demo does not
    honour, which it names."""
    why = why or gpu_problem() or "no sm_90 GPU"
    print(f"fp8ext.bench: {why}. Speed needs an H100/H200 (sm_90) and a CUDA build; running the CPU correctness "
          "demo of the same op instead.\n")
    if unused:
        print(f"(the demo runs its own shapes with precise accumulation and draws nothing: {', '.join(unused)} not "
              f"used)\n")
    print(f"{'M':>5} {'N':>5} {'K':>5} {'out':>9} {'max |err|':>10} {'vs bound':>9}  result")
    ok, rows = True, []
    for M, N, K in [(1, 256, 512), (17, 512, 256), (128, 1024, 1024)]:
        for out_dtype in (torch.bfloat16, torch.float32):
            a, b, sa, sb, _, _ = make_operands(M, N, K, device="cpu")
            out = ops.scaled_mm(a, b, sa, sb, out_dtype=out_dtype)
            try:
                err = check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="demo")
                status, within = "ok", "within"
            except AssertionError as e:
                err, status, within, ok = float("nan"), f"FAIL {e}", "outside", False
            dtype = str(out_dtype).replace("torch.", "")
            print(f"{M:>5} {N:>5} {K:>5} {dtype:>9} {err:10.3g} {within:>9}  {status}")
            rows.append({"M": M, "N": N, "K": K, "out_dtype": dtype, "max_abs_err": err, "within_bound": status == "ok",
                         "result": status})
    if getattr(args, "json", None):
        write_record(args.json, {**suite_record("cpu-demo"), "method": "CPU correctness demo (no sm_90 GPU: " + why +
                                 "): fp8ext.scaled_mm on the CPU against the float64 reference and its error bound, "
                                 "precise accumulation; no timing", "summary": {"all within the bound": ok},
                                 "rows": rows})
    return 0 if ok else 1


def print_summary(suite: Suite, summary: dict) -> None:
    print(f"\n{suite.summary_title or f'{suite.name} summary'}:")
    for k, v in summary.items():
        print(f"  {k:32s} {f'{v:.3f}' if isinstance(v, float) else v}")


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    suite = SUITES[args.suite]
    for option in ("shapes", "split"):
        if getattr(args, option) is not None and option not in suite.takes:
            takers = ", ".join(s.name for s in SUITES.values() if option in s.takes)
            p.error(f"--{option} is not an option of --suite {suite.name} (it is of: {takers})")
    if args.shapes is not None and args.split is not None:
        p.error("--shapes and --split choose the rows two ways: give one")
    if args.shapes is not None:
        try:
            parse_shapes(args.shapes)
        except ValueError as e:
            p.error(str(e))
    given = tuple(f"--{name}" for name in ("shapes", "split", "accum", "plot") if getattr(args, name) is not None)
    for key, value in {**SHARED_DEFAULTS, **suite.defaults}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.accum = normalize_accum(args.accum)
    except ValueError as e:
        p.error(str(e))

    why = gpu_problem()
    if why is not None:
        if suite.cpu_demo:
            return cpu_demo(why, args, given)
        print(f"fp8ext.bench --suite {suite.name}: needs an H100/H200 (sm_90) and a CUDA build of fp8ext ({why})",
              file=sys.stderr)
        return 1

    torch.backends.cuda.matmul.allow_tf32 = False
    record = suite.run(args)
    print_summary(suite, record.get("summary", {}))
    if args.json:
        write_record(args.json, {**suite_record(suite.name), **record})
    if args.plot:
        if suite.plot is None:
            print(f"--plot: the {suite.name} suite has no plot")
        else:
            if suite.plot(record["rows"], args.plot):
                print(f"wrote {args.plot}")
    return 0
