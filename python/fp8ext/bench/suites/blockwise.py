"""blockwise: the block-scaled fp8ext.scaled_mm (1 x 128 groups of a, 128 x 128 blocks of b) against
torch._scaled_mm block-wise on the same tensors, and against fp8ext's own row-wise speed on the same shapes.

Two parts, as for the row-wise dispatch: the tuning part is DeepSeek-V3's dense and expert layers (what the
block-wise dispatch's constants were chosen on: blockwise_dispatch.h), timed with every block-scaled kernel forced
as well; the held-out part is the zoo's held-out rows (fp8ext.zoo), which nothing that picks kernels reads.
--shapes measures the given shapes instead (a model's own: the rows' split is "custom")."""
from __future__ import annotations

import torch

from ... import kernels, ops
from ...testing import check_against_reference, random_blockwise_operands, random_scales
from ...zoo import DEEPSEEK_M, DEEPSEEK_V3, zoo_rows
from ..common import geomean, parse_shapes, print_rows, ratio, timed_or_failed
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer, progress as progress_bar

GROUPS = (("M<=128", lambda m: m <= 128), ("128<M<1024", lambda m: 128 < m < 1024), ("M>=1024", lambda m: m >= 1024))


def blockwise_rows(split: str | None, shapes: str | None = None) -> list[dict]:
    if shapes is not None:
        return [{"M": m, "N": n, "K": k, "weight": "--shapes", "split": "custom"} for m, n, k in parse_shapes(shapes)]
    rows = []
    if split in (None, "tune"):
        rows += [{"M": m, "N": n, "K": k, "weight": f"deepseek-v3.{name}", "split": "tune"}
                 for name, n, k in DEEPSEEK_V3 for m in DEEPSEEK_M]
    if split in (None, "heldout"):
        # A held-out weight shape that is also one of DeepSeek-V3's (the zoo has other models' q_a_proj, 1536 x
        # 7168) was seen by the fit: it is left out, so that the held-out part holds only unseen shapes.
        tuned = {(n, k) for _, n, k in DEEPSEEK_V3}
        rows += [{**r, "split": "heldout"} for r in zoo_rows("heldout") if (r["N"], r["K"]) not in tuned]
    return rows


def torch_blockwise_support() -> str:
    """"" where torch._scaled_mm runs block-wise scales on this GPU, else why not (its first error line)."""
    a, b, sa, sb = random_blockwise_operands(128, 256, 256, device="cuda")
    try:
        torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        return ""
    except (RuntimeError, NotImplementedError) as e:
        return str(e).splitlines()[0]


def run_blockwise(rows: list[dict], timer: Timer, all_kernels: bool, check: bool, progress: bool,
                  rounds: int) -> tuple[list[dict], str]:
    torch_why = torch_blockwise_support()
    bf16_kernels = [k for k in kernels.blockwise_kernel_names() if k.endswith("_bf16")]
    out = []
    bar = progress_bar(len(rows), progress)
    for row in rows:
        M, N, K = row["M"], row["N"], row["K"]
        a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
        ra, rb = random_scales(M, device="cuda", shape=(M, 1)), random_scales(N, device="cuda", shape=(1, N))
        ours = lambda: ops.scaled_mm(a, b, sa, sb)  # noqa: E731
        theirs = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
        torch_wrong = None
        if check:
            idx = torch.randperm(M, device="cuda")[: min(M, 64)]
            check_against_reference(ours()[idx], a[idx], b, sa[idx], sb, use_fast_accum=False,
                                    what=f"blockwise M={M} N={N} K={K}")
            # torch's result is checked too: torch 2.11 returns a wrong one, without an error, where K / 128 is
            # not a multiple of 4 (blockwise_dispatch.h); such a row is no speed comparison.
            torch_wrong = _torch_wrong(theirs, a, b, sa, sb, idx) if not torch_why else None
        fns = {"fp8ext_us": ours, "fp8ext_rowwise_us": lambda: ops.scaled_mm(a, b, ra, rb)}
        if not torch_why:
            fns["torch_blockwise_us"] = theirs
        record = {**row, "kernel": kernels.selected_blockwise_kernel(M, N, K), **timed_or_failed(timer, fns, rounds)}
        if torch_wrong is not None:
            record["torch_blockwise_wrong"] = torch_wrong
        if all_kernels and row["split"] in ("tune", "custom"):
            per = {}
            for k in bf16_kernels:
                with kernels.force_kernel(k):
                    per[k] = timed_or_failed(timer, {k: ours}, 1)[k]
            record["kernels_us"] = per
        out.append(record)
        del a, b, sa, sb
        bar(f"{M}x{N}x{K}: {_fmt(ratio(record.get('torch_blockwise_us'), record['fp8ext_us']))} vs torch, "
            f"{_fmt(ratio(record['fp8ext_rowwise_us'], record['fp8ext_us']))} vs row-wise")
    bar(None)
    return out, torch_why


def _torch_wrong(theirs, a, b, sa, sb, idx):
    """Whether torch's block-wise result breaks the float64 bound on the rows idx; None where torch declined."""
    try:
        out = theirs()
    except (RuntimeError, NotImplementedError):
        return None
    try:
        check_against_reference(out[idx], a[idx], b, sa[idx], sb, use_fast_accum=False)
    except AssertionError:
        return True
    return False


def _fmt(x) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def summarize(rows: list[dict], torch_why: str) -> dict:
    """Per split and M group: geomean of peer time / fp8ext block-wise time against torch block-wise (over the rows
    where torch's result was right, where it was checked) and against fp8ext row-wise, the worst row, and the rows
    below 0.90x; the rows where torch's result was wrong; for the tuning part, how far the dispatch's pick is from
    the fastest kernel (geomean and worst of its time / the best kernel's)."""
    out = {"torch._scaled_mm block-wise": "available" if not torch_why else f"unavailable: {torch_why}"}
    for split in ("tune", "heldout", "custom"):
        for gname, pred in GROUPS + (("all", lambda m: True),):
            group = [r for r in rows if r["split"] == split and pred(r["M"])]
            if not group:
                continue
            entry = {"rows": len(group)}
            wrong = sum(bool(r.get("torch_blockwise_wrong")) for r in group)
            if wrong:
                entry["torch result wrong"] = wrong
            for tag, col in (("vs torch blockwise", "torch_blockwise_us"), ("vs fp8ext rowwise", "fp8ext_rowwise_us")):
                ratios = [(ratio(r.get(col), r["fp8ext_us"]), r) for r in group
                          if col != "torch_blockwise_us" or not r.get("torch_blockwise_wrong")]
                ratios = [(x, r) for x, r in ratios if x is not None]
                if not ratios:
                    continue
                worst = min(ratios, key=lambda x: x[0])
                entry[tag] = {"geomean": geomean(x for x, _ in ratios),
                              "worst": [round(worst[0], 3), worst[1]["M"], worst[1]["N"], worst[1]["K"],
                                        worst[1]["kernel"]],
                              "below 0.90": sum(x < 0.90 for x, _ in ratios)}
            picks = [(r["fp8ext_us"] / min(v for v in r["kernels_us"].values() if isinstance(v, float)), r)
                     for r in group if r.get("kernels_us")]
            if picks:
                worst = max(picks, key=lambda x: x[0])
                entry["dispatch / best kernel"] = {"geomean": geomean(x for x, _ in picks),
                                                   "worst": [round(worst[0], 3), worst[1]["M"], worst[1]["N"],
                                                             worst[1]["K"], worst[1]["kernel"]]}
            out[f"{split} {gname}"] = entry
    return out


def print_table(rows: list[dict]) -> None:
    cols = [("split", ">7"), ("M", ">6"), ("N", ">6"), ("K", ">6"), ("fp8ext", ">8.1f"), ("torch", ">8"),
            ("rowwise", ">8.1f"), ("x torch", ">7"), ("x row", ">6.2f"), ("kernel", "<32")]

    def cells(r):
        t = r.get("torch_blockwise_us")
        x = ratio(t, r["fp8ext_us"])
        torch_cell = (f"{t:.1f}" + ("!" if r.get("torch_blockwise_wrong") else "")) if isinstance(t, float) else "-"
        return {"split": r["split"], "M": r["M"], "N": r["N"], "K": r["K"], "fp8ext": r["fp8ext_us"],
                "torch": torch_cell, "rowwise": r["fp8ext_rowwise_us"],
                "x torch": f"{x:.2f}" if x is not None else "-",
                "x row": ratio(r["fp8ext_rowwise_us"], r["fp8ext_us"]) or float("nan"), "kernel": r["kernel"]}
    print_rows(cols, rows, cells)


@register_suite("blockwise", help="block-scaled GEMMs (DeepSeek-V3 layers, zoo held-out rows) against torch "
                "block-wise and fp8ext row-wise (--split, or --shapes)", takes=("shapes", "split"),
                summary_title="geomean speed-up of fp8ext block-wise "
                "(peer time / fp8ext time)", options={"--all-kernels": dict(action="store_true", help=(
                    "blockwise suite: also time every bf16 block-scaled kernel forced, on the tuning part or the "
                    "--shapes rows; grouped suite: every grouped kernel by name"))},
                defaults={"rep_ms": 60})
def blockwise(args) -> dict:
    rows, torch_why = run_blockwise(blockwise_rows(args.split, args.shapes), Timer(rep_ms=args.rep_ms),
                                    args.all_kernels, check=not args.no_check, progress=not args.quiet,
                                    rounds=args.rounds)
    print_table(rows)
    return {"method": f"{TIMER_METHOD}, {args.rounds} interleaved rounds of {args.rep_ms} ms per peer; "
                      "fresh random e4m3 operands and positive scales in torch's layouts per row; bf16 output, "
                      "no bias; row-wise: fp8ext's default dispatch on the same a, b with (M, 1) / (1, N) scales; "
                      "with checking on, fp8ext's and torch's results against the float64 bound on up to 64 rows, "
                      "a row where torch's is wrong (torch_blockwise_wrong) left out of the comparison with torch",
            "sm_count": torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count,
            "summary": summarize(rows, torch_why), "rows": rows}
