"""The way into and out of a mixture-of-experts layer's grouped GEMMs: fp8ext.moe_dispatch and fp8ext.moe_combine.

T tokens, each routed to k of G experts: slot i = t * k + j holds expert e_i = top_k_index[t, j]. The routed rows are
the slots sorted by expert, stably::

    offs[g]   = #{i : 0 <= e_i <= g}           the end of expert g's rows: scaled_grouped_mm's offs
    pos[t, j] = the row of slot t * k + j;  -2 when its expert id is G, -1 when it is otherwise outside [0, G)
    q[r], scale[r] = quantize_rowwise(x[i / k]) for the slot i of row r (float8_e4m3fn, float32)

and the way back, for the experts' output o [rows, H]::

    out[t] = sum over j = 0 .. k - 1 of weights[t, j] * o[pos[t, j]]

in float32, each product and each sum rounded to float32 in that order, rounded once to o's dtype (weights in o's
dtype), over the slots with a row. A slot with pos = -2 adds nothing: expert id G is how transformers' expert
parallelism marks a route to another rank's expert (with weight 0), which its experts modules skip. Any other slot
with no row (pos = -1, or past o's rows) makes its token's output NaN: an expert id out of range shows in the
output instead of being dropped, and no check waits for the GPU.

On CUDA each is one op of few launches (fp8ext.moe's forward): dispatch is a routing kernel (one CTA, so at most
1024 slots, decode's sizes) and the row-wise quantize reading rows through the routing's token index; combine is one
kernel. On CPU both are torch ops computing the same bits.
"""
from __future__ import annotations

import torch

from . import _C  # noqa: F401  (loading the library registers torch.ops.fp8ext)
from .ops import _IMPL, _operands_meta, _refuse_missing, _register_autograd_guard, _run_check

E4M3 = torch.float8_e4m3fn
MAX_SLOTS = 1024  # moe_dispatch's T * k (kMoeRouteMaxSlots in csrc/moe/moe_routing.h)
SKIPPED = -2  # pos of a slot routed to expert id G (kMoeSkipped)

_DISPATCH = _register_autograd_guard("moe_dispatch", ("x", "top_k_index"), 2)
_COMBINE = _register_autograd_guard("moe_combine", ("o", "pos", "weights"), 3)


def moe_dispatch(x: torch.Tensor, top_k_index: torch.Tensor, num_experts: int):
    """Routes and quantizes a MoE layer's tokens for its grouped GEMMs (the maths in this module's docstring).

    Args:
        x: the tokens' hidden states, bfloat16, float16 or float32 ``[T, H]``, H a multiple of 16, last dimension
            contiguous.
        top_k_index: each token's experts, int64 or int32 ``[T, k]``, contiguous, on x's device; T * k <= 1024.
        num_experts: G, 1 to 1023.

    Returns ``(q [T * k, H] float8_e4m3fn, scale [T * k] float32, offs [G] int32, pos [T, k] int32)``: q and scale
    are ``a`` and ``scale_a`` of ``scaled_grouped_mm(q, w.transpose(-2, -1), scale, w_scale, offs)``, and pos is what
    moe_combine takes. Nothing waits for the GPU. Not differentiable.
    """
    return _DISPATCH(x, top_k_index, num_experts)


def moe_combine(o: torch.Tensor, pos: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Puts the experts' output rows back in token order, each token's k rows weighted and summed.

    Args:
        o: the routed rows' output, bfloat16, float16 or float32 ``[rows, H]``, contiguous, H a multiple of 16.
        pos: each slot's row, int32 ``[T, k]`` (moe_dispatch's), contiguous, on o's device.
        weights: the routing weights ``[T, k]`` in o's dtype, contiguous.

    Returns ``out [T, H]`` in o's dtype. Not differentiable.
    """
    return _COMBINE(o, pos, weights)


def _check_dispatch(x, top_k_index, num_experts) -> None:
    _refuse_missing("fp8ext.moe_dispatch", ("x", "top_k_index"), (x, top_k_index))
    moved = {}
    _run_check(torch.ops.fp8ext._check_moe_dispatch_meta,
               *_operands_meta(("x", "top_k_index"), (x, top_k_index), moved), num_experts, moved=moved)


def _check_combine(o, pos, weights) -> None:
    _refuse_missing("fp8ext.moe_combine", ("o", "pos", "weights"), (o, pos, weights))
    moved = {}
    _run_check(torch.ops.fp8ext._check_moe_combine_meta,
               *_operands_meta(("o", "pos", "weights"), (o, pos, weights), moved), moved=moved)


@torch.library.register_fake("fp8ext::moe_dispatch")
def _moe_dispatch_fake(x, top_k_index, num_experts):
    _check_dispatch(x, top_k_index, num_experts)
    T, k = top_k_index.shape
    return (x.new_empty((T * k, x.shape[1]), dtype=E4M3), x.new_empty((T * k,), dtype=torch.float32),
            x.new_empty((num_experts,), dtype=torch.int32), x.new_empty((T, k), dtype=torch.int32))


@torch.library.register_fake("fp8ext::moe_combine")
def _moe_combine_fake(o, pos, weights):
    _check_combine(o, pos, weights)
    return o.new_empty((pos.shape[0], o.shape[1]))


def _moe_dispatch_cpu(x, top_k_index, num_experts):
    _check_dispatch(x, top_k_index, num_experts)
    T, k = top_k_index.shape
    ids = top_k_index.reshape(-1).long()
    valid = (ids >= 0) & (ids < num_experts)
    order = torch.sort(torch.where(valid, ids, num_experts), stable=True).indices  # invalid slots last
    routed = int(valid.sum())
    offs = torch.cumsum(torch.bincount(ids[valid], minlength=num_experts), 0).to(torch.int32)
    pos = torch.where(ids == num_experts, SKIPPED, -1).to(torch.int32)
    pos[order[:routed]] = torch.arange(routed, dtype=torch.int32)
    tokens = torch.zeros(T * k, dtype=torch.long)  # the rows invalid slots leave read token 0, as on CUDA
    tokens[:routed] = order[:routed] // k
    q, scale = torch.ops.fp8ext.quantize_rowwise(x[tokens])
    return q, scale.view(-1), offs, pos.view(T, k)


def _moe_combine_cpu(o, pos, weights):
    _check_combine(o, pos, weights)
    rows = pos.long()
    skipped = rows == SKIPPED
    missing = (((rows < 0) | (rows >= o.shape[0])) & ~skipped).any(dim=1)
    w = weights.float()
    out = torch.zeros(pos.shape[0], o.shape[1], dtype=torch.float32)
    if o.shape[0] > 0:
        for j in range(pos.shape[1]):  # products and sums each rounded to float32, in the kernel's order
            added = out + w[:, j:j + 1] * o[rows[:, j].clamp(0, o.shape[0] - 1)].float()
            out = torch.where(skipped[:, j:j + 1], out, added)
    out[missing] = float("nan")
    return out.to(o.dtype)


_IMPL.impl("moe_dispatch", _moe_dispatch_cpu, "CPU")
_IMPL.impl("moe_combine", _moe_combine_cpu, "CPU")
