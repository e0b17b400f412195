"""grouped: fp8ext.scaled_grouped_mm on MoE expert layers, against torch._scaled_grouped_mm and a loop over experts.

Rows: the expert projections of DeepSeek-V3 (G = 32 experts per GPU and 256; N x K = 4096 x 7168 gate-up,
7168 x 2048 down; top-8), Qwen3-30B-A3B (G = 128; 1536 x 2048, 2048 x 768; top-8), Qwen3-235B-A22B (G = 128;
3072 x 4096, 4096 x 1536; top-8) and Mixtral-8x22B (G = 8; 32768 x 6144, 6144 x 16384; top-2), at 1 to 8192
tokens, routed uniformly, by a Zipf law (s = 1.2) or all to one expert; the routed rows (tokens x top-k) are
grouped by expert, 2d x 3d with offs, bf16 output: row-wise scales with fast and precise accumulation, and
block-wise scales (1 x 128 per token, 128 x 128 per weight block, in torch's layouts). Operands are fresh random
FP8 values and scales, the weights `w.transpose(-2, -1)` of [G, N, K] experts.

Peers, on the same tensors: row-wise, torch._scaled_grouped_mm (CUTLASS) and a loop of fp8ext.scaled_mm over the
experts that received rows; block-wise (torch has no grouped form), a loop of fp8ext.scaled_mm and a loop of
torch._scaled_mm, block-wise, over those experts, each expert's rows padded with zero rows to a multiple of 16
for torch (cuBLASLt declines other row counts). A loop's per-expert views and scale copies are made before it is
timed (the host knows the group sizes there); its launches are queued while the GPU is held, as for every peer.
Times: the Timer (L2 flushed before each call, host held out, medians of interleaved turns); `tflops` counts
2 x rows x N x K. With --all-kernels, every grouped kernel that takes the row's scales and accumulation is timed
too, by name, in the same turns (`kernels_us`; --kernels: those that match its patterns): the measurements that the
kernel choice is fitted on.

--models names the models above (judged: the default), others of TUNING_MODELS, the set that
tools/fit_grouped_dispatch.py fits the kernel choice on, or EVEN_GROUPS (with --routings even). --masked adds the
masked form's decode rows (masked_row).
"""
from __future__ import annotations

from fnmatch import fnmatch

import torch

from ... import scaled_grouped_mm, scaled_grouped_mm_masked, scaled_mm
from ..common import E4M3, geomean, guarded, ratio, timed_or_failed
from ..registry import register_suite
from ..timing import TIMER_METHOD, Timer

MODELS = {  # name: (expert counts, top-k, (N, K) of each projection)
    "deepseek-v3": ((32, 256), 8, ((4096, 7168), (7168, 2048))),
    "qwen3-30b-a3b": ((128,), 8, ((1536, 2048), (2048, 768))),
    "qwen3-235b-a22b": ((128,), 8, ((3072, 4096), (4096, 1536))),
    "mixtral-8x22b": ((8,), 2, ((32768, 6144), (6144, 16384))),
}
# Other MoE models, the tuning set that the kernel choice is fitted on (with --all-kernels); the models above are
# the set it is judged on, and the default.
TUNING_MODELS = {
    "olmoe-1b-7b": ((64,), 8, ((2048, 2048), (2048, 1024))),
    "phi-3.5-moe": ((16,), 2, ((12800, 4096), (4096, 6400))),
    "qwen2-57b-a14b": ((64,), 8, ((5120, 3584), (3584, 2560))),
    "granite-3-moe-3b": ((40,), 8, ((1024, 1536), (1536, 512))),
    "gpt-oss-120b": ((128,), 4, ((5760, 2880), (2880, 2880))),
}
# DeepGEMM's contiguous layout as it reports it: 4 groups of 8192 rows (--tokens 32768 --routings even).
EVEN_GROUPS = {"deepgemm-4-groups": ((4,), 1, ((4096, 7168), (7168, 2048)))}
TOKENS = (1, 16, 128, 1024, 8192)
ROUTINGS = ("uniform", "zipf", "one")
TORCH_BLOCKWISE_ROWS = 16  # the torch block-wise loop's experts padded to this many rows
MASKED_M = (1, 2, 4, 8)  # decode: rows per expert of the masked rows (--masked)
MASKED_CAPACITY = 16  # the masked input's rows per expert, of which m are valid


def group_sizes(tokens: int, topk: int, G: int, routing: str, seed: int = 0) -> list[int]:
    """Rows per expert when `tokens` tokens each pick `topk` distinct experts: uniformly, by a Zipf law over a random
    order of the experts, (one) every row to expert 0 (top-k then counts the same token k times), or (even) the same
    number to each."""
    if routing == "one":
        return [tokens * topk] + [0] * (G - 1)
    if routing == "even":
        return [tokens * topk // G] * G
    gen = torch.Generator().manual_seed(seed)
    weights = torch.ones(G) if routing == "uniform" else 1.0 / torch.arange(1, G + 1).double() ** 1.2
    weights = weights[torch.randperm(G, generator=gen)]
    picks = torch.multinomial(weights.expand(tokens, G), min(topk, G), replacement=False, generator=gen)
    return torch.bincount(picks.flatten(), minlength=G).tolist()


def operands(sizes: list[int], K: int, blockwise: bool, w: torch.Tensor, sb: torch.Tensor):
    """(a, b, scale_a, scale_b, offs) of one call: row-wise scale_a [rows], or block-wise [rows, ceil(K / 128)] with
    torch's strides (1, rows)."""
    rows = sum(sizes)
    a = (torch.randn(rows, K, device="cuda") * 2).to(E4M3)
    shape = (-(-K // 128), rows) if blockwise else (rows,)
    sa = torch.exp2(-9 + 4 * torch.rand(shape, device="cuda"))
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    return a, w.transpose(-2, -1), sa.t() if blockwise else sa, sb, offs


def experts(a, b, sa, sb, sizes, blockwise: bool) -> list[tuple]:
    """Each expert's (a_g, b_g, scale_a_g, scale_b_g) with rows, as scaled_mm takes them; block-wise scale_a_g
    copied into torch's layout (strides (1, rows_g))."""
    start, out = 0, []
    for g, n in enumerate(sizes):
        if n:
            rows = slice(start, start + n)
            sa_g = sa[rows].t().contiguous().t() if blockwise else sa[rows].view(-1, 1)
            out.append((a[rows], b[g], sa_g, sb[g] if blockwise else sb[g].view(1, -1)))
        start += n
    return out


def padded(expert: tuple, multiple: int = TORCH_BLOCKWISE_ROWS) -> tuple:
    """An expert's block-wise operands with zero rows (scale 1) appended up to a multiple of `multiple` rows: the
    loop of torch._scaled_mm needs them (cuBLASLt declined groups of other sizes on the H200), made before timing."""
    a, b, sa, sb = expert
    pad = -a.shape[0] % multiple
    if not pad:
        return expert
    a = torch.cat([a.view(torch.uint8), a.new_zeros((pad, a.shape[1]), dtype=torch.uint8)]).view(a.dtype)
    sa = torch.cat([sa, sa.new_ones((pad, sa.shape[1]))]).t().contiguous().t()
    return a, b, sa, sb


def row(timer: Timer, rounds: int, model: str, G: int, topk: int, N: int, K: int, tokens: int, routing: str,
        accum: str, w, scales: dict, kernels: list) -> dict:
    """One row; accum "blockwise" times block-wise scales (their mainloop promotes every K group)."""
    sizes = group_sizes(tokens, topk, G, routing)
    blockwise = accum == "blockwise"
    a, b, sa, sb, offs = operands(sizes, K, blockwise, w, scales[blockwise])
    fast = accum == "fast"
    parts = experts(a, b, sa, sb, sizes, blockwise)
    out = torch.bfloat16
    fns = {"fp8ext": lambda: scaled_grouped_mm(a, b, sa, sb, offs, use_fast_accum=fast),
           "loop": lambda: [scaled_mm(*e, out_dtype=out, use_fast_accum=fast) for e in parts]}
    if blockwise:
        torch_parts = [padded(e) for e in parts]
        fns["torch"] = lambda: [torch._scaled_mm(*e, out_dtype=out) for e in torch_parts]
    else:
        fns["torch"] = lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=out, use_fast_accum=fast)
    named = family(kernels, accum)
    for k in named:
        fns[k] = lambda k=k: torch.ops.fp8ext._scaled_grouped_mm_with_kernel(a, b, sa, sb, offs, None, None, fast, k)
    t = timed_or_failed(timer, fns, rounds)
    rows = sum(sizes)
    us = t.get("fp8ext")
    return {"model": model, "G": G, "tokens": tokens, "topk": topk, "N": N, "K": K, "routing": routing,
            "accum": "precise" if blockwise else accum, "scaling": "blockwise" if blockwise else "rowwise",
            "rows": rows, "rows_per_group": rows / G, "largest_group": max(sizes), "fp8ext_us": us,
            "kernels_us": {k: t.get(k) for k in named},
            "torch_grouped_us": None if blockwise else t.get("torch"),
            "torch_loop_us": t.get("torch") if blockwise else None, "loop_us": t.get("loop"),
            "tflops": 2.0 * rows * N * K / (us * 1e-6) / 1e12 if isinstance(us, float) else None,
            "vs_torch": ratio(t.get("torch"), us), "vs_loop": ratio(t.get("loop"), us)}


def family(kernels: list, accum: str) -> list:
    """The named kernels that take a row's scales and accumulation (block-wise: grp_bw_*)."""
    blockwise = accum == "blockwise"
    return [k for k in kernels if k.startswith("grp_bw_") == blockwise and (blockwise or f"_{accum}_" in k)]


def graphed(call):
    """A CUDA graph of call() (run once first), for replay."""
    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph


def masked_row(timer: Timer, rounds: int, model: str, G: int, N: int, K: int, m: int, accum: str, w,
               scales: dict, kernels: list) -> dict:
    """The masked form for decode: every one of the G experts holds m rows of a [G, MASKED_CAPACITY, K] input
    (masked_m = m each, expected_m = m), captured in a CUDA graph and timed as its replay; beside it, the same rows
    as a contiguous call of fp8ext and (row-wise) of torch._scaled_grouped_mm, eager. weights_tb_s: the experts'
    FP8 weights (G x N x K bytes) over the masked call's time. `kernels`: each of these that takes the row's scales is
    timed too, by name, as a graph of the masked call (kernels_us)."""
    blockwise = accum == "blockwise"
    fast = accum == "fast"
    a = (torch.randn(G, MASKED_CAPACITY, K, device="cuda") * 2).to(E4M3)
    shape = (G, MASKED_CAPACITY, -(-K // 128)) if blockwise else (G, MASKED_CAPACITY)
    sa = torch.exp2(-9 + 4 * torch.rand(shape, device="cuda"))
    counts = torch.full((G,), m, dtype=torch.int32, device="cuda")
    b, sb = w.transpose(-2, -1), scales[blockwise]
    graph = graphed(lambda: scaled_grouped_mm_masked(a, b, sa, sb, counts, use_fast_accum=fast, expected_m=m))
    a2, sa2 = a[:, :m].reshape(G * m, K).contiguous(), sa[:, :m].reshape(G * m, *shape[2:]).contiguous()
    offs = torch.arange(1, G + 1, device="cuda", dtype=torch.int32) * m
    fns = {"masked_graph": graph.replay,
           "fp8ext": lambda: scaled_grouped_mm(a2, b, sa2.t().contiguous().t() if blockwise else sa2, sb, offs,
                                               use_fast_accum=fast)}
    if not blockwise:
        fns["torch"] = lambda: torch._scaled_grouped_mm(a2, b, sa2, sb, offs=offs, out_dtype=torch.bfloat16,
                                                        use_fast_accum=fast)
    named = family(kernels, accum)
    for k in named:
        fns[k] = graphed(lambda k=k: torch.ops.fp8ext._scaled_grouped_mm_with_kernel(
            a, b, sa, sb, None, None, None, fast, k, counts)).replay
    t = timed_or_failed(timer, fns, rounds)
    us = t.get("masked_graph")
    return {"model": model, "G": G, "rows_per_group": m, "N": N, "K": K, "accum": "precise" if blockwise else accum,
            "scaling": "blockwise" if blockwise else "rowwise", "masked_us": us, "fp8ext_us": t.get("fp8ext"),
            "torch_grouped_us": t.get("torch"), "kernels_us": {k: t.get(k) for k in named},
            "weights_tb_s": G * N * K / (us * 1e-6) / 1e12 if isinstance(us, float) else None}


def summarize(rows: list[dict]) -> dict:
    out = {"rows": len(rows)}
    for scaling, accum, peer in (("rowwise", "fast", "torch._scaled_grouped_mm"),
                                 ("rowwise", "precise", "torch._scaled_grouped_mm"),
                                 ("blockwise", "precise", "a loop of torch._scaled_mm")):
        picked = [r for r in rows if r["scaling"] == scaling and r["accum"] == accum]
        name = f"{scaling}{', ' + accum if scaling == 'rowwise' else ''}"
        out[f"geomean vs {peer}, {name}"] = geomean([r["vs_torch"] for r in picked if r["vs_torch"]])
        out[f"geomean vs the loop of fp8ext.scaled_mm, {name}"] = geomean([r["vs_loop"] for r in picked
                                                                          if r["vs_loop"]])
    timed = [r for r in rows if r["vs_torch"] and r["scaling"] == "rowwise"]
    if timed:
        worst = min(timed, key=lambda r: r["vs_torch"])
        out["worst row-wise row vs torch"] = (f"{worst['model']} G={worst['G']} {worst['tokens']} tokens "
                                              f"{worst['routing']} {worst['N']}x{worst['K']} {worst['accum']}: "
                                              f"{worst['vs_torch']:.3f}")
        out["row-wise rows below 0.95 vs torch"] = sum(r["vs_torch"] < 0.95 for r in timed)
    best = [r["tflops"] for r in rows if r["scaling"] == "blockwise" and r["tflops"]]
    if best:
        out["block-wise TFLOP/s, best row"] = max(best)
    return out


def summarize_masked(rows: list) -> dict:
    """The masked rows: the slowest weight read (TB/s) over the rows of 32 to 256 experts, per scaling."""
    out = {"masked rows failed": sum(isinstance(r, str) for r in rows)}
    for scaling in ("rowwise", "blockwise"):
        got = [r for r in rows if isinstance(r, dict) and r["scaling"] == scaling and 32 <= r["G"] <= 256]
        rates = [r["weights_tb_s"] for r in got if r["weights_tb_s"]]
        if rates:
            worst = min(got, key=lambda r: r["weights_tb_s"] or 0.0)
            out[f"masked {scaling}, G 32-256: slowest weight read TB/s"] = (
                f"{min(rates):.2f} ({worst['model']} G={worst['G']} {worst['N']}x{worst['K']} "
                f"{worst['rows_per_group']} rows {worst['accum']})")
    return out


@register_suite("grouped", help="fp8ext.scaled_grouped_mm on MoE expert layers vs torch._scaled_grouped_mm and a "
                                "loop over experts", defaults={"rep_ms": 60},
                options={"--models": dict(default=",".join(MODELS), help="grouped suite: the models, comma-separated ("
                                                           f"judged: {', '.join(MODELS)}; tuning: "
                                                           f"{', '.join(TUNING_MODELS)})"),
                         "--tokens": dict(default=",".join(map(str, TOKENS)),
                                          help="grouped suite: token counts (before top-k), comma-separated"),
                         "--routings": dict(default=",".join(ROUTINGS), help="grouped suite: uniform, zipf, one, even"),
                         "--scalings": dict(default="rowwise,blockwise", help="grouped suite: rowwise, blockwise"),
                         "--masked": dict(action="store_true", help="grouped suite: also the masked form for decode "
                                          "(rows per expert 1, 2, 4, 8; replayed as a CUDA graph)"),
                         "--no-contiguous": dict(action="store_true",
                                                 help="grouped suite: leave the contiguous rows out (with --masked)")})
def grouped_suite(args) -> dict:
    timer = Timer(rep_ms=args.rep_ms)
    accums = [x.strip() for x in args.accum.split(",")] if "rowwise" in args.scalings else []
    accums += ["blockwise"] if "blockwise" in args.scalings else []
    tokens = [int(x) for x in args.tokens.split(",")]
    # --all-kernels is the blockwise suite's option and --kernels the large-m suite's, shared: every grouped kernel, or
    # those that match one of the --kernels patterns (fnmatch), timed by name too
    kernels = list(torch.ops.fp8ext._grouped_kernel_names()) if args.all_kernels or args.kernels else []
    if args.kernels:
        kernels = [k for k in kernels if any(fnmatch(k, pat) for pat in args.kernels.split(","))]
    routings = [x.strip() for x in args.routings.split(",")]
    rows, masked = [], []
    for model in (m.strip() for m in args.models.split(",")):
        counts, topk, projections = {**MODELS, **TUNING_MODELS, **EVEN_GROUPS}[model]
        for G in counts:
            for N, K in projections:
                w = (torch.randn(G, N, K, device="cuda") * 2).to(E4M3)  # one expert set per shape, freshly drawn
                scales = {False: torch.exp2(-9 + 4 * torch.rand(G, N, device="cuda")),  # row-wise [G, N]
                          True: torch.exp2(-9 + 4 * torch.rand(G, -(-N // 128), -(-K // 128), device="cuda"))
                          .transpose(-2, -1)}  # block-wise: the weights' [G, N/128, K/128] scales, transposed
                for n in (() if args.no_contiguous else tokens):
                    for routing in routings:
                        for accum in accums:
                            got = row(timer, args.rounds, model, G, topk, N, K, n, routing, accum, w, scales,
                                      kernels)
                            rows.append(got)
                            if not args.quiet:
                                print(f"{model} G={G} {N}x{K} {n} tokens {routing} {accum}: fp8ext "
                                      f"{got['fp8ext_us']} us, torch {got['torch_grouped_us'] or got['torch_loop_us']}"
                                      f" us, loop {got['loop_us']} us", flush=True)
                for m in (MASKED_M if args.masked else ()):
                    for accum in accums:
                        masked.append(guarded(lambda: masked_row(timer, args.rounds, model, G, N, K, m, accum, w,
                                                                 scales, kernels)))
                del w, scales
                torch.cuda.empty_cache()
    summary = summarize(rows)
    if args.masked:
        summary.update(summarize_masked(masked))
    return {"method": __doc__.split("\n\n")[1].replace("\n", " ") + " " + TIMER_METHOD, "summary": summary,
            "rows": rows, "masked": masked}
