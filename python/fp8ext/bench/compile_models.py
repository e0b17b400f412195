"""The compile suite's model section: Llama-3-8B-shaped models (transformers, random weights, attention
sdpa_packed_gqa) compiled with and without fp8ext.compile.

Runs, each the model compiled (inductor, default mode, static shapes, one graph per shape) with the switch in the
state named:

    bf16                      the bf16 model, switch off
    fp8ext_fused              fp8ext.convert(model, fuse_siblings=True), switch on: the quantize fused into RMSNorm
                              and SiLU-mul, fp8ext's GEMMs
    fp8ext_fused_no_switch    the same model, switch off: the quantize is a launch of its own
    torchao_switch            torchao's Float8DynamicActivationFloat8WeightConfig(PerRow()), switch on: its
                              torch._scaled_mm calls get fp8ext's kernels among Inductor's choices
    torchao                   the same model, switch off

Shape by shape, each run is compiled in turn (the first call: `compile_s`, summed over the shapes) and captured as a
CUDA graph; then every run's graphs are timed in interleaved turns: decode at batch 1 and 8 (one token against a
static KV cache of 256) and prefill 1 x 2048 (the last token's logits). A torch.profiler trace of one batch-1 decode
replay counts each run's kernels per layer, its quantize kernels and fp8ext's kernels. Every run's compile of a shape
starts from caches of its own (``torch._inductor.utils.fresh_cache``: an empty Inductor and Triton cache directory and
Inductor's in-memory caches cleared), so that `compile_s` is a cold compile for each run and no run finds another's
tuning; within one compile, the layers after the first find their GEMMs' and kernels' tunings from the first, as in
any compile. torchao's quantize_ sets Inductor options for the process (its `set_inductor_config`, on by default:
coordinate-descent tuning among them); the torchao runs compile under them and the others under Inductor's defaults
(`inductor_config_torchao_runs` in the record).
"""
from __future__ import annotations

import copy
import time
from typing import Callable, Optional

import torch

from .. import compile as fp8ext_compile
from ..nn import convert
from . import llama_models
from .common import geomean, guarded
from .suites.model import time_ms

RUNS = (("bf16", "bf16", False), ("fp8ext_fused", "fp8ext_fused", True),
        ("fp8ext_fused_no_switch", "fp8ext_fused", False), ("torchao_switch", "torchao", True),
        ("torchao", "torchao", False))
DECODE_BATCHES = (1, 8)
PREFILL = (1, 2048)
CTX = 256


def _compiled_forward(model, run: str) -> Callable:
    """The model's forward through one torch.compile'd function of this run's own: a code object per run, so that
    Dynamo's cache, which does not see the switch, never hands one run another's graph. The whole model is one graph
    per shape: compiled layer by layer, each of HF's layers would be a graph of its own (its layer_idx, which indexes
    the KV cache, is specialised), 32 compilations per shape."""
    namespace: dict = {}
    exec(f"def model_{run}(model, *args, **kwargs):\n    return model.forward(*args, **kwargs)\n", namespace)
    compiled = torch.compile(namespace[f"model_{run}"], dynamic=False)
    return lambda *args, **kwargs: compiled(model, *args, **kwargs)


def _steps(model, step_model, vocab: int, shapes: tuple, device="cuda") -> dict:
    """The steps of ``shapes``, each run by ``step_model`` (the decode steps prefill their caches with the eager
    model)."""
    steps = {f"decode_b{b}": (lambda b=b: llama_models.decode_step(model, b, CTX, vocab, device, step_model))
             for b in DECODE_BATCHES}
    ids = torch.randint(0, vocab, PREFILL, generator=torch.Generator().manual_seed(7)).to(device)
    steps["prefill_1x2048"] = lambda: (lambda: step_model(ids, use_cache=False, logits_to_keep=1).logits)
    return {name: make() for name, make in steps.items() if name in shapes}


def _torchao_model(base, inductor_config) -> tuple:
    """(torchao's PerRow model of ``base``, or why it could not be built; the Inductor settings its quantize_ made).
    Those settings (its ``set_inductor_config``, on by default: coordinate-descent tuning and others) are process-wide;
    they are taken back here and applied to the torchao runs' compiles alone, so that the other runs compile under
    Inductor's defaults, as they would in a process without torchao."""
    before = inductor_config.get_config_copy()
    model = guarded(lambda: llama_models.torchao_variant(base))
    after = inductor_config.get_config_copy()
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    inductor_config.load_config({k: before[k] for k in changed})
    return model, changed


def _cold_caches():
    """Empty Inductor and Triton caches for one compile (module docstring); the directory is kept, since the graphs
    compiled in it go on loading from it."""
    from torch._inductor.utils import fresh_cache  # torch 2.11, fp8ext's floor, has it (and no older name)
    return fresh_cache(delete=False)


def _profile(replay, layers: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels_per_step": len(names), "kernels_per_layer": len(names) / layers,
            "quantize_kernels_per_step": sum("quantize" in n for n in names),
            "fp8ext_kernels_per_step": sum("fp8ext" in n for n in names),
            "cublas_kernels_per_step": sum(n.startswith(("nvjet", "sm90_xmma", "cutlass3x")) for n in names)}


SHAPES = ("decode_b1", "decode_b8", "prefill_1x2048")


def phase_seconds() -> dict:
    """Seconds spent so far in each of Dynamo's and Inductor's timed phases (torch._dynamo.utils' dynamo_timed
    metrics), to tell where a compile's time goes."""
    from torch._dynamo.utils import compilation_time_metrics
    return {k: float(sum(v)) for k, v in compilation_time_metrics.items()}


def phase_deltas(before: dict, after: dict, top: int = 14) -> dict:
    """The ``top`` phases that took longest between two phase_seconds() readings (nested phases count in their
    parents too), in seconds."""
    spent = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: round(v, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:top] if v > 0.05}


def model_section(layers: int, quiet: bool = False, iters: int = 30, rounds: int = 3, runs=None,
                  shapes=SHAPES, budget_s: Optional[float] = None, inductor_pdl: bool = False) -> dict:
    """``runs``: the names of RUNS to compile and time (default all); ``shapes``: of SHAPES. Each run and shape is a
    compilation of the whole model, taken shape by shape (every run's, in turn), so that a ``budget_s`` (seconds for
    the compilations) that runs out leaves whole shapes out, never one run of a pair. ``inductor_pdl``: every run
    compiles with Inductor's programmatic dependent launch (``triton.enable_pdl``, off by default in torch), which
    lets each Triton kernel start while the kernel before it finishes, and lets the kernel after it (fp8ext's decode
    GEMMs among them) start early too."""
    import torch._inductor.config as inductor_config
    base = llama_models.build_model("8b", layers, llama_models.LLAMA3_VOCAB, "cuda", attention="sdpa_packed_gqa")
    models = {"bf16": base}
    models["fp8ext_fused"] = copy.deepcopy(base)
    convert(models["fp8ext_fused"], fuse_siblings=True)
    errors, ao_config = {}, {}
    # in RUNS' order: every compile starts from caches of its own, so none finds another's tunings
    todo = [r for r in RUNS if runs is None or r[0] in runs]
    if any(variant == "torchao" for _, variant, _ in todo):
        ao, ao_config = _torchao_model(base, inductor_config)
        if isinstance(ao, str):
            errors["torchao"] = ao
        else:
            models["torchao"] = ao
    for run, variant, _ in todo:
        if variant not in models:
            errors[run] = errors.get(variant, "not built")
    todo = [r for r in todo if r[1] in models]
    if not quiet:
        print(f"model section: variants built ({', '.join(models)}); compiling", flush=True)
    graphs = {run: {} for run, _, _ in todo}
    phases: dict = {}
    compile_s = {run: 0.0 for run, _, _ in todo}
    profiles, start = {}, time.perf_counter()
    pdl = {"triton.enable_pdl": True} if inductor_pdl else {}  # torch's default is off; patched only when asked
    with inductor_config.patch({"fx_graph_cache": False, **pdl}), torch.no_grad():
        steps = {}
        for run, variant, _ in todo:
            forward = _compiled_forward(models[variant], run)
            steps[run] = _steps(models[variant], forward, llama_models.LLAMA3_VOCAB, shapes)
        for name in shapes:
            for run, variant, switch in todo:
                if name not in steps[run]:
                    continue
                if budget_s is not None and time.perf_counter() - start > budget_s:
                    graphs[run][name] = "not compiled: out of --model-budget-s"
                    continue
                (fp8ext_compile.enable if switch else fp8ext_compile.disable)()
                with _cold_caches(), inductor_config.patch(ao_config if variant == "torchao" else {}):
                    began, before = time.perf_counter(), phase_seconds()
                    got = guarded(steps[run][name])
                    torch.cuda.synchronize()
                    compile_s[run] += time.perf_counter() - began
                    phases[f"{run} {name}"] = phase_deltas(before, phase_seconds())
                    if not quiet:
                        print(f"model section: {run} {name}: first call {time.perf_counter() - began:.1f} s",
                              flush=True)
                    graphs[run][name] = got if isinstance(got, str) else guarded(
                        lambda s=steps[run][name]: llama_models.cuda_graph(s))
                fp8ext_compile.disable()
                if name == "decode_b1" and not isinstance(graphs[run][name], str):
                    got = guarded(lambda replay=graphs[run]["decode_b1"]: _profile(replay, layers))
                    profiles[run] = got if isinstance(got, dict) else {"error": got}
    ms = {}
    for name in shapes:
        fns = {run: g[name] for run, g in graphs.items() if name in g and not isinstance(g[name], str)}
        ms[name] = {**{run: g[name] for run, g in graphs.items() if isinstance(g.get(name), str)},
                    **time_ms(fns, iters, rounds)}
    del graphs, models
    torch.cuda.empty_cache()
    return summarize_model({"config": "8b", "layers": layers, "attention": "sdpa_packed_gqa",
                            "inductor_pdl": inductor_pdl, "ms": ms,
                            "inductor_config_torchao_runs": ao_config,
                            "compile_s": compile_s, "compile_phases_s": phases, "profile_decode_b1": profiles,
                            "errors": errors})


def merge_model_parts(parts: list) -> dict:
    """One model section of several, each of which timed some runs and shapes (bench/fanout.py): the times of each
    shape side by side, compile_s summed per run, and the ratios taken again. A ratio only ever divides two times
    that one part took."""
    merged = {k: parts[0].get(k) for k in ("config", "layers", "attention", "inductor_pdl")}
    merged.update({"ms": {}, "compile_s": {}, "compile_phases_s": {}, "profile_decode_b1": {}, "errors": {}})
    for part in parts:
        for name, times in part["ms"].items():
            merged["ms"].setdefault(name, {}).update(times)
        for run, s in part["compile_s"].items():
            merged["compile_s"][run] = merged["compile_s"].get(run, 0.0) + s
        for key in ("compile_phases_s", "profile_decode_b1", "errors"):
            merged[key].update(part[key])
    return summarize_model(merged)


def summarize_model(raw: dict) -> dict:
    """The model section's ratios, kernel counts and summary from its times, compile seconds and profiles."""
    ms, compile_s, profiles = raw["ms"], raw["compile_s"], raw["profile_decode_b1"]

    def over(name, slow, fast):
        a, b = ms.get(name, {}).get(slow), ms.get(name, {}).get(fast)
        return a / b if isinstance(a, float) and isinstance(b, float) else None

    torchao_ratios = {"decode_b1_ratio": over("decode_b1", "torchao", "torchao_switch"),
                      "decode_b8_ratio": over("decode_b8", "torchao", "torchao_switch"),
                      "prefill_ratio": over("prefill_1x2048", "torchao", "torchao_switch")}
    fused = {"decode_b1_vs_bf16": over("decode_b1", "bf16", "fp8ext_fused"),
             "decode_b8_vs_bf16": over("decode_b8", "bf16", "fp8ext_fused"),
             "prefill_vs_bf16": over("prefill_1x2048", "bf16", "fp8ext_fused"),
             "decode_b1_switch_vs_no_switch": over("decode_b1", "fp8ext_fused_no_switch", "fp8ext_fused")}
    kernels = {"with_fused_quantize": (profiles.get("fp8ext_fused") or {}).get("kernels_per_layer"),
               "without": (profiles.get("fp8ext_fused_no_switch") or {}).get("kernels_per_layer")}
    summary = {**{f"torchao with/without switch {k}": v for k, v in torchao_ratios.items()},
               **{f"fp8ext_fused compiled {k}": v for k, v in fused.items()},
               "compile_s torchao with / without": f"{compile_s.get('torchao_switch')} / {compile_s.get('torchao')}",
               "kernels per layer fp8ext_fused with / without the fused quantize":
                   f"{kernels['with_fused_quantize']} / {kernels['without']}"}
    return {**raw, "torchao": torchao_ratios, "fp8ext_fused": fused, "kernels_per_layer": kernels,
            "summary": summary, "geomean_torchao_ratio": geomean([v for v in torchao_ratios.values() if v])
            if any(torchao_ratios.values()) else None}
