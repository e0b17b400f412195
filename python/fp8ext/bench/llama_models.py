"""The models that the model suite compares: transformers' LlamaForCausalLM with random bf16 weights and Llama-3
layer shapes (8B: hidden 4096, intermediate 14336, 32 heads, 8 KV heads; 70B: 8192, 28672, 64, 8), any number of
decoder layers and the full vocabulary, and its variants of the same weights:

    bf16           the model as built
    fp8ext         fp8ext.convert(model): every Linear but lm_head a Float8Linear (quantize_rowwise + scaled_mm)
    fp8ext_fused   fp8ext.convert(model, fuse_siblings=True): the same, with q/k/v and gate/up each run as one
                   quantize and one GEMM over their concatenated weights (fp8ext.nn.FusedSiblings)
    torch_rowwise  fp8ext's FP8 weights and scales, the activation quantized per token in plain torch ops and the
                   GEMM by torch._scaled_mm row-wise (TorchRowwiseLinear): the peer fp8ext replaces
    torchao        torchao.quantization.quantize_(Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
                   on a copy of the bf16 model, lm_head left in bf16 as fp8ext.convert leaves it (only where
                   torchao imports; why it is missing is recorded)

and linears_omitted, the converted model with each Float8Linear replaced by a layer that only allocates its output
(for timing what FP8 does not change). Also here: what runs them, a prefill forward, a repeatable decode step
against a static KV cache, torch.compile and CUDA-graph capture, and the attention "sdpa_packed_gqa" (at decode,
each KV head's query heads are packed as its query rows, so attention reads the KV cache once instead of a
repeat_kv copy of it; transformers packs this way itself in eager mode but not under torch.compile).
"""
from __future__ import annotations

import copy
from typing import Callable, Optional

import torch
from torch import nn

from ..nn import Float8Linear, convert
from .common import TorchRowwiseLinear, guarded

CONFIGS = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2),  # tests
}
LLAMA3_VOCAB = 128256
VARIANTS = ("bf16", "fp8ext", "fp8ext_fused", "torch_rowwise", "torchao")


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError(f"the model suite needs transformers ({e}); pip install transformers") from e
    return transformers


ATTENTION = ("sdpa", "sdpa_packed_gqa")


def sdpa_packed_gqa(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                    is_causal: Optional[bool] = None, **kwargs):
    """transformers' sdpa attention, except for one query token against grouped KV heads (decode): query
    [b, heads, 1, d] is viewed as [b, kv_heads, heads // kv_heads, d], each KV head's query heads as its query rows,
    so scaled_dot_product_attention reads each KV head once. repeat_kv's order is kept (query head h uses KV head
    h // groups), and a mask shared by the heads ([b, 1, 1, L]) broadcasts over the rows. Anything else (prefill,
    a mask per head, a position bias) goes to transformers' sdpa_attention_forward unchanged."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    shared_mask = attention_mask is None or attention_mask.shape[1] == 1
    if groups == 1 or query.shape[2] != 1 or not shared_mask or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    b, heads, _, d = query.shape
    out = torch.nn.functional.scaled_dot_product_attention(query.reshape(b, heads // groups, groups, d), key, value,
                                                           attn_mask=attention_mask, dropout_p=dropout, scale=scaling)
    return out.reshape(b, heads, 1, value.shape[-1]).transpose(1, 2).contiguous(), None


def _register_attention(tf) -> None:
    """sdpa_packed_gqa as a transformers attention implementation, with the masks transformers makes for sdpa."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    tf.AttentionInterface.register("sdpa_packed_gqa", sdpa_packed_gqa)
    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_packed_gqa", sdpa_mask)


def build_model(config: str, layers: int, vocab: int, device, seed: int = 0, attention: str = "sdpa") -> nn.Module:
    """LlamaForCausalLM with `config`'s layer shapes, random bf16 weights initialised on `device` (the same for
    every `attention`, one of ATTENTION)."""
    if attention not in ATTENTION:
        raise ValueError(f"attention: expected one of {ATTENTION}, got {attention!r}")
    tf = _transformers()
    if attention == "sdpa_packed_gqa":
        _register_attention(tf)
    cfg = tf.LlamaConfig(**CONFIGS[config], num_hidden_layers=layers, vocab_size=vocab,
                         max_position_embeddings=8192, rope_theta=500000.0, attn_implementation=attention)
    torch.manual_seed(seed)
    with torch.device(device):
        model = tf.LlamaForCausalLM(cfg)
    return model.to(torch.bfloat16).eval()


def torchao_variant(model: nn.Module) -> nn.Module:
    """torchao's dynamic row-wise FP8 (activation per token, weight per output row) on a copy of `model`; every
    Linear but lm_head, the layers fp8ext.convert swaps. Raises what torchao raises (ImportError without it)."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

    peer = copy.deepcopy(model)
    quantize_(peer, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
              filter_fn=lambda m, fqn: isinstance(m, nn.Linear) and not fqn.split(".")[-1].endswith("lm_head"))
    return peer


def variants(model: nn.Module, torchao: bool = True,
             fused: bool = True) -> tuple[dict[str, nn.Module], dict, dict[str, str]]:
    """The models of the same weights by name (VARIANTS, those that could be built), fp8ext.convert's report as a
    dict, and {name: why} for the variants that could not be built."""
    fp8 = copy.deepcopy(model)
    report = convert(fp8)
    peer = copy.deepcopy(fp8)
    for name, module in list(peer.named_modules()):
        if isinstance(module, Float8Linear):
            parent, _, child = name.rpartition(".")
            setattr(peer.get_submodule(parent), child, TorchRowwiseLinear(module))
    models = {"bf16": model, "fp8ext": fp8}
    errors = {}
    if fused:
        models["fp8ext_fused"] = copy.deepcopy(model)
        fused_groups = len(convert(models["fp8ext_fused"], fuse_siblings=True).fused)
    else:
        errors["fp8ext_fused"] = "not requested (--no-fused)"
    models["torch_rowwise"] = peer
    if torchao:
        built = guarded(lambda: torchao_variant(model))
        if isinstance(built, str):
            errors["torchao"] = built
        else:
            models["torchao"] = built
    else:
        errors["torchao"] = "not requested (--no-torchao)"
    converted = {"swapped": len(report.swapped), "skipped": [list(s) for s in report.skipped]}
    if fused:
        converted["fused_groups"] = fused_groups
    return models, converted, errors


class _Omitted(nn.Module):
    """A swapped layer that costs nothing: its output is uninitialised memory of the right shape. Only for timing
    the rest of the model (CEILING): the values are garbage, and no kernel's time here depends on them."""

    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_empty(*x.shape[:-1], self.out_features)


def linears_omitted(fp8: nn.Module) -> nn.Module:
    """A copy of the converted model with every Float8Linear replaced by _Omitted: its decode step is the time of
    everything fp8ext does not change (norms, RoPE, attention, the KV cache, the bf16 lm_head). bf16's time over
    it is the most any FP8 linear layer could give this model end to end. The memo keeps deepcopy from copying the
    FP8 weights."""
    memo = {id(m): _Omitted(m.out_features) for m in fp8.modules() if isinstance(m, Float8Linear)}
    return copy.deepcopy(fp8, memo)


def prefill(model: nn.Module, ids: torch.Tensor, keep: int = 1, hidden: bool = False):
    return model(ids, use_cache=False, logits_to_keep=keep, output_hidden_states=hidden)


def decode_step(model: nn.Module, batch: int, ctx: int, vocab: int, device,
                step_model: Optional[Callable] = None) -> Callable[[], torch.Tensor]:
    """One decode step: `batch` new tokens at position `ctx` of a static KV cache prefilled with `ctx` tokens. The
    step always writes the same cache slot, so it can be repeated and captured as a CUDA graph. `step_model` (the
    model under torch.compile, say) runs the step; `model` itself prefills the cache."""
    step_model = model if step_model is None else step_model
    tf = _transformers()
    gen = torch.Generator(device="cpu").manual_seed(1)
    cache = tf.StaticCache(config=model.config, max_cache_len=ctx + 1)
    context = torch.randint(0, vocab, (batch, ctx), generator=gen).to(device)
    model(context, past_key_values=cache, use_cache=True, logits_to_keep=1)
    ids = torch.randint(0, vocab, (batch, 1), generator=gen).to(device)
    pos = torch.full((1,), ctx, dtype=torch.long, device=device)
    position_ids = pos.expand(batch, 1)
    # Newer transformers ignore cache_position and write where each layer's cumulative_length points, advancing
    # it on every call: it is set back to ctx first (an in-place fill, so a CUDA graph replays it too).
    counters = [layer for layer in getattr(cache, "layers", []) if hasattr(layer, "cumulative_length")]

    def step():
        for layer in counters:
            if isinstance(layer.cumulative_length, torch.Tensor):
                layer.cumulative_length.fill_(ctx)
            else:
                layer.cumulative_length = ctx
        return step_model(ids, past_key_values=cache, cache_position=pos, position_ids=position_ids,
                          use_cache=True).logits

    return step


def compile_model(model: nn.Module) -> Callable:
    """The model under torch.compile (inductor, default mode), specialised to each shape it sees (dynamic=False):
    every prefill shape and decode batch is its own graph."""
    return torch.compile(model, dynamic=False)


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
