"""FP8 experts for mixture-of-experts layers: Float8Experts, fp8ext's form of the stacked-experts modules of Hugging
Face transformers (Qwen3MoeExperts, MixtralExperts, DeepseekV3Experts, ...: ``gate_up_proj`` [G, 2I, H],
``down_proj`` [G, H, I], ``act_fn``, ``forward(hidden_states, top_k_index, top_k_weights)``), which convert() swaps
in. The routing stays the model's: the router before the experts is left as it is.

The forward, for T tokens each routed to k experts:

  1. the T * k routed slots are sorted by expert, stably; offs holds each expert's end row, pos each slot's row. The
     rows' tokens are quantized per row, in that order. Up to FEW_ROWS slots this is one op, moe_dispatch: a routing
     kernel and the quantize reading each row's token through its index. Above it, torch's sort and searchsorted,
     then each token quantized once and its FP8 row and scale gathered (fewer bytes, and a sort that scales). Both
     give the same bits: a row's scale depends on that row alone;
  2. h = scaled_grouped_mm(rows, gate_up^T) [T * k, 2I]; y = act(gate) * up, quantized per row (for SiLU, the
     models' activation, one op: silu_mul_quantize_rowwise);
  3. o = scaled_grouped_mm(y, down^T) [T * k, H];
  4. moe_combine puts o back in token order, each token's k rows summed with their routing weights in a fixed order
     (float32, no atomics: the sum is the same every run). Expert id G adds nothing, as in transformers' experts
     modules (its expert parallelism routes a token's slot for another rank's expert there, with weight 0); any
     other id outside [0, G) gives its token NaN.

Nothing reads the group sizes on the host, so a converted MoE layer never waits for the GPU and can be captured in a
CUDA graph. At decode a layer is a chain of small kernels, so their number is what its time follows: up to FEW_ROWS
slots, with SiLU and routing weights in the output's dtype, the steps above dispatch 5 ops (a test holds the count),
on CUDA 6 kernels up to 8 slots (each grouped GEMM one decode-kernel launch), 8 from 9 to 96, up to 12 above (the
split kernels, docs/model_path.md). The grouped GEMMs write bfloat16 on CUDA; a float16 or float32 model gets its
experts' output cast to its dtype.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._cast import keeping_dtypes
from .grouped import scaled_grouped_mm
from .moe_routing import MAX_SLOTS, SKIPPED, moe_combine, moe_dispatch
from .ops import _refuse_grad
from .quantize import quantize_rowwise, silu_mul_quantize_rowwise

E4M3 = torch.float8_e4m3fn
# Routed slots (tokens x top-k) up to which moe_dispatch routes them (one CTA, the fewest launches); above it torch's
# sort, which scales, and each token quantized once then gathered as FP8 (fewer bytes than quantizing k copies).
FEW_ROWS = MAX_SLOTS
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _gating_problem(module: nn.Module) -> Optional[str]:
    """Why ``module`` computes its experts otherwise than Float8Experts does (``act_fn(gate) * up`` of its
    concatenated [gate; up] rows, no biases, nothing after the down projection), or None. transformers'
    ``use_experts_implementation`` records these traits on the module; ``_apply_gate`` is its gating, which some
    models replace (clamped SwiGLU, float32 gating, a two-argument activation)."""
    if getattr(module, "is_transposed", False):
        return "its weights are stored transposed ([G, H, 2I])"
    if not getattr(module, "is_concatenated", True):
        return "its gate and up rows are interleaved, not [gate; up]"
    if getattr(module, "has_bias", False) or any(getattr(module, n, None) is not None
                                                 for n in ("gate_up_proj_bias", "down_proj_bias")):
        return "its experts have biases"
    if not getattr(module, "has_gate", True):
        return "its experts have no gate"
    if getattr(module, "has_post_expert_norm", False):
        return "a norm follows each expert"
    gate = getattr(type(module), "_apply_gate", None)
    if gate is not None and getattr(gate, "__name__", "") != "_default_apply_gate":
        return (f"its gating ({type(module).__name__}._apply_gate) is not act_fn(gate) * up, which Float8Experts "
                f"computes")
    return None


def experts_problem(module: nn.Module) -> Optional[str]:
    """Why ``module`` (a stacked-experts module) cannot become a Float8Experts, or None."""
    gating = _gating_problem(module)
    if gating is not None:
        return gating
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
        self._check(hidden_states, top_k_index, top_k_weights)
        T, H = hidden_states.shape
        k = top_k_index.shape[-1]
        out_dtype = hidden_states.dtype if hidden_states.device.type == "cpu" else torch.bfloat16
        top_k_index = top_k_index.contiguous()  # the routing ops' layout (the router's top-k already is)
        if T * k <= FEW_ROWS:
            q, s, offs, pos = moe_dispatch(hidden_states, top_k_index, self.num_experts)
        else:
            q, s, offs, pos = self._dispatch_many(hidden_states, top_k_index)
        h = scaled_grouped_mm(q, self.gate_up_weight.transpose(-2, -1), s, self.gate_up_scale, offs,
                              out_dtype=out_dtype, use_fast_accum=self.use_fast_accum)
        if self.silu:
            q, s = silu_mul_quantize_rowwise(h)
        else:
            gate, up = h.chunk(2, dim=-1)
            q, s = quantize_rowwise(self.act_fn(gate) * up)
        o = scaled_grouped_mm(q, self.down_weight.transpose(-2, -1), s.view(-1), self.down_scale, offs,
                              out_dtype=out_dtype, use_fast_accum=self.use_fast_accum)
        return moe_combine(o, pos, top_k_weights.to(o.dtype).contiguous()).to(hidden_states.dtype)

    def _check(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> None:
        # What the ops after the experts' GEMMs would refuse, refused before any work, in this module's words.
        if hidden_states.dim() != 2 or hidden_states.shape[1] != self.hidden_dim:
            raise ValueError(f"fp8ext.Float8Experts: hidden_states: expected [T, {self.hidden_dim}] (the tokens, "
                             f"flattened), got {list(hidden_states.shape)}")
        if top_k_index.dim() != 2 or top_k_index.shape[0] != hidden_states.shape[0]:
            raise ValueError(f"fp8ext.Float8Experts: top_k_index: expected [T, k] with T = "
                             f"{hidden_states.shape[0]}, got {list(top_k_index.shape)}")
        if top_k_weights.shape != top_k_index.shape:
            raise ValueError(f"fp8ext.Float8Experts: top_k_weights: expected top_k_index's shape "
                             f"{list(top_k_index.shape)}, got {list(top_k_weights.shape)}")
        if torch.is_grad_enabled():
            _refuse_grad("fp8ext.Float8Experts", ("hidden_states", "top_k_weights"), (hidden_states, top_k_weights))

    def _dispatch_many(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor):
        # moe_dispatch's outputs, by torch ops: the same rows, offs and pos (an id outside [0, G) sorts last and has
        # no row: pos -2 for id G, -1 for the others), each token quantized once and its FP8 row gathered for each
        # of its experts.
        T, k = top_k_index.shape
        ids = top_k_index.reshape(-1)
        valid = (ids >= 0) & (ids < self.num_experts)
        experts, order = torch.sort(torch.where(valid, ids, self.num_experts), stable=True)
        offs = torch.searchsorted(experts, self.expert_ids.to(experts.dtype), right=True, out_int32=True)
        tokens = order // k
        q, s = quantize_rowwise(hidden_states)
        rows = torch.arange(T * k, device=ids.device, dtype=torch.int32)
        pos = torch.empty_like(rows).index_put_((order,), rows)
        missing = torch.where(ids == self.num_experts, SKIPPED, -1).to(torch.int32)
        return q[tokens], s.view(-1)[tokens], offs, torch.where(valid, pos, missing).view(T, k)

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, "
                f"intermediate_dim={self.intermediate_dim}, use_fast_accum={self.use_fast_accum}")
