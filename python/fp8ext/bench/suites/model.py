"""model: end to end, a Llama decoder stack in bf16, converted with fp8ext.convert, with torch's own row-wise FP8
and with torchao's row-wise FP8 (the models and their variants: fp8ext.bench.llama_models; --layers decoder layers,
default 2; --no-fused leaves fp8ext_fused out, --no-torchao torchao).

Measured per config: prefill (batch x seq 1x2048 and 8x512, the last token's logits) and decode (one new token
per sequence, batch 1, 8 and 64, against a static KV cache of --ctx tokens; eager and replayed as a CUDA graph):
ms per forward (median of CUDA-event timings, --iters forwards split over --rounds interleaved turns: Timer.forwards
of fp8ext.bench.timing), tokens/s (prefill batch * seq / time, decode batch / time per step), each variant's
speed-up over bf16 and fp8ext's over torch_rowwise and torchao; against bf16, the largest per-token relative L2
error of the final hidden states and the logits, and top-1 agreement (the fraction of positions whose argmax
equals bf16's) over 512 prefill positions (the last 512 // batch positions of each sequence) and over the batch's
decode positions. A failure of one variant or one measurement is recorded as a "failed: ..." string in its place.

Decode is also timed for linears_omitted: the converted model with each Float8Linear replaced by a layer that only
allocates its output. It is everything FP8 does not change (norms, RoPE, attention, the KV cache, the bf16
lm_head), so bf16's time over it is the ceiling of any FP8 linear layer on this model, measured in the same turns
(the summary's "ceiling" entries; no accuracy, its outputs are garbage).

--attention picks transformers' attention for every variant alike: "sdpa" (transformers' own, the default) or
"sdpa_packed_gqa" (decode attention that reads each KV head once, where transformers' sdpa under torch.compile
materializes repeat_kv). Only the attention differs; the linear layers, and so what FP8 changes, are the same.

With --compile, the variants of --compile-variants are also timed under torch.compile (inductor, one graph per
shape): prefill ("compiled") and the decode step replayed as a CUDA graph ("compiled_graph"). Eager HF Llama runs
its norms, rotary embedding, activation and residual adds as many small kernels that FP8 does not speed up; under
inductor they fuse, which is how serving stacks run the model, and the GEMMs' share of the time grows.
"""
from __future__ import annotations

import gc
from typing import Callable, Optional

import torch

from .. import llama_models
from ..common import geomean, guarded, pyplot, ratio, rel_err, timed_or_failed
from ..llama_models import ATTENTION, CONFIGS, LLAMA3_VOCAB, VARIANTS
from ..registry import register_suite
from ..timing import Timer

PREFILL = [(1, 2048), (8, 512)]
DECODE_BATCHES = [1, 8, 64]
TOP1_POSITIONS = 512
FP8EXT_VARIANTS = ("fp8ext", "fp8ext_fused")  # the summary's fp8ext/bf16 lines
# Decode only: the converted model with its FP8 layers omitted (linears_omitted), timed beside the variants; its
# speed-up over bf16 is the ceiling of any FP8 linear layer on this model.
CEILING = "linears_omitted"


def top1_agreement(logits: torch.Tensor, ref: torch.Tensor) -> float:
    """The fraction of positions (every index but the last dimension) where argmax(logits) == argmax(ref)."""
    return float((logits.argmax(dim=-1) == ref.argmax(dim=-1)).float().mean())


def tokens_per_s(tokens: int, ms) -> Optional[float]:
    """Tokens per second of `tokens` tokens in `ms` milliseconds; None where ms is a failure or not positive."""
    r = ratio(tokens, ms)
    return r * 1e3 if r is not None else None


def speedups(ms: dict) -> dict:
    """From ms per variant: each variant's speed over bf16 (bf16 time / its time, = its tokens/s over bf16's),
    fp8ext's over torch_rowwise and over torchao, and fp8ext_fused's over fp8ext; only where both times were
    measured."""
    def over(slow: str, fast: str):
        return ratio(ms.get(slow), ms.get(fast))

    out = {"vs_bf16": {n: over("bf16", n) for n in ms if n != "bf16" and over("bf16", n) is not None}}
    for peer in ("torch_rowwise", "torchao"):
        if over(peer, "fp8ext") is not None:
            out[f"fp8ext_vs_{peer}"] = over(peer, "fp8ext")
    if over("fp8ext", "fp8ext_fused") is not None:
        out["fp8ext_fused_vs_fp8ext"] = over("fp8ext", "fp8ext_fused")
    return out


def timing_entry(ms: dict, tokens: int) -> dict:
    return {"ms": ms, "tokens_per_s": {n: tokens_per_s(tokens, t) for n, t in ms.items()}, "speedup": speedups(ms)}


def time_ms(fns: dict[str, Callable[[], object]], iters: int, rounds: int) -> dict:
    """Median ms per forward of each fn (Timer.forwards: `iters` synchronized calls between CUDA events, split over
    `rounds` interleaved turns); a fn that raises gets its failure string instead."""
    times = timed_or_failed(Timer.forwards(iters), fns, rounds)
    return {n: t / 1e3 if isinstance(t, float) else t for n, t in times.items()}


def accuracy(outputs: dict, ref, metrics: Callable[[object, object], dict]) -> tuple[dict, dict]:
    """rel_err and top-1 entries per non-bf16 variant: metrics(out, ref) -> {"rel_err": ..., "top1": ...}, or the
    failure string of the variant's forward (an output that is a string) or of the metrics."""
    errs, top1 = {}, {}
    for name, out in outputs.items():
        m = out if isinstance(out, str) else guarded(lambda: metrics(out, ref))
        errs[name], top1[name] = (m, m) if isinstance(m, str) else (m["rel_err"], m["top1"])
    return errs, top1


def prefill_row(models, batch, seq, vocab, device, timed, compiled, iters, rounds) -> dict:
    """`compiled`: {variant: the model under torch.compile} to time as well (empty: none)."""
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seq)).to(device)
    keep = max(1, min(seq, TOP1_POSITIONS // batch))
    row = {"batch": batch, "seq": seq, "tokens": batch * seq, "top1_positions": batch * keep}
    run = lambda m: llama_models.prefill(m, ids, keep, hidden=True)  # noqa: E731
    ref = guarded(lambda: run(models["bf16"]))
    if isinstance(ref, str):
        row["rel_err"] = row["top1_agreement"] = {"bf16": ref}
    else:
        def metrics(o, r):
            return {"rel_err": {"hidden": rel_err(o.hidden_states[-1], r.hidden_states[-1]),
                                "logits": rel_err(o.logits, r.logits)}, "top1": top1_agreement(o.logits, r.logits)}
        # One variant's outputs at a time: the logits of 512 positions over the vocabulary are large.
        row["rel_err"], row["top1_agreement"] = {}, {}
        for name, m in models.items():
            if name != "bf16":
                e, t = accuracy({name: guarded(lambda m=m: run(m))}, ref, metrics)
                row["rel_err"].update(e)
                row["top1_agreement"].update(t)
        del ref
    if timed:
        forwards = {n: lambda m=m: llama_models.prefill(m, ids) for n, m in models.items()}
        row["eager"] = timing_entry(time_ms(forwards, iters, rounds), batch * seq)
        if compiled:
            forwards = {n: lambda f=f: llama_models.prefill(f, ids) for n, f in compiled.items()}
            row["compiled"] = timing_entry(time_ms(forwards, iters, rounds), batch * seq)
    return row


def _graphs(steps: dict) -> tuple[dict, dict]:
    """Each step captured as a CUDA graph: ({name: replay} of those captured, {name: failure} of the rest, the
    failures of the steps themselves included)."""
    graphs = {n: s if isinstance(s, str) else guarded(lambda s=s: llama_models.cuda_graph(s)) for n, s in steps.items()}
    return ({n: g for n, g in graphs.items() if not isinstance(g, str)},
            {n: g for n, g in graphs.items() if isinstance(g, str)})


def decode_row(models, batch, ctx, vocab, device, timed, iters, rounds, compiled=None, ceiling=None) -> dict:
    """`compiled`: {variant: the model under torch.compile}, whose decode step is also timed as a CUDA graph
    ("compiled_graph": inductor fuses the layers' small kernels, the graph removes the launches). `ceiling`: the
    linears_omitted model, timed beside the variants as CEILING (no accuracy: its outputs are garbage)."""
    steps = {name: guarded(lambda m=m: llama_models.decode_step(m, batch, ctx, vocab, device))
             for name, m in models.items()}
    logits = {name: s if isinstance(s, str) else guarded(s) for name, s in steps.items()}
    if ceiling is not None and timed:
        steps[CEILING] = guarded(lambda: llama_models.decode_step(ceiling, batch, ctx, vocab, device))
    row = {"batch": batch, "ctx": ctx, "tokens": batch}
    ref = logits.pop("bf16")
    if isinstance(ref, str):
        row["rel_err"] = row["top1_agreement"] = {"bf16": ref}
    else:
        row["rel_err"], row["top1_agreement"] = accuracy(
            logits, ref, lambda o, r: {"rel_err": {"logits": rel_err(o, r)}, "top1": top1_agreement(o, r)})
    del logits, ref
    if timed:
        runnable = {n: s for n, s in steps.items() if not isinstance(s, str)}
        failed = {n: s for n, s in steps.items() if isinstance(s, str)}
        row["eager"] = timing_entry({**failed, **time_ms(runnable, iters, rounds)}, batch)
        ok, not_captured = _graphs(steps)
        row["graph"] = timing_entry({**not_captured, **time_ms(ok, iters, rounds)}, batch)
        del ok
        if compiled:
            csteps = {n: guarded(lambda n=n, f=f: llama_models.decode_step(models[n], batch, ctx, vocab, device,
                                                                            step_model=f))
                      for n, f in compiled.items()}
            ok, not_captured = _graphs(csteps)
            row["compiled_graph"] = timing_entry({**not_captured, **time_ms(ok, iters, rounds)}, batch)
            del ok, csteps
    del steps
    return row


def compare(config: str = "8b", layers: int = 2, vocab: int = LLAMA3_VOCAB, device="cuda",
            prefill_shapes=PREFILL, decode_batches=DECODE_BATCHES, ctx: int = 256, timed: bool = True,
            compiled: bool = False, iters: int = 20, rounds: int = 2, torchao: bool = True,
            compile_variants: Optional[list[str]] = None, fused: bool = True, attention: str = "sdpa") -> dict:
    """One config: accuracy of each variant against bf16 and, with `timed` (a CUDA device), its speed. Every
    prefill shape and decode batch is guarded: its failure is recorded in its row's place. With `compiled`, the
    variants in `compile_variants` (default: all) are also timed under torch.compile: prefill, and the decode step
    replayed as a CUDA graph."""
    model = llama_models.build_model(config, layers, vocab, device, attention=attention)
    models, report, variant_errors = llama_models.variants(model, torchao, fused)
    under_compile = {}
    if compiled and timed:
        names = [n for n in models if compile_variants is None or n in compile_variants]
        under_compile = {n: llama_models.compile_model(models[n]) for n in names}
    ceiling = llama_models.linears_omitted(models["fp8ext"]) if timed and "fp8ext" in models else None
    # The conversions left the replaced bf16 layers in the allocator's cache; every row after the first starts
    # after _free, so the first does too.
    free_memory(device)
    result = {"config": config, "shapes": CONFIGS[config], "layers": layers, "vocab": vocab, "ctx": ctx,
              "attention": attention,
              "convert": report, "variants": list(models), "variant_errors": variant_errors,
              "prefill": [], "decode": []}
    with torch.inference_mode():
        for batch, seq in prefill_shapes:
            row = guarded(lambda: prefill_row(models, batch, seq, vocab, device, timed, under_compile, iters,
                                               rounds))
            result["prefill"].append(row if isinstance(row, dict) else {"batch": batch, "seq": seq, "error": row})
            free_memory(device)
        for batch in decode_batches:
            row = guarded(lambda: decode_row(models, batch, ctx, vocab, device, timed, iters, rounds,
                                              under_compile, ceiling))
            result["decode"].append(row if isinstance(row, dict) else {"batch": batch, "error": row})
            free_memory(device)
    del models, model, under_compile, ceiling
    free_memory(device)
    return result


def free_memory(device) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ---- the record: flat rows, summary, plot ---------------------------------------------------------------------

def flat_rows(results: list[dict]) -> list[dict]:
    """One row per config, phase, shape, mode and variant: ms, tokens/s and speed-up over bf16."""
    rows = []
    for res in results:
        for phase in ("prefill", "decode"):
            for r in res.get(phase, []):
                shape = f"{r['batch']}x{r['seq']}" if phase == "prefill" else f"batch {r['batch']}"
                for mode in ("eager", "graph", "compiled", "compiled_graph"):
                    entry = r.get(mode)
                    if not entry:
                        continue
                    for name, ms in entry["ms"].items():
                        rows.append({"config": res["config"], "phase": phase, "shape": shape, "mode": mode,
                                     "variant": name, "ms": ms, "tokens_per_s": entry["tokens_per_s"].get(name),
                                     "vs_bf16": 1.0 if name == "bf16" else entry["speedup"]["vs_bf16"].get(name)})
    return rows


def _value(x, digits: int = 3):
    return round(x, digits) if isinstance(x, float) else ("n/a" if x is None else x)


def _variant_lines(out: dict, prefix: str, entry: dict, missing) -> None:
    """The summary's "<prefix> <variant>/bf16 tok/s" line of fp8ext (always) and of each other FP8EXT_VARIANTS
    entry measured; `missing` (the row's error) stands in when nothing was measured."""
    for name in FP8EXT_VARIANTS:
        if name == "fp8ext" or name in (entry.get("ms") or {}):
            out[f"{prefix} {name}/bf16 tok/s"] = _value(
                entry.get("speedup", {}).get("vs_bf16", {}).get(name) if entry else missing)


def summarize(results: list[dict]) -> dict:
    """Per config: prefill tokens/s fp8ext/bf16 per shape, decode (CUDA graph) tokens/s fp8ext/bf16 per batch,
    top-1 agreement of fp8ext with bf16, and fp8ext's geomean speed-up over torchao and over torch_rowwise across
    those measurements."""
    out = {}
    for res in results:
        c = res["config"]
        if "error" in res:
            out[f"{c}"] = res["error"]
            continue
        over = {"torchao": [], "torch_rowwise": []}
        for phase, mode in (("prefill", "eager"), ("decode", "graph")):
            for r in res[phase]:
                shape = f"{r['batch']}x{r['seq']}" if phase == "prefill" else f"b={r['batch']}"
                entry = r.get(mode) or {}
                tag = "prefill" if phase == "prefill" else "decode graph"
                extras = (("compiled", "prefill compiled"), ("compiled_graph", "decode compiled graph"))
                for extra, extra_tag in extras:
                    if r.get(extra):
                        _variant_lines(out, f"{c} {extra_tag} {shape}", r[extra], None)
                _variant_lines(out, f"{c} {tag} {shape}", entry, r.get("error"))
                if phase == "decode" and CEILING in (entry.get("ms") or {}):
                    out[f"{c} {tag} {shape} ceiling ({CEILING})/bf16 tok/s"] = _value(
                        entry["speedup"]["vs_bf16"].get(CEILING, entry["ms"][CEILING]))
                for peer in over:
                    over[peer].append(entry.get("speedup", {}).get(f"fp8ext_vs_{peer}"))
                if phase == "prefill":
                    out[f"{c} top-1 agreement {shape} fp8ext"] = _value(
                        r.get("top1_agreement", {}).get("fp8ext", r.get("error")), 4)
        for peer, xs in over.items():
            found = [x for x in xs if x is not None]
            why = res.get("variant_errors", {}).get(peer, "not measured")
            out[f"{c} fp8ext vs {peer} (geomean)"] = round(geomean(found), 3) if found else why
    return out


def plot(rows: list[dict], path: str) -> bool:
    """Tokens/s per variant, one row of panels per config: prefill (eager), decode as CUDA graph, decode eager and,
    with --compile, the compiled decode step as a CUDA graph; a panel with nothing measured is left out."""
    plt = pyplot()
    if plt is None:
        return False
    # Only the panels measured (--phases, --compile).
    panels = [p for p in (("prefill", "eager"), ("decode", "graph"), ("decode", "eager"), ("decode", "compiled_graph"))
              if any((r["phase"], r["mode"]) == p for r in rows)]
    if not panels:
        return False
    configs = list(dict.fromkeys(r["config"] for r in rows))
    fig, axes = plt.subplots(max(1, len(configs)), len(panels), figsize=(5 * len(panels), 3.8 * max(1, len(configs))),
                             squeeze=False)
    for ax_row, config in zip(axes, configs):
        for ax, (phase, mode) in zip(ax_row, panels):
            sel = [r for r in rows if (r["config"], r["phase"], r["mode"]) == (config, phase, mode)]
            shapes = list(dict.fromkeys(r["shape"] for r in sel))
            names = [v for v in VARIANTS if any(r["variant"] == v for r in sel)]
            width = 0.8 / max(1, len(names))
            for i, name in enumerate(names):
                tps = {r["shape"]: r["tokens_per_s"] for r in sel if r["variant"] == name}
                xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(shapes))]
                ax.bar(xs, [tps.get(s) or 0.0 for s in shapes], width, label=name, color=f"C{VARIANTS.index(name)}")
            ax.set_xticks(range(len(shapes)))
            ax.set_xticklabels(shapes)
            ax.set_yscale("log")
            ax.set_ylabel("tokens/s")
            titles = {"graph": "CUDA graph", "compiled_graph": "torch.compile + CUDA graph"}
            ax.set_title(f"{config}: {phase} ({titles.get(mode, mode)})")
            ax.grid(True, axis="y", which="both", alpha=0.3)
            if names:
                ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def method(args) -> str:
    return (f"transformers LlamaForCausalLM, Llama-3 layer shapes, {args.layers} decoder layers, vocabulary "
            f"{args.vocab}, random bf16 weights; variants bf16, fp8ext.convert, fp8ext.convert(fuse_siblings=True) "
            f"(unless --no-fused), torch._scaled_mm row-wise on the same "
            f"FP8 weights, torchao Float8DynamicActivationFloat8WeightConfig(PerRow) (lm_head bf16 in all); ms per "
            f"forward: median of {args.iters} CUDA-event timings in {args.model_rounds} interleaved turns after "
            f"warm-up, no L2 flush (a forward's weights far exceed L2); prefill times the last token's logits; "
            f"accuracy against bf16 on the last {TOP1_POSITIONS} // batch positions of each prefill sequence and on "
            f"each decode step; decode against a static KV cache of {args.ctx} tokens; phases {args.phases}; "
            f"attention {args.attention} in every variant"
            + (f"; also under torch.compile (inductor, dynamic=False; {args.compile_variants}): prefill, and the "
               "decode step replayed as a CUDA graph" if args.compile else ""))


@register_suite("model", help="Llama-3-shaped decoder stack end to end: bf16, fp8ext, torch row-wise, torchao",
                plot=plot, summary_title="model summary (fp8ext/bf16 is the tokens/s ratio)",
                options={"--config": dict(default="8b,70b", help="model suite: comma-separated 8b, 70b"),
                         "--layers": dict(type=int, default=2, help="model suite: decoder layers (default 2)"),
                         "--vocab": dict(type=int, default=LLAMA3_VOCAB, help="model suite: vocabulary size"),
                         "--ctx": dict(type=int, default=256, help="model suite: decode KV cache tokens (256)"),
                         "--iters": dict(type=int, default=20, help="model suite: timed forwards per measurement"),
                         "--model-rounds": dict(type=int, default=2,
                                                help="model suite: interleaved turns the forwards are split into"),
                         "--compile": dict(action="store_true", help="model suite: also time prefill and the decode "
                                           "step (as a CUDA graph) under torch.compile"),
                         "--compile-variants": dict(default="bf16,fp8ext,torchao",
                                                    help="model suite: the variants --compile times (comma-separated)"),
                         "--no-torchao": dict(action="store_true", help="model suite: leave the torchao variant out"),
                         "--no-fused": dict(action="store_true",
                                            help="model suite: leave the fp8ext_fused variant out (memory)"),
                         "--attention": dict(default="sdpa", choices=ATTENTION,
                                             help="model suite: transformers attention of every variant: sdpa, or "
                                                  "sdpa_packed_gqa (decode reads each KV head once)"),
                         "--phases": dict(default="prefill,decode",
                                          help="model suite: prefill, decode or both (comma-separated; each "
                                               "--compile shape is a compilation of its own)")})
def model(args) -> dict:
    phases = {p.strip() for p in args.phases.split(",")}
    if not phases <= {"prefill", "decode"}:
        raise SystemExit(f"--phases: expected prefill, decode or both, got {args.phases!r}")
    shapes = {"prefill_shapes": PREFILL if "prefill" in phases else (),
              "decode_batches": DECODE_BATCHES if "decode" in phases else ()}
    results = []
    for config in (c.strip() for c in args.config.split(",")):
        res = guarded(lambda: compare(config, args.layers, args.vocab, "cuda", ctx=args.ctx, compiled=args.compile,
                                      iters=args.iters, rounds=args.model_rounds, torchao=not args.no_torchao,
                                      compile_variants=[v.strip() for v in args.compile_variants.split(",")],
                                      fused=not args.no_fused, attention=args.attention, **shapes))
        results.append(res if isinstance(res, dict) else {"config": config, "error": res})
        free_memory("cuda")
        if not args.quiet:
            print(f"{config}: done", flush=True)
    return {"method": method(args), "summary": summarize(results), "rows": flat_rows(results), "results": results}
