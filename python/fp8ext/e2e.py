"""End to end: a Llama decoder stack in bf16, converted with fp8ext.convert, and with torch's own row-wise FP8.

    python -m fp8ext.e2e                                # 8B and 70B layer shapes, 2 layers each
    python -m fp8ext.e2e --config 8b --layers 4 --compile --json bench/results/e2e.json

The model is transformers' LlamaForCausalLM with random weights in bf16 and Llama-3 layer shapes (8B: hidden 4096,
intermediate 14336, 32 heads, 8 KV heads; 70B: 8192, 28672, 64, 8), a few layers and the full vocabulary. Three
variants of the same weights:

    bf16           the model as built
    fp8ext         fp8ext.convert(model): every Linear but lm_head a Float8Linear (quantize_rowwise + scaled_mm)
    torch_rowwise  the same FP8 weights and scales, activations quantized per token with plain torch ops and the
                   GEMM by torch._scaled_mm row-wise (TorchRowwiseLinear below): the peer fp8ext replaces

Measured: prefill (batch x seq 1x2048 and 8x512, logits of the last token) and decode (one token per sequence for
batch 1, 8 and 64 against a static KV cache of --ctx tokens), eager, replayed as a CUDA graph (decode) and under
torch.compile (--compile); ms per forward (median of CUDA-event timings), each variant's ratio to bf16, and the
largest relative error (per token, L2) of the final hidden states and of the logits against bf16.
Needs an sm_90 GPU (H100/H200), a CUDA build of fp8ext and transformers.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from .nn import Float8Linear, convert

CONFIGS = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2),  # tests
}
LLAMA3_VOCAB = 128256
PREFILL = [(1, 2048), (8, 512)]
DECODE_BATCHES = [1, 8, 64]
E4M3 = torch.float8_e4m3fn


class TorchRowwiseLinear(nn.Module):
    """The peer: a Float8Linear's FP8 weight and per-row scales, with the activation quantized per token in plain
    torch ops (the formula of fp8ext.quantize_rowwise, which torch.compile fuses) and the GEMM by
    torch._scaled_mm row-wise, bias added after (torch's row-wise path takes no bias everywhere)."""

    def __init__(self, f8: Float8Linear):
        super().__init__()
        self.in_features, self.out_features, self.use_fast_accum = f8.in_features, f8.out_features, f8.use_fast_accum
        self.weight, self.bias = f8.weight, f8.bias
        self.weight_scale = nn.Parameter(f8.weight_scale.detach().view(1, -1), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        amax = x2.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
        scale = amax / 448.0
        xq = (x2.float() / scale).clamp(-448.0, 448.0).to(E4M3)
        out = torch._scaled_mm(xq, self.weight.t(), scale, self.weight_scale, out_dtype=x.dtype,
                               use_fast_accum=self.use_fast_accum)
        if self.bias is not None:
            out = out + self.bias.to(x.dtype)
        return out.view(*x.shape[:-1], self.out_features)


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise SystemExit(f"fp8ext.e2e: needs transformers ({e}); pip install transformers") from e
    return transformers


def build_model(config: str, layers: int, vocab: int, device, seed: int = 0) -> nn.Module:
    """LlamaForCausalLM with `config`'s layer shapes, random bf16 weights initialised on `device`."""
    tf = _transformers()
    cfg = tf.LlamaConfig(**CONFIGS[config], num_hidden_layers=layers, vocab_size=vocab,
                         max_position_embeddings=8192, rope_theta=500000.0, attn_implementation="sdpa")
    torch.manual_seed(seed)
    with torch.device(device):
        model = tf.LlamaForCausalLM(cfg)
    return model.to(torch.bfloat16).eval()


def variants(model: nn.Module) -> tuple[dict[str, nn.Module], dict]:
    """{"bf16", "fp8ext", "torch_rowwise"} models of the same weights, and fp8ext.convert's report as a dict."""
    fp8 = copy.deepcopy(model)
    report = convert(fp8)
    peer = copy.deepcopy(fp8)
    for name, module in list(peer.named_modules()):
        if isinstance(module, Float8Linear):
            parent, _, child = name.rpartition(".")
            setattr(peer.get_submodule(parent), child, TorchRowwiseLinear(module))
    return ({"bf16": model, "fp8ext": fp8, "torch_rowwise": peer},
            {"swapped": len(report.swapped), "skipped": [list(s) for s in report.skipped]})


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest per-token relative L2 error of `out` against `ref`."""
    out, ref = out.float().flatten(0, -2), ref.float().flatten(0, -2)
    return float(((out - ref).norm(dim=-1) / ref.norm(dim=-1).clamp(min=1e-30)).max())


def prefill(model: nn.Module, ids: torch.Tensor):
    return model(ids, use_cache=False, logits_to_keep=1, output_hidden_states=True)


def decode_step(model: nn.Module, batch: int, ctx: int, vocab: int, device) -> Callable[[], torch.Tensor]:
    """One decode step: `batch` new tokens at position `ctx` of a static KV cache prefilled with `ctx` tokens. The
    step always writes the same cache slot, so it can be repeated and captured as a CUDA graph."""
    tf = _transformers()
    gen = torch.Generator(device="cpu").manual_seed(1)
    cache = tf.StaticCache(config=model.config, max_cache_len=ctx + 1)
    context = torch.randint(0, vocab, (batch, ctx), generator=gen).to(device)
    model(context, past_key_values=cache, use_cache=True, logits_to_keep=1)
    ids = torch.randint(0, vocab, (batch, 1), generator=gen).to(device)
    pos = torch.full((1,), ctx, dtype=torch.long, device=device)
    position_ids = pos.expand(batch, 1)
    return lambda: model(ids, past_key_values=cache, cache_position=pos, position_ids=position_ids,
                         use_cache=True).logits


def cuda_graph(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out

    return replay


def time_ms(fn: Callable[[], object], warmup: int = 3, iters: int = 20) -> float:
    """Median wall time of fn() on the GPU in ms, by CUDA events around each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _ratios(ms: dict[str, float]) -> dict[str, float]:
    return {name: ms["bf16"] / t for name, t in ms.items() if name != "bf16" and t > 0}


def _guarded(fn: Callable[[], object]):
    # One failing mode (a capture or compile that this model or torch version cannot do) is recorded, not fatal.
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def compare(config: str = "8b", layers: int = 2, vocab: int = LLAMA3_VOCAB, device="cuda",
            prefill_shapes=PREFILL, decode_batches=DECODE_BATCHES, ctx: int = 256, timed: bool = True,
            compiled: bool = False, iters: int = 20) -> dict:
    """One config: accuracy of each variant against bf16 and, with `timed` (a CUDA device), ms per forward."""
    model = build_model(config, layers, vocab, device)
    models, report = variants(model)
    result = {"config": config, "shapes": CONFIGS[config], "layers": layers, "vocab": vocab, "ctx": ctx,
              "convert": report, "prefill": [], "decode": []}
    with torch.inference_mode():
        for batch, seq in prefill_shapes:
            ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seq)).to(device)
            outs = {name: prefill(m, ids) for name, m in models.items()}
            ref = outs["bf16"]
            row = {"batch": batch, "seq": seq, "rel_err": {
                name: {"hidden": rel_err(o.hidden_states[-1], ref.hidden_states[-1]),
                       "logits": rel_err(o.logits, ref.logits)} for name, o in outs.items() if name != "bf16"}}
            del outs, ref
            if timed:
                row["ms"] = {name: time_ms(lambda m=m: prefill(m, ids), iters=iters) for name, m in models.items()}
                row["ratio_vs_bf16"] = _ratios(row["ms"])
                if compiled:
                    row["compiled_ms"] = {name: _guarded(lambda m=m: time_ms(
                        lambda f=torch.compile(m): prefill(f, ids), iters=iters)) for name, m in models.items()}
            result["prefill"].append(row)
        for batch in decode_batches:
            steps = {name: decode_step(m, batch, ctx, vocab, device) for name, m in models.items()}
            logits = {name: step() for name, step in steps.items()}
            row = {"batch": batch, "rel_err": {name: {"logits": rel_err(lg, logits["bf16"])}
                                               for name, lg in logits.items() if name != "bf16"}}
            if timed:
                row["ms"] = {name: time_ms(step, iters=iters) for name, step in steps.items()}
                row["ratio_vs_bf16"] = _ratios(row["ms"])
                graphed = {name: _guarded(lambda s=s: time_ms(cuda_graph(s), iters=iters)) for name, s in steps.items()}
                row["graph_ms"] = graphed
                if all(isinstance(v, float) for v in graphed.values()):
                    row["graph_ratio_vs_bf16"] = _ratios(graphed)
            result["decode"].append(row)
    return result


def _refusal() -> Optional[str]:
    from . import ops
    if not torch.cuda.is_available():
        return "fp8ext.e2e: needs a CUDA GPU (an sm_90 H100/H200); none is available"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"fp8ext.e2e: needs an sm_90 GPU (H100/H200), this is {torch.cuda.get_device_name()}"
    if not ops.kernel_names():
        return "fp8ext.e2e: this fp8ext build has no CUDA kernels (built without CUDA)"
    return None


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fp8ext.e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="8b,70b", help="comma-separated: 8b, 70b (default both)")
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument("--vocab", type=int, default=LLAMA3_VOCAB, help=f"vocabulary size (default {LLAMA3_VOCAB})")
    p.add_argument("--ctx", type=int, default=256, help="decode: tokens already in the KV cache (default 256)")
    p.add_argument("--iters", type=int, default=20, help="timed forwards per measurement (default 20)")
    p.add_argument("--compile", action="store_true", help="also time prefill under torch.compile (slow to build)")
    p.add_argument("--json", type=Path, help="write the record here")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    """The record: run_record()'s header and one compare() per config. Raises SystemExit (one line) without an
    sm_90 GPU and a CUDA build."""
    why = _refusal()
    if why:
        raise SystemExit(why)
    from .bench import run_record
    record = {**run_record(), "suite": "e2e", "results": []}
    for config in args.config.split(","):
        record["results"].append(compare(config.strip(), args.layers, args.vocab, "cuda", ctx=args.ctx,
                                         compiled=args.compile, iters=args.iters))
        torch.cuda.empty_cache()
    return record


def _summary(record: dict) -> str:
    lines = []
    for r in record["results"]:
        lines.append(f"{r['config']} ({r['layers']} layers, vocab {r['vocab']}): {r['convert']['swapped']} Linears "
                     "converted")
        for kind, rows in (("prefill", r["prefill"]), ("decode", r["decode"])):
            for row in rows:
                shape = f"{row['batch']}x{row['seq']}" if kind == "prefill" else f"batch {row['batch']}"
                ms = "  ".join(f"{n} {t:.3f} ms" for n, t in row["ms"].items())
                ratio = "  ".join(f"{n} {x:.2f}x" for n, x in row["ratio_vs_bf16"].items())
                err = "  ".join(f"{n} {max(e.values()):.2e}" for n, e in row["rel_err"].items())
                lines.append(f"  {kind} {shape}: {ms} | vs bf16: {ratio} | max rel err: {err}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    why = _refusal()
    if why:
        print(why)
        return 1
    record = run(args)
    print(_summary(record))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
