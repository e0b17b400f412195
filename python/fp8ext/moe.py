"""FP8 experts for mixture-of-experts layers: Float8Experts, fp8ext's form of the stacked-experts modules of Hugging
Face transformers (Qwen3MoeExperts, MixtralExperts, DeepseekV3Experts, ...: ``gate_up_proj`` [G, 2I, H],
``down_proj`` [G, H, I], ``act_fn``, ``forward(hidden_states, top_k_index, top_k_weights)``), which convert() swaps
in. The routing stays the model's: the router before the experts is left as it is.

The forward, for T tokens each routed to k experts:

  1. the T * k routed rows are sorted by expert (a stable sort); offs, each expert's end row, is a searchsorted of
     the expert ids in the sorted ones. The rows' tokens are quantized per row (quantize_rowwise) and gathered into
     that order: up to FEW_ROWS routed rows the bf16 tokens are gathered and then quantized (one launch fewer),
     above it each token is quantized once and its FP8 row and scale gathered (fewer bytes). Both give the same
     bits: a row's scale depends on that row alone;
  2. h = scaled_grouped_mm(rows, gate_up^T) [T * k, 2I]; y = act(gate) * up, quantized per row (for SiLU, the
     models' activation, one op: silu_mul_quantize_rowwise);
  3. o = scaled_grouped_mm(y, down^T) [T * k, H];
  4. o is put back in token order, up to FEW_ROWS rows by an index_copy_ through the sort's permutation (one
     launch), above it by a gather through its inverse (torch's gather moves 16-byte vectors, its index_copy_ one
     element at a time, several times slower at prefill sizes); then each token's k rows are summed with
     their routing weights as one batched [1, k] x [k, H] product (bmm): no atomics, so the sum is the same every
     run.

Nothing reads the group sizes on the host, so a converted MoE layer never waits for the GPU and can be captured in a
CUDA graph. At decode a layer is a chain of small kernels, so their number is what its time follows: with SiLU the
steps above dispatch 11 ops that launch, 13 with another activation (the grouped GEMMs count one each, a prologue
and a GEMM on CUDA; a test holds the count, docs/decisions.md what it replaced). The grouped GEMMs write bfloat16 on
CUDA; a float16 or float32 model gets its experts' output cast to its dtype.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._cast import keeping_dtypes
from .grouped import scaled_grouped_mm
from .quantize import quantize_rowwise, silu_mul_quantize_rowwise

E4M3 = torch.float8_e4m3fn
# Routed rows (tokens x top-k) up to which the forward takes the fewest launches (the tokens gathered in their own
# dtype and quantized after the gather, the output put back by one index_copy_); above it, the fewest bytes (each
# token quantized once and gathered as FP8, the output put back by a vectorized gather).
FEW_ROWS = 1024
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def experts_problem(module: nn.Module) -> Optional[str]:
    """Why ``module`` (a stacked-experts module) cannot become a Float8Experts, or None."""
    gate_up, down = module.gate_up_proj, module.down_proj
    if gate_up.dim() != 3 or down.dim() != 3 or gate_up.shape[0] != down.shape[0]:
        return f"gate_up_proj {tuple(gate_up.shape)} and down_proj {tuple(down.shape)} are not [G, 2I, H], [G, H, I]"
    G, two_i, H = gate_up.shape
    if two_i % 2 or tuple(down.shape[1:]) != (H, two_i // 2):
        return f"gate_up_proj {tuple(gate_up.shape)} and down_proj {tuple(down.shape)} are not [G, 2I, H], [G, H, I]"
    if gate_up.dtype not in _FLOAT_DTYPES or down.dtype not in _FLOAT_DTYPES:
        return f"expert weights of dtype {gate_up.dtype} are not bfloat16, float16 or float32"
    if gate_up.device.type == "meta":
        return "expert weights on the meta device (load the weights first)"
    if H % 16 or (two_i // 2) % 16:
        return f"hidden size {H} and expert intermediate size {two_i // 2} must be multiples of 16"
    if G > 1023:
        return f"{G} experts; fp8ext.scaled_grouped_mm takes up to 1023 groups"
    return None


def is_stacked_experts(module: nn.Module) -> bool:
    """transformers' stacked-experts modules: 3-D gate_up_proj and down_proj parameters and an act_fn."""
    return (isinstance(getattr(module, "gate_up_proj", None), nn.Parameter)
            and isinstance(getattr(module, "down_proj", None), nn.Parameter) and hasattr(module, "act_fn")
            and module.gate_up_proj.dim() == 3)


def _quantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[G, N, K] -> (float8_e4m3fn [G, N, K], float32 [G, N]): one scale per output row of each expert."""
    G, N, K = weight.shape
    q, s = quantize_rowwise(weight.detach().reshape(G * N, K))
    return q.view(G, N, K), s.view(G, N)


class Float8Experts(nn.Module):
    """A stacked-experts module with its weights in float8_e4m3fn, one float32 scale per output row of each expert;
    the forward of the module docstring. Inference only, like Float8Linear."""

    def __init__(self, experts: nn.Module, use_fast_accum: bool = True):
        super().__init__()
        problem = experts_problem(experts)
        if problem is not None:
            raise ValueError(f"fp8ext.Float8Experts: {problem}")
        self.num_experts, two_i, self.hidden_dim = experts.gate_up_proj.shape
        self.intermediate_dim = two_i // 2
        self.act_fn = experts.act_fn
        # SiLU (transformers' SiLUActivation, or nn.SiLU): the activation and its quantize run as one op
        self.silu = isinstance(self.act_fn, nn.SiLU) or type(self.act_fn).__name__ == "SiLUActivation"
        self.use_fast_accum = use_fast_accum
        with torch.no_grad():
            q, s = _quantized(experts.gate_up_proj)
            self.gate_up_weight = nn.Parameter(q, requires_grad=False)
            self.gate_up_scale = nn.Parameter(s, requires_grad=False)
            q, s = _quantized(experts.down_proj)
            self.down_weight = nn.Parameter(q, requires_grad=False)
            self.down_scale = nn.Parameter(s, requires_grad=False)
        # 0 .. G-1, the boundaries that searchsorted turns into offs (a buffer: it follows the module's device)
        self.register_buffer("expert_ids", torch.arange(self.num_experts, device=experts.gate_up_proj.device),
                             persistent=False)

    def _apply(self, fn, recurse=True):
        # A dtype cast of the model leaves the FP8 weights and their scales as they are (fp8ext._cast).
        quantized = (self.gate_up_weight, self.gate_up_scale, self.down_weight, self.down_scale)
        return super()._apply(keeping_dtypes(fn, quantized), recurse)

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        T, H = hidden_states.shape
        k = top_k_index.shape[-1]
        out_dtype = hidden_states.dtype if hidden_states.device.type == "cpu" else torch.bfloat16
        experts, order = torch.sort(top_k_index.reshape(-1), stable=True)  # the routed rows, expert by expert
        ids = self.expert_ids.to(experts.dtype)  # the buffer itself when the dtypes agree (no launch)
        offs = torch.searchsorted(experts, ids, right=True, out_int32=True)  # rows routed to experts <= g
        tokens = order // k
        few = order.numel() <= FEW_ROWS
        if few:
            q, s = quantize_rowwise(hidden_states[tokens])
        else:
            q, s = quantize_rowwise(hidden_states)  # each token once, then gathered for each of its experts
            q, s = q[tokens], s.view(-1)[tokens]
        h = scaled_grouped_mm(q, self.gate_up_weight.transpose(-2, -1), s.view(-1), self.gate_up_scale, offs,
                              out_dtype=out_dtype, use_fast_accum=self.use_fast_accum)
        if self.silu:
            q, s = silu_mul_quantize_rowwise(h)
        else:
            gate, up = h.chunk(2, dim=-1)
            q, s = quantize_rowwise(self.act_fn(gate) * up)
        o = scaled_grouped_mm(q, self.down_weight.transpose(-2, -1), s.view(-1), self.down_scale, offs,
                              out_dtype=out_dtype, use_fast_accum=self.use_fast_accum)
        if few:
            by_token = torch.empty_like(o).index_copy_(0, order, o)
        else:
            inverse = torch.empty_like(order).index_put_((order,), torch.arange(order.numel(), device=order.device))
            by_token = o[inverse]
        by_token = by_token.view(T, k, H)
        weights = top_k_weights.reshape(T, 1, k).to(o.dtype)
        return torch.bmm(weights, by_token).view(T, H).to(hidden_states.dtype)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, "
                f"intermediate_dim={self.intermediate_dim}, use_fast_accum={self.use_fast_accum}")
