"""moe: end to end, a Qwen3-30B-A3B-shaped mixture-of-experts decoder stack (transformers Qwen3MoeForCausalLM:
hidden 2048, 128 experts of intermediate size 768, top-8, 32 query and 4 KV heads of 128; --moe-layers layers,
random bf16 weights), converted with fp8ext.convert, against bf16 and against the same FP8 weights run as a loop
over the experts.

Variants, on the same weights:
- bf16: transformers' grouped_mm experts (torch._grouped_mm: one grouped GEMM per projection and no host sync, so
  its decode step replays as a CUDA graph; the eager experts read the routing on the host and cannot be captured);
- fp8ext: fp8ext.convert (each experts module a Float8Experts: two fp8ext.scaled_grouped_mm calls per layer;
  the attention projections Float8Linear);
- fp8ext_fused: fp8ext.convert(fuse_siblings=True): the same, with q, k and v one quantize and one GEMM (unless
  --no-fused);
- fp8ext_loop: the fp8ext model with each Float8Experts run as a loop of fp8ext.scaled_mm over the experts that
  received rows, on its FP8 weights (the group sizes read on the host, as transformers' eager experts do, so its
  decode step is timed eager only).

Measured as the model suite measures (fp8ext.bench.suites.model): prefill (batch x seq 1x2048 and 8x512) and
decode (batch 1, 4 and 8 against a static KV cache of --ctx tokens; eager and replayed as a CUDA graph), ms per
forward as the median of CUDA-event timings in interleaved turns, no L2 flush; against bf16, the relative error of
the logits and top-1 agreement.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from ... import convert, scaled_mm
from ...moe import Float8Experts
from ...quantize import quantize_rowwise
from ..common import geomean, guarded, ratio
from ..registry import register_suite
from .model import decode_row, flat_rows, free_memory, prefill_row

QWEN3_30B_A3B = dict(hidden_size=2048, moe_intermediate_size=768, intermediate_size=6144, num_experts=128,
                     num_experts_per_tok=8, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                     vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6, norm_topk_prob=True,
                     decoder_sparse_step=1, max_position_embeddings=8192)
PREFILL = [(1, 2048), (8, 512)]
DECODE_BATCHES = [1, 4, 8]


class ExpertLoop(nn.Module):
    """A Float8Experts run as a loop over its experts: per expert with rows, fp8ext.scaled_mm for gate-up, the
    activation and its quantize, fp8ext.scaled_mm for down, the routing weights, an index_add back to the tokens.
    The counts are read on the host, so it cannot run inside a CUDA graph (refused before anything is read)."""

    def __init__(self, experts: Float8Experts):
        super().__init__()
        self.experts = experts

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        if hidden_states.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the expert loop reads its group sizes on the host and cannot run in a CUDA graph")
        e, k = self.experts, top_k_index.shape[-1]
        routed = top_k_index.reshape(-1)
        order = torch.argsort(routed, stable=True)
        counts = torch.bincount(routed, minlength=e.num_experts).tolist()
        q, s = quantize_rowwise(hidden_states)
        s = s.view(-1, 1)
        weights = top_k_weights.reshape(-1)
        out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
        start = 0
        for g, n in enumerate(counts):
            if n == 0:
                continue
            rows = order[start:start + n]
            start += n
            tokens = rows // k
            h = scaled_mm(q[tokens], e.gate_up_weight[g].t(), s[tokens], e.gate_up_scale[g].view(1, -1),
                          out_dtype=torch.bfloat16, use_fast_accum=e.use_fast_accum)
            gate, up = h.chunk(2, dim=-1)
            qy, sy = quantize_rowwise(e.act_fn(gate) * up)
            o = scaled_mm(qy, e.down_weight[g].t(), sy.view(-1, 1), e.down_scale[g].view(1, -1),
                          out_dtype=torch.bfloat16, use_fast_accum=e.use_fast_accum)
            out.index_add_(0, tokens, o.float() * weights[rows, None].float())
        return out.to(hidden_states.dtype)


def build_model(layers: int, device, seed: int = 0) -> nn.Module:
    """Qwen3MoeForCausalLM with QWEN3_30B_A3B's shapes and `layers` layers, random bf16 weights initialised on
    `device` (experts drawn from N(0, 0.02), as the other weights are), grouped_mm experts."""
    import transformers
    cfg = transformers.Qwen3MoeConfig(**QWEN3_30B_A3B, num_hidden_layers=layers)
    cfg._experts_implementation = "grouped_mm"
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.Qwen3MoeForCausalLM(cfg)
        with torch.no_grad():
            for module in model.modules():
                if hasattr(module, "gate_up_proj") and hasattr(module, "act_fn"):
                    module.gate_up_proj.normal_(0, 0.02)
                    module.down_proj.normal_(0, 0.02)
    return model.to(torch.bfloat16).eval()


def variants(model: nn.Module, fused: bool = True) -> tuple[dict[str, nn.Module], dict]:
    fp8 = copy.deepcopy(model)
    report = convert(fp8)
    loop = copy.deepcopy(fp8)
    for name, _ in report.experts:
        parent, _, child = name.rpartition(".")
        setattr(loop.get_submodule(parent), child, ExpertLoop(loop.get_submodule(name)))
    models = {"bf16": model, "fp8ext": fp8, "fp8ext_loop": loop}
    if fused:
        models["fp8ext_fused"] = copy.deepcopy(model)
        convert(models["fp8ext_fused"], fuse_siblings=True)
    return models, {"swapped": len(report.swapped), "experts": len(report.experts)}


def compare(layers: int, ctx: int, iters: int, rounds: int, prefill_shapes=PREFILL,
            decode_batches=DECODE_BATCHES, fused: bool = True) -> dict:
    model = build_model(layers, "cuda")
    models, report = variants(model, fused)
    free_memory("cuda")
    vocab = QWEN3_30B_A3B["vocab_size"]
    result = {"config": "qwen3-30b-a3b", "layers": layers, "ctx": ctx, "convert": report, "variants": list(models),
              "prefill": [], "decode": []}
    with torch.inference_mode():
        for batch, seq in prefill_shapes:
            row = guarded(lambda: prefill_row(models, batch, seq, vocab, "cuda", True, {}, iters, rounds))
            result["prefill"].append(row if isinstance(row, dict) else {"batch": batch, "seq": seq, "error": row})
            free_memory("cuda")
        for batch in decode_batches:
            row = guarded(lambda: decode_row(models, batch, ctx, vocab, "cuda", True, iters, rounds))
            result["decode"].append(row if isinstance(row, dict) else {"batch": batch, "error": row})
            free_memory("cuda")
    return result


def _over(entry: dict, slow: str, fast: str):
    """The time of `slow` over that of `fast` in one row's ms, or "not measured"."""
    ms = (entry or {}).get("ms", {})
    r = ratio(ms.get(slow), ms.get(fast))
    return "not measured" if r is None else round(r, 3)


def summarize(res: dict) -> dict:
    """fp8ext and fp8ext_fused over bf16 (tokens/s) in prefill and in decode replayed as a CUDA graph, fp8ext over
    its expert loop (prefill, and decode eager: the loop has no graph), and fp8ext's top-1 agreement with bf16."""
    out, graph = {}, {}
    fp8 = [v for v in ("fp8ext", "fp8ext_fused") if v in res["variants"]]
    for r in res["prefill"]:
        shape = f"{r['batch']}x{r['seq']}"
        for v in fp8:
            out[f"prefill {shape} {v}/bf16 tok/s"] = _over(r.get("eager"), "bf16", v)
        out[f"prefill {shape} fp8ext/fp8ext_loop"] = _over(r.get("eager"), "fp8ext_loop", "fp8ext")
        out[f"prefill {shape} top-1 agreement fp8ext"] = r.get("top1_agreement", {}).get("fp8ext", r.get("error"))
    for r in res["decode"]:
        b = f"b={r['batch']}"
        for v in fp8:
            graph.setdefault(v, []).append(_over(r.get("graph"), "bf16", v))
            out[f"decode graph {b} {v}/bf16 tok/s"] = graph[v][-1]
        out[f"decode eager {b} fp8ext/fp8ext_loop"] = _over(r.get("eager"), "fp8ext_loop", "fp8ext")
    for v, ratios in graph.items():
        measured = [x for x in ratios if isinstance(x, float)]
        if measured:
            out[f"decode graph {v}/bf16, geomean over batches"] = round(geomean(measured), 3)
    return out


@register_suite("moe", help="Qwen3-30B-A3B-shaped MoE stack end to end: bf16, fp8ext.convert, fp8ext expert loop",
                summary_title="moe summary (fp8ext/bf16 is the tokens/s ratio)",
                options={"--moe-layers": dict(type=int, default=8, help="moe suite: decoder layers (default 8)")})
def moe(args) -> dict:
    iters, rounds = args.iters, args.model_rounds  # the model suite's options, shared (and --no-fused)
    res = compare(args.moe_layers, args.ctx, iters, rounds, fused=not args.no_fused)
    free_memory("cuda")
    method = (__doc__.split("\n\n", 1)[1].replace("\n", " ") + f" {args.moe_layers} layers; {iters} timed forwards "
              f"in {rounds} turns per measurement.")
    return {"method": method, "summary": summarize(res), "rows": flat_rows([res]), "results": [res]}
