"""Tensor-parallel FP8 linear layers on top of fp8ext.scaled_mm (torch.distributed, one process per GPU).

Both take row-wise scaled fp8 operands, as fp8ext.scaled_mm does; the weight shard is row-major ``[N_r, K_r]``
as nn.Linear stores it.

* column-parallel: each rank holds rows ``N_r`` of the weight (and of its scales and bias) and the whole input;
  it computes its output columns, and an all-gather assembles ``[M, N]`` on every rank.
* row-parallel: each rank holds columns ``K_r`` of the weight and the matching slice of the input; partial
  products are computed in fp32, summed with an all-reduce, and the bias is added once, after the sum.

Each shard is a call of fp8ext.scaled_mm, so N_r (column-parallel) and K_r (row-parallel) must be multiples of
16 like any N and K; a shard that is not raises the op's usual error naming the argument.

Row-wise scales split cleanly: an activation's scale is per token (the same for every K slice) and a weight's
scale is per output row (it travels with the row), so each shard's partial result is exactly its share of the
single-GPU sum.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .ops import scaled_mm


def column_parallel_linear(x: torch.Tensor, scale_x: torch.Tensor, w_shard: torch.Tensor,
                           scale_w_shard: torch.Tensor, bias_shard: Optional[torch.Tensor] = None, *,
                           group: Optional[dist.ProcessGroup] = None, out_dtype: torch.dtype = torch.bfloat16,
                           use_fast_accum: bool = True) -> torch.Tensor:
    """x [M, K] fp8 with scale_x (M, 1); w_shard [N_r, K] fp8 with scale_w_shard (1, N_r); every rank must hold
    a shard of the same N_r. Returns the full [M, world * N_r] output on every rank."""
    local = scaled_mm(x, w_shard.t(), scale_x, scale_w_shard, bias=bias_shard, out_dtype=out_dtype,
                      use_fast_accum=use_fast_accum)
    world = dist.get_world_size(group)
    M, n_r = local.shape
    # The shards arrive stacked along dim 0 ([world * M, N_r], the layout every backend takes); shard r becomes
    # columns r * N_r ... (r + 1) * N_r - 1 of the [M, world * N_r] result.
    gathered = torch.empty((world * M, n_r), dtype=local.dtype, device=local.device)
    dist.all_gather_into_tensor(gathered, local.contiguous(), group=group)
    return gathered.view(world, M, n_r).permute(1, 0, 2).reshape(M, world * n_r)


def row_parallel_linear(x_shard: torch.Tensor, scale_x: torch.Tensor, w_shard: torch.Tensor,
                        scale_w: torch.Tensor, bias: Optional[torch.Tensor] = None, *,
                        group: Optional[dist.ProcessGroup] = None, out_dtype: torch.dtype = torch.bfloat16,
                        use_fast_accum: bool = True) -> torch.Tensor:
    """x_shard [M, K_r] fp8 (columns K_r of the input) with the full-K scale_x (M, 1); w_shard [N, K_r] fp8 with
    scale_w (1, N). Partial sums are reduced in fp32; bias [N] (any float dtype) is added once, after the sum."""
    partial = scaled_mm(x_shard, w_shard.t(), scale_x, scale_w, out_dtype=torch.float32,
                        use_fast_accum=use_fast_accum)
    dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=group)
    if bias is not None:
        partial.add_(bias.float())
    return partial.to(out_dtype)
