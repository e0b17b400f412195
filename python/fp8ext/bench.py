"""fp8ext benchmark: fp8ext.scaled_mm against torch._scaled_mm on the same tensors, in the same run.

    python -m fp8ext.bench                      # the `quick` suite; a CPU correctness demo without an sm_90 GPU
    python -m fp8ext.bench --suite llama        # 12 Llama-3 weight shapes x 12 M values, fast and precise
    python -m fp8ext.bench --suite custom --shapes 16x4096x4096,8192x8192x8192
    python -m fp8ext.bench --suite llama --json bench/results/run.json --plot bench/results/run.png
    python -m fp8ext.bench --suite zoo [--split heldout]   # other models' weights and odd M (fp8ext.zoo)

Times are medians of triton.testing.do_bench calls (L2 flushed before every call), on fresh random inputs, taken in
interleaved turns (--rounds, the peer order rotated each turn) so that a clock wandering under the power cap
lands on every peer alike. Peers:
torch._scaled_mm row-wise (one fp32 scale per row of a and per column of b, like fp8ext) and tensor-wise
(cuBLAS with one scale each), with the same use_fast_accum; optionally torch.compile max-autotune of
_scaled_mm with persistent TMA templates (--compile-peer).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Callable, ContextManager, Iterable, Optional

import torch

from . import ops
from .testing import check_against_reference, random_operands, random_scales

LLAMA_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192),
            (57344, 8192), (8192, 28672), (18432, 16384), (16384, 16384), (106496, 16384), (16384, 53248)]
LLAMA_M = [1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
QUICK = [(1, 8192, 8192), (16, 4096, 4096), (64, 28672, 4096), (128, 6144, 4096), (1024, 4096, 14336),
         (4096, 8192, 8192), (8192, 8192, 8192)]
# The 7 shapes of the torch.compile baseline, measured on the H200 before fp8ext's first kernel.
INDUCTOR_SHAPES = [(16, 8192, 8192), (128, 28672, 4096), (1024, 10240, 8192), (2048, 4096, 14336),
                   (4096, 57344, 8192), (8192, 8192, 8192), (16384, 8192, 8192)]

HBM_TBPS = 4.27  # device-to-device copy, read + write, measured on the H200
FP8_DENSE_TFLOPS = 1979.0  # vendor datasheet, dense FP8 (a lead, not a measurement)


def suite_shapes(suite: str, shapes: Optional[str]) -> list[tuple[int, int, int]]:
    if suite == "llama":
        return [(m, n, k) for n, k in LLAMA_NK for m in LLAMA_M]
    if suite == "quick":
        return list(QUICK)
    if suite == "inductor":
        return list(INDUCTOR_SHAPES)
    if suite == "custom":
        if not shapes:
            raise SystemExit("--suite custom needs --shapes MxNxK[,MxNxK...]")
        out = []
        for s in shapes.split(","):
            m, n, k = (int(x) for x in s.lower().split("x"))
            out.append((m, n, k))
        return out
    raise SystemExit(f"unknown suite {suite!r}")


def git_commit() -> str:
    env = os.environ.get("FP8EXT_COMMIT")
    if env:
        return env
    try:
        root = Path(__file__).resolve().parents[2]
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_record() -> dict:
    """What every JSON record of an H200 measurement starts with: commit, GPU, torch version and date."""
    return {"commit": git_commit(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": _dt.date.today().isoformat()}


class Timer:
    """Median time of fn() in microseconds, L2 flushed before each call."""

    def __init__(self, rep_ms: int = 100, warmup_ms: int = 25):
        self.rep_ms, self.warmup_ms = rep_ms, warmup_ms
        try:
            from triton.testing import do_bench

            self._do_bench = do_bench
        except ImportError:  # CUDA events with an explicit L2 flush
            self._do_bench = None
            self._flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> float:
        return _median(self.samples(fn))

    def samples(self, fn: Callable[[], object], rep_ms: Optional[float] = None,
                warmup_ms: Optional[float] = None) -> list[float]:
        """Every timed call of fn() in microseconds, about rep_ms of them after warmup_ms of untimed calls."""
        rep = self.rep_ms if rep_ms is None else rep_ms
        warmup = self.warmup_ms if warmup_ms is None else warmup_ms
        if self._do_bench is not None:
            return [1e3 * t for t in self._do_bench(fn, warmup=warmup, rep=rep, return_mode="all")]
        for _ in range(3):
            fn()
        times = []
        for _ in range(max(5, int(rep) // 5)):
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(1e3 * start.elapsed_time(end))
        return times

    def interleaved(self, fns: dict[str, Callable[[], object]], rounds: int = 3,
                    around: Optional[Callable[[str], ContextManager]] = None) -> dict[str, float]:
        """Median time of each fn, its samples taken in `rounds` turns of rep_ms / rounds each, the order of the
        fns rotated by one every round; `around(name)`, if given, is entered for each of that fn's turns (tune.py
        forces a kernel there). Under the H200's power cap the SM clock wanders on a scale of
        seconds (scripts/clock_probe.py); timing the peers one after another in one fixed order hands each
        its own stretch of that wander, and single rows moved by up to 8% between runs. Interleaved turns
        spread the wander over every peer alike."""
        names = list(fns)
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[: r % len(names)]:
                warmup = self.warmup_ms if r == 0 else max(5.0, self.warmup_ms / rounds)
                with around(n) if around is not None else contextlib.nullcontext():
                    times[n] += self.samples(fns[n], rep_ms=self.rep_ms / rounds, warmup_ms=warmup)
        return {n: _median(t) for n, t in times.items()}


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def make_operands(M: int, N: int, K: int, device="cuda"):
    """Fresh random fp8 operands and positive scales: row-wise (M,1)/(1,N) and tensor-wise ()/()."""
    a, b, sa, sb = random_operands(M, N, K, device=device)
    st_a, st_b = random_scales(1, device=device, shape=()), random_scales(1, device=device, shape=())
    return a, b, sa, sb, st_a, st_b


def tflops(M, N, K, us):
    return 2.0 * M * N * K / (us * 1e-6) / 1e12 if us and us > 0 else float("nan")


def weight_gbps(N, K, us):
    return N * K / (us * 1e-6) / 1e9 if us and us > 0 else float("nan")


def _compiled_peer():
    import torch._inductor.config as inductor_config

    inductor_config.triton.enable_persistent_tma_matmul = True

    def f(a, b, sa, sb, fast):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

    return torch.compile(f, mode="max-autotune-no-cudagraphs", dynamic=False)


def run_gpu(shapes, accums: Iterable[bool], timer: Timer, compile_peer: bool = False, check: bool = True,
            progress: bool = True, rounds: int = 3) -> list[dict]:
    rows = []
    compiled = _compiled_peer() if compile_peer else None
    work = [(s, f) for s in shapes for f in accums]
    bar = _progress(len(work), progress)
    for (M, N, K), fast in work:
        a, b, sa, sb, st_a, st_b = make_operands(M, N, K)
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        ours = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        if check:  # every measured shape is also a correctness check against float64 (sampled rows for speed)
            rows_idx = torch.randperm(M, device="cuda")[: min(M, 64)]
            out = ours()[rows_idx]
            check_against_reference(out, a[rows_idx], b, sa[rows_idx], sb, use_fast_accum=fast,
                                    what=f"bench M={M} N={N} K={K} fast={fast}")
        peers = {"fp8ext_us": ours,
                 "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw),
                 "torch_tensorwise_us": lambda: torch._scaled_mm(a, b, st_a, st_b, **kw)}
        if compiled is not None:
            compiled(a, b, sa, sb, fast)  # compiles (and autotunes) outside the timed turns
            peers["torch_compile_rowwise_us"] = lambda: compiled(a, b, sa, sb, fast)
        row = {"M": M, "N": N, "K": K, "use_fast_accum": fast,
               "kernel": ops.selected_kernel(M, N, K, torch.bfloat16, fast), **timer.interleaved(peers, rounds)}
        rows.append(row)
        del a, b, sa, sb, st_a, st_b
        bar(f"{M}x{N}x{K} {'fast' if fast else 'precise'}: {row['torch_rowwise_us'] / row['fp8ext_us']:.2f}x")
    bar(None)
    return rows


@contextlib.contextmanager
def _backends(name: str):
    before = ops.backends()
    ops.set_backends(name)
    try:
        yield
    finally:
        ops.set_backends(before)


def run_zoo(rows: list[dict], accums: Iterable[bool], timer: Timer, check: bool = True, progress: bool = True,
            rounds: int = 3) -> list[dict]:
    """The zoo rows: fp8ext's default path (kernels, with torch's row-wise path as the backstop where the cost
    model predicts it faster), fp8ext's kernels alone, and torch._scaled_mm row-wise, on the same tensors. Where
    the default path picks a kernel, it is the kernels-alone call itself, timed once (same_path: true)."""
    out = []
    work = [(r, f) for r in rows for f in accums]
    bar = _progress(len(work), progress)
    for row, fast in work:
        M, N, K = row["M"], row["N"], row["K"]
        a, b, sa, sb, _, _ = make_operands(M, N, K)
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        ours = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        with _backends("fp8ext"):
            explain = ops.selected_kernel(M, N, K, torch.bfloat16, fast, explain=True)
        with _backends("fp8ext,torch"):
            default = ops.selected_kernel(M, N, K, torch.bfloat16, fast)
        kernel = explain["selected"]
        mine = next(r for r in explain["ranking"] if r["kernel"] == kernel)
        if check:
            idx = torch.randperm(M, device="cuda")[: min(M, 64)]
            for name in ("fp8ext", "fp8ext,torch"):
                with _backends(name):
                    check_against_reference(ours()[idx], a[idx], b, sa[idx], sb, use_fast_accum=fast,
                                            what=f"zoo M={M} N={N} K={K} fast={fast} backends={name}")
        peers = {"fp8ext_kernels_us": ours, "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw)}
        same = default == kernel
        if not same:
            peers["fp8ext_us"] = ours
        around = lambda n: _backends("fp8ext,torch" if n == "fp8ext_us" else "fp8ext")  # noqa: E731
        times = timer.interleaved(peers, rounds, around=around)
        if same:
            times["fp8ext_us"] = times["fp8ext_kernels_us"]
        out.append({**row, "accum": "fast" if fast else "precise", "use_fast_accum": fast, **times,
                    "kernel": default, "kernels_kernel": kernel, "same_path": same,
                    "tile_ratio": mine["tile_ratio"], "predicted_us": mine["predicted_us"],
                    "torch_predicted_us": explain["torch_predicted_us"]})
        del a, b, sa, sb
        r = out[-1]
        bar(f"{M}x{N}x{K} {r['accum']} {r['split']}: {r['torch_rowwise_us'] / r['fp8ext_us']:.2f}x default, "
            f"{r['torch_rowwise_us'] / r['fp8ext_kernels_us']:.2f}x kernels")
    bar(None)
    return out


ZOO_GROUPS = (("M<=128", lambda m: m <= 128), ("128<M<1024", lambda m: 128 < m < 1024), ("M>=1024", lambda m: m >= 1024))


def summarize_zoo(rows: list[dict]) -> dict:
    """Per split, accumulation and M group: geomean of torch row-wise time / fp8ext time for the default path
    and for the kernels alone, the worst row of each, the rows below 0.90x / 0.97x, and the largest tile ratio."""
    out = {}
    for split in ("tune", "heldout"):
        for accum in ("fast", "precise"):
            sel = [r for r in rows if r["split"] == split and r["accum"] == accum]
            for gname, pred in ZOO_GROUPS + (("all", lambda m: True),):
                group = [r for r in sel if pred(r["M"])]
                if not group:
                    continue
                entry = {"rows": len(group), "max tile_ratio": max(r["tile_ratio"] for r in group)}
                for tag, col in (("default", "fp8ext_us"), ("kernels", "fp8ext_kernels_us")):
                    ratios = [(r["torch_rowwise_us"] / r[col], r) for r in group]
                    worst = min(ratios, key=lambda x: x[0])
                    entry[tag] = {"geomean": geomean(x for x, _ in ratios),
                                  "worst": [round(worst[0], 3), worst[1]["M"], worst[1]["N"], worst[1]["K"],
                                            worst[1]["kernel" if tag == "default" else "kernels_kernel"]],
                                  "below 0.90": sum(x < 0.90 for x, _ in ratios),
                                  "below 0.97": sum(x < 0.97 for x, _ in ratios)}
                out[f"{split} {accum} {gname}"] = entry
    return out


def _progress(total: int, enabled: bool):
    try:
        from tqdm import tqdm

        pbar = tqdm(total=total, disable=not enabled, file=sys.stderr, dynamic_ncols=True)

        def step(msg):
            if msg is None:
                pbar.close()
            else:
                pbar.set_postfix_str(msg)
                pbar.update(1)
        return step
    except ImportError:
        count = [0]

        def step(msg):
            if msg is not None and enabled:
                count[0] += 1
                print(f"[{count[0]}/{total}] {msg}", file=sys.stderr, flush=True)
        return step


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarize(rows: list[dict]) -> dict:
    """Geomean ratios (peer time / fp8ext time, >1 = fp8ext faster) per group, and the worst shape."""
    out = {}
    for fast in (True, False):
        sel = [r for r in rows if r["use_fast_accum"] == fast]
        if not sel:
            continue
        tag = "fast" if fast else "precise"
        for name, pred in (("M<=128", lambda r: r["M"] <= 128), ("M>=1024", lambda r: r["M"] >= 1024),
                           ("all", lambda r: True)):
            group = [r for r in sel if pred(r)]
            if not group:
                continue
            out[f"{tag} {name} vs rowwise"] = geomean(r["torch_rowwise_us"] / r["fp8ext_us"] for r in group)
            out[f"{tag} {name} vs tensorwise"] = geomean(r["torch_tensorwise_us"] / r["fp8ext_us"] for r in group)
        worst = min(sel, key=lambda r: r["torch_rowwise_us"] / r["fp8ext_us"])
        out[f"{tag} worst vs rowwise"] = {"ratio": worst["torch_rowwise_us"] / worst["fp8ext_us"],
                                          "shape": [worst["M"], worst["N"], worst["K"]], "kernel": worst["kernel"]}
    return out


def _print_rows(columns: list[tuple[str, str]], rows: list[dict], cells: Callable[[dict], dict]) -> None:
    """A fixed-width table: each column is (header, right-aligned format spec), cells(row) gives the row's value
    per header, and the row's kernel ends each line."""
    header = " ".join(f"{h:>{spec.split('.')[0].lstrip('>')}}" for h, spec in columns) + "  kernel"
    print(header)
    print("-" * len(header))
    for r in rows:
        values = cells(r)
        print(" ".join(format(values[h], spec) for h, spec in columns) + "  " + r["kernel"])


def print_table(rows: list[dict]) -> None:
    cols = [("M", ">6"), ("N", ">6"), ("K", ">6"), ("acc", ">7"), ("fp8ext", ">8.1f"), ("rowwise", ">8.1f"),
            ("tensorw", ">8.1f"), ("TFLOP/s", ">8.0f"), ("x row", ">6.2f"), ("x tens", ">6.2f"), ("GB/s w", ">7")]

    def cells(r):
        M, N, K, us = r["M"], r["N"], r["K"], r["fp8ext_us"]
        return {"M": M, "N": N, "K": K, "acc": "fast" if r["use_fast_accum"] else "precise", "fp8ext": us,
                "rowwise": r["torch_rowwise_us"], "tensorw": r["torch_tensorwise_us"], "TFLOP/s": tflops(M, N, K, us),
                "x row": r["torch_rowwise_us"] / us, "x tens": r["torch_tensorwise_us"] / us,
                "GB/s w": f"{weight_gbps(N, K, us):.0f}" if M <= 128 else ""}
    _print_rows(cols, rows, cells)


def print_zoo_table(rows: list[dict]) -> None:
    cols = [("split", ">7"), ("M", ">6"), ("N", ">6"), ("K", ">6"), ("acc", ">7"), ("default", ">8.1f"),
            ("kernels", ">8.1f"), ("rowwise", ">8.1f"), ("x dflt", ">6.2f"), ("x kern", ">6.2f"), ("tiles", ">5.2f")]

    def cells(r):
        return {"split": r["split"], "M": r["M"], "N": r["N"], "K": r["K"], "acc": r["accum"],
                "default": r["fp8ext_us"], "kernels": r["fp8ext_kernels_us"], "rowwise": r["torch_rowwise_us"],
                "x dflt": r["torch_rowwise_us"] / r["fp8ext_us"], "x kern": r["torch_rowwise_us"] / r["fp8ext_kernels_us"],
                "tiles": r["tile_ratio"]}
    _print_rows(cols, rows, cells)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = sorted({(r["N"], r["K"]) for r in rows}, key=lambda nk: nk[0] * nk[1])
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(weights) / cols), cols, figsize=(5 * cols, 3.6 * math.ceil(len(weights) / cols)),
                             squeeze=False)
    for ax, (N, K) in zip(axes.flat, weights):
        for fast, style in ((True, "-"), (False, "--")):
            sel = sorted((r for r in rows if (r["N"], r["K"]) == (N, K) and r["use_fast_accum"] == fast),
                         key=lambda r: r["M"])
            if not sel:
                continue
            ms = [r["M"] for r in sel]
            tag = "fast" if fast else "precise"
            ax.plot(ms, [tflops(r["M"], N, K, r["fp8ext_us"]) for r in sel], style, color="C0", marker="o",
                    ms=3, label=f"fp8ext {tag}")
            ax.plot(ms, [tflops(r["M"], N, K, r["torch_rowwise_us"]) for r in sel], style, color="C1", marker="s",
                    ms=3, label=f"torch row-wise {tag}")
            ax.plot(ms, [tflops(r["M"], N, K, r["torch_tensorwise_us"]) for r in sel], style, color="C2",
                    marker="^", ms=3, label=f"cuBLAS tensor-wise {tag}")
        ms = sorted({r["M"] for r in rows if (r["N"], r["K"]) == (N, K)})
        roof = [min(FP8_DENSE_TFLOPS, HBM_TBPS * 1e12 * 2 * m * N * K / (m * K + N * K + 2 * m * N) / 1e12)
                for m in ms]
        ax.plot(ms, roof, ":", color="gray", label="roofline (HBM copy BW, datasheet FP8)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"N={N}, K={K}")
        ax.set_xlabel("M")
        ax.set_ylabel("TFLOP/s")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(weights):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cpu_demo() -> int:
    """Without an sm_90 GPU: show that the op is correct (float64 bound) on a few shapes, and say where speed is."""
    why = ("no CUDA GPU" if not torch.cuda.is_available() else
           f"{torch.cuda.get_device_name()} is not compute capability 9.0" if torch.cuda.get_device_capability()
           != (9, 0) else "this fp8ext build has no CUDA kernels")
    print(f"fp8ext.bench: {why}. Speed needs an H100/H200 (sm_90) and a CUDA build; running the CPU correctness "
          "demo of the same op instead.\n")
    print(f"{'M':>5} {'N':>5} {'K':>5} {'out':>9} {'max |err|':>10} {'vs bound':>9}  result")
    ok = True
    for M, N, K in [(1, 256, 512), (17, 512, 256), (128, 1024, 1024)]:
        for out_dtype in (torch.bfloat16, torch.float32):
            a, b, sa, sb, _, _ = make_operands(M, N, K, device="cpu")
            out = ops.scaled_mm(a, b, sa, sb, out_dtype=out_dtype)
            try:
                err = check_against_reference(out, a, b, sa, sb, use_fast_accum=False, what="demo")
                status = "ok"
            except AssertionError as e:
                err, status, ok = float("nan"), f"FAIL {e}", False
            print(f"{M:>5} {N:>5} {K:>5} {str(out_dtype).replace('torch.', ''):>9} {err:10.3g} {'within':>9}  {status}")
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fp8ext.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="quick", choices=["quick", "llama", "inductor", "zoo", "custom"])
    p.add_argument("--split", choices=["tune", "heldout"], help="zoo suite: one part only (default: both)")
    p.add_argument("--shapes", help="custom suite: MxNxK[,MxNxK...]")
    p.add_argument("--accum", default="fast,precise", help="fast, precise or both (default)")
    p.add_argument("--json", help="write the results (rows, summary, commit, GPU, torch, date) to this file")
    p.add_argument("--plot", help="write a PNG plot (TFLOP/s vs M per weight shape) here")
    p.add_argument("--rep-ms", type=int, default=100, help="do_bench repetition time per measurement")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved turns per shape: every peer is timed for rep-ms / rounds per turn, in an order "
                        "rotated each turn (1 = one block per peer, the method of the records before 2026-11-30)")
    p.add_argument("--compile-peer", action="store_true", help="also time torch.compile max-autotune _scaled_mm")
    p.add_argument("--no-check", action="store_true", help="skip the float64 spot check of each shape")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0) and ops.kernel_names()):
        return cpu_demo()

    accums = [a.strip() == "fast" for a in args.accum.split(",")]
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.suite == "zoo":
        from .zoo import zoo_rows

        rows = run_zoo(zoo_rows(args.split), accums, Timer(rep_ms=args.rep_ms), check=not args.no_check,
                       progress=not args.quiet, rounds=args.rounds)
        print_zoo_table(rows)
        summary = summarize_zoo(rows)
    else:
        rows = run_gpu(suite_shapes(args.suite, args.shapes), accums, Timer(rep_ms=args.rep_ms),
                       compile_peer=args.compile_peer, check=not args.no_check, progress=not args.quiet,
                       rounds=args.rounds)
        print_table(rows)
        summary = summarize(rows)
    print("\ngeomean speed-up of fp8ext (peer time / fp8ext time):")
    for k, v in summary.items():
        print(f"  {k:32s} {v if isinstance(v, dict) else f'{v:.3f}'}")
    result = {
        "commit": git_commit(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "suite": args.suite,
        "host": platform.node(),
        "method": f"triton.testing.do_bench, L2 flushed, fresh random inputs; median of all calls of {args.rounds} "
                  f"interleaved turns of {args.rep_ms / args.rounds:.0f} ms per peer, peer order rotated each turn",
        "summary": summary,
        "rows": rows,
    }
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.json}")
    if args.plot and args.suite != "zoo":
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
