"""How fp8ext's modules keep their quantized parameters through nn.Module's dtype casts (Float8Linear,
Float8Experts).

nn.Module's dtype casts (.to(dtype), .half(), .bfloat16(), .float(), .double(), .type()) convert every
floating-point parameter, and FP8 counts as one: a weight would leave FP8 (which the forward refuses) and its float32
scale would be rounded. As torchao's FP8 weights (tensor subclasses) do, the quantized weights and their scales keep
their dtypes through a cast, which the rest of the model takes: that is how a converted model, with its embeddings and
norms, is run in another dtype; refusing the cast would leave no way to. Device moves and every other fn apply to them
as usual.
"""
from __future__ import annotations

from typing import Callable

import torch


def keeping_dtypes(fn: Callable[[torch.Tensor], torch.Tensor], quantized: tuple) -> Callable:
    """``fn`` for nn.Module._apply, except that the tensors of ``quantized`` only follow its device."""
    def apply(t: torch.Tensor) -> torch.Tensor:
        if not any(t is q for q in quantized):
            return fn(t)
        probe = fn(t.new_empty(0))  # what fn does to this dtype and device, without converting the tensor
        return fn(t) if probe.dtype == t.dtype else t.to(device=probe.device)
    return apply
