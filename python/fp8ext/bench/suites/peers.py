"""quick, llama, inductor, custom: fp8ext.scaled_mm against torch._scaled_mm row-wise and tensor-wise (and
optionally torch.compile max-autotune of it) on the same tensors, per shape and accumulation mode."""
from __future__ import annotations

import math
from typing import Iterable

import torch

from ... import kernels, ops
from ...testing import check_against_reference
from ..common import (FP8_DENSE_TFLOPS, HBM_TBPS, geomean, make_operands, print_rows, pyplot, suite_shapes,
                      tflops, weight_gbps)
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer, progress as progress_bar

SPEEDUP_TITLE = "geomean speed-up of fp8ext (peer time / fp8ext time)"


def _compiled_peer():
    import torch._inductor.config as inductor_config

    inductor_config.triton.enable_persistent_tma_matmul = True

    def f(a, b, sa, sb, fast):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

    return torch.compile(f, mode="max-autotune-no-cudagraphs", dynamic=False)


def spot_check(out_fn, a, b, sa, sb, fast: bool, what: str) -> None:
    """Every measured shape is also a correctness check against float64 (64 sampled rows, for speed)."""
    idx = torch.randperm(a.shape[0], device="cuda")[: min(a.shape[0], 64)]
    check_against_reference(out_fn()[idx], a[idx], b, sa[idx], sb, use_fast_accum=fast, what=what)


def run_gpu(shapes, accums: Iterable[bool], timer: Timer, compile_peer: bool = False, check: bool = True,
            progress: bool = True, rounds: int = 3) -> list[dict]:
    rows = []
    compiled = _compiled_peer() if compile_peer else None
    work = [(s, f) for s in shapes for f in accums]
    bar = progress_bar(len(work), progress)
    for (M, N, K), fast in work:
        a, b, sa, sb, st_a, st_b = make_operands(M, N, K)
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        ours = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        if check:
            spot_check(ours, a, b, sa, sb, fast, f"bench M={M} N={N} K={K} fast={fast}")
        peers = {"fp8ext_us": ours,
                 "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw),
                 "torch_tensorwise_us": lambda: torch._scaled_mm(a, b, st_a, st_b, **kw)}
        if compiled is not None:
            compiled(a, b, sa, sb, fast)  # compiles (and autotunes) outside the timed turns
            peers["torch_compile_rowwise_us"] = lambda: compiled(a, b, sa, sb, fast)
        row = {"M": M, "N": N, "K": K, "use_fast_accum": fast,
               "kernel": kernels.selected_kernel(M, N, K, torch.bfloat16, fast), **timer.interleaved(peers, rounds)}
        rows.append(row)
        del a, b, sa, sb, st_a, st_b
        bar(f"{M}x{N}x{K} {'fast' if fast else 'precise'}: {row['torch_rowwise_us'] / row['fp8ext_us']:.2f}x")
    bar(None)
    return rows


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


def print_table(rows: list[dict]) -> None:
    cols = [("M", ">6"), ("N", ">6"), ("K", ">6"), ("acc", ">7"), ("fp8ext", ">8.1f"), ("rowwise", ">8.1f"),
            ("tensorw", ">8.1f"), ("TFLOP/s", ">8.0f"), ("x row", ">6.2f"), ("x tens", ">6.2f"), ("GB/s w", ">7")]

    def cells(r):
        M, N, K, us = r["M"], r["N"], r["K"], r["fp8ext_us"]
        return {"M": M, "N": N, "K": K, "acc": "fast" if r["use_fast_accum"] else "precise", "fp8ext": us,
                "rowwise": r["torch_rowwise_us"], "tensorw": r["torch_tensorwise_us"], "TFLOP/s": tflops(M, N, K, us),
                "x row": r["torch_rowwise_us"] / us, "x tens": r["torch_tensorwise_us"] / us,
                "GB/s w": f"{weight_gbps(N, K, us):.0f}" if M <= 128 else ""}
    print_rows(cols, rows, cells)


def plot(rows: list[dict], path: str) -> bool:
    """TFLOP/s against M per weight shape: fp8ext, torch row-wise and tensor-wise, fast and precise, and the
    roofline of HBM copy bandwidth and datasheet FP8."""
    plt = pyplot()
    if plt is None:
        return False
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
    plt.close(fig)
    return True


def accums(args) -> list[bool]:
    """--accum as a list of use_fast_accum values."""
    return [a.strip() == "fast" for a in args.accum.split(",")]


def timing_method(args) -> str:
    return (f"{TIMER_METHOD}, fresh random inputs; median of all calls of {args.rounds} "
            f"interleaved turns of {args.rep_ms / args.rounds:.0f} ms per peer, peer order rotated each turn")


def peers(args) -> dict:
    rows = run_gpu(suite_shapes(args.suite, args.shapes), accums(args), Timer(rep_ms=args.rep_ms),
                   compile_peer=args.compile_peer, check=not args.no_check, progress=not args.quiet,
                   rounds=args.rounds)
    print_table(rows)
    return {"method": timing_method(args), "summary": summarize(rows), "rows": rows}


for _name, _help in (("quick", "7 shapes across decode and prefill (the default)"),
                     ("llama", "12 Llama-3 weight shapes x 12 M values"),
                     ("inductor", "the 7 shapes of the torch.compile baseline"),
                     ("custom", "the shapes of --shapes")):
    register_suite(_name, help=_help, cpu_demo=True, plot=plot, summary_title=SPEEDUP_TITLE,
                   takes=("shapes",) if _name == "custom" else ())(peers)
