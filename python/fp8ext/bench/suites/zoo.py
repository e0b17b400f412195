"""zoo: other models' weights and odd M (fp8ext.zoo), tuning and held-out parts; fp8ext's default path and its
kernels alone against torch._scaled_mm row-wise."""
from __future__ import annotations

from typing import Iterable, Optional

import torch

from ... import kernels, ops
from ...zoo import zoo_rows
from ..common import backends, geomean, make_operands, print_rows, pyplot
from ..registry import register_suite
from ..timing import Timer, progress as progress_bar
from .peers import SPEEDUP_TITLE, accums, spot_check, timing_method


def run_zoo(rows: list[dict], accums: Iterable[bool], timer: Timer, check: bool = True, progress: bool = True,
            rounds: int = 3, host_timer: Optional[Timer] = None) -> list[dict]:
    """The zoo rows: fp8ext's default path (kernels, with torch's row-wise path as the backstop where the cost
    model predicts it faster), fp8ext's kernels alone, and torch._scaled_mm row-wise, on the same tensors. Where
    the default path picks a kernel, it is the kernels-alone call itself, timed once (same_path: true).

    ``host_timer`` (a Timer without the hold, as host_inclusive_timer makes) times the same calls again as an eager
    caller waits for them, the host's issue time in the loop: the columns ``*_host_us``."""
    out = []
    work = [(r, f) for r in rows for f in accums]
    bar = progress_bar(len(work), progress)
    for row, fast in work:
        M, N, K = row["M"], row["N"], row["K"]
        a, b, sa, sb, _, _ = make_operands(M, N, K)
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        ours = lambda: ops.scaled_mm(a, b, sa, sb, **kw)  # noqa: E731
        with backends("fp8ext"):
            explain = kernels.selected_kernel(M, N, K, torch.bfloat16, fast, explain=True)
        with backends("fp8ext,torch"):
            default = kernels.selected_kernel(M, N, K, torch.bfloat16, fast)
        kernel = explain["selected"]
        mine = next(r for r in explain["ranking"] if r["kernel"] == kernel)
        if check:
            for name in ("fp8ext", "fp8ext,torch"):
                with backends(name):
                    spot_check(ours, a, b, sa, sb, fast, f"zoo M={M} N={N} K={K} fast={fast} backends={name}")
        peers = {"fp8ext_kernels_us": ours, "torch_rowwise_us": lambda: torch._scaled_mm(a, b, sa, sb, **kw)}
        same = default == kernel
        if not same:
            peers["fp8ext_us"] = ours
        around = lambda n: backends("fp8ext,torch" if n == "fp8ext_us" else "fp8ext")  # noqa: E731
        times = timer.interleaved(peers, rounds, around=around)
        if host_timer is not None:
            host = host_timer.interleaved(peers, rounds, around=around)
            times.update({name.replace("_us", "_host_us"): t for name, t in host.items()})
        if same:
            times["fp8ext_us"] = times["fp8ext_kernels_us"]
            if host_timer is not None:
                times["fp8ext_host_us"] = times["fp8ext_kernels_host_us"]
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
    for split in ("tune", "heldout", "fresh"):
        for accum in ("fast", "precise"):
            sel = [r for r in rows if r["split"] == split and r["accum"] == accum]
            for gname, pred in ZOO_GROUPS + (("all", lambda m: True),):
                group = [r for r in sel if pred(r["M"])]
                if not group:
                    continue
                entry = {"rows": len(group), "max tile_ratio": max(r["tile_ratio"] for r in group)}
                columns = [("default", "fp8ext_us", "torch_rowwise_us"),
                           ("kernels", "fp8ext_kernels_us", "torch_rowwise_us")]
                if all("fp8ext_host_us" in r for r in group):
                    columns.append(("default, host included", "fp8ext_host_us", "torch_rowwise_host_us"))
                for tag, col, peer in columns:
                    ratios = [(r[peer] / r[col], r) for r in group]
                    worst = min(ratios, key=lambda x: x[0])
                    entry[tag] = {"geomean": geomean(x for x, _ in ratios),
                                  "worst": [round(worst[0], 3), worst[1]["M"], worst[1]["N"], worst[1]["K"],
                                            worst[1]["kernels_kernel" if tag == "kernels" else "kernel"]],
                                  "below 0.90": sum(x < 0.90 for x, _ in ratios),
                                  "below 0.97": sum(x < 0.97 for x, _ in ratios)}
                out[f"{split} {accum} {gname}"] = entry
    return out


def print_zoo_table(rows: list[dict]) -> None:
    cols = [("split", ">7"), ("M", ">6"), ("N", ">6"), ("K", ">6"), ("acc", ">7"), ("default", ">8.1f"),
            ("kernels", ">8.1f"), ("rowwise", ">8.1f"), ("x dflt", ">6.2f"), ("x kern", ">6.2f"), ("tiles", ">5.2f")]

    def cells(r):
        return {"split": r["split"], "M": r["M"], "N": r["N"], "K": r["K"], "acc": r["accum"],
                "default": r["fp8ext_us"], "kernels": r["fp8ext_kernels_us"], "rowwise": r["torch_rowwise_us"],
                "x dflt": r["torch_rowwise_us"] / r["fp8ext_us"], "x kern": r["torch_rowwise_us"] / r["fp8ext_kernels_us"],
                "tiles": r["tile_ratio"]}
    print_rows(cols, rows, cells)


ZOO_STYLE = {"tune": dict(color="C0", marker="o"), "heldout": dict(color="C3", marker="^"),
             "fresh": dict(color="C2", marker="s")}


def plot_zoo(rows: list[dict], path: str) -> bool:
    """Speed-up of fp8ext's default path over torch row-wise against M, one panel per accumulation mode: every row
    a point, the tuning and held-out parts in their own colour and marker, and each part's geomean per M a line."""
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True, squeeze=False)
    for ax, accum in zip(axes.flat, ("fast", "precise")):
        for split, style in ZOO_STYLE.items():
            sel = [r for r in rows if r["accum"] == accum and r["split"] == split]
            if not sel:
                continue
            speedup = [r["torch_rowwise_us"] / r["fp8ext_us"] for r in sel]
            ax.scatter([r["M"] for r in sel], speedup, s=12, alpha=0.5, color=style["color"], marker=style["marker"],
                       label=f"{split} rows")
            ms = sorted({r["M"] for r in sel})
            means = [geomean(x for r, x in zip(sel, speedup) if r["M"] == m) for m in ms]
            ax.plot(ms, means, "-", color=style["color"], label=f"{split} geomean ({geomean(speedup):.3f}x)")
        ax.axhline(1.0, color="gray", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_title(f"zoo, {accum} accumulation")
        ax.set_xlabel("M")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes.flat[0].set_ylabel("torch row-wise time / fp8ext time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def host_inclusive_timer(rep_ms: float) -> Timer:
    """What an eager caller waits for, as triton.testing.do_bench times it: the L2 flush queued ahead of each call,
    no spin kernel to hide the host, calls issued back to back in grad mode; a call whose host work outlasts the
    flush waits for its own issue."""
    return Timer(rep_ms=rep_ms, hold=False)


HOST_METHOD = (" With --host-inclusive each call is timed again as an eager caller waits for it (the columns"
               " *_host_us): the L2 flush queued ahead, no spin kernel, calls issued back to back in grad mode, as"
               " triton.testing.do_bench does, so that a call's host work shows where it outlasts the flush.")


HOST_OPTION = dict(action="store_true", help="zoo and large-m suites: time every call again with its host work in "
                   "the loop, as an eager caller waits for it (columns *_host_us)")


@register_suite("zoo", help="other models' weights and odd M, tuning and held-out parts (--split)", cpu_demo=True,
                plot=plot_zoo, summary_title=SPEEDUP_TITLE, takes=("split",),
                options={"--host-inclusive": HOST_OPTION})
def zoo(args) -> dict:
    host = host_inclusive_timer(args.rep_ms) if args.host_inclusive else None
    rows = run_zoo(zoo_rows(args.split), accums(args), Timer(rep_ms=args.rep_ms), check=not args.no_check,
                   progress=not args.quiet, rounds=args.rounds, host_timer=host)
    print_zoo_table(rows)
    method = timing_method(args) + (HOST_METHOD if host is not None else "")
    return {"method": method, "summary": summarize_zoo(rows), "rows": rows}
