"""From a bf16 model to FP8: `Float8Linear` and `convert`.

    import fp8ext
    report = fp8ext.convert(model)          # every nn.Linear that fits becomes a Float8Linear, in place
    with torch.inference_mode():
        out = model(inputs)

Inference only: the weight is quantized once (per output row, e4m3), each forward quantizes the activation per
token and runs fp8ext.scaled_mm with the bias fused. docs/model_path.md describes the numerics and the limits.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch
from torch import nn

from .quantize import quantize_rowwise

E4M3 = torch.float8_e4m3fn
_QUANTIZE = torch.ops.fp8ext.quantize_rowwise.default  # fp8ext.quantize_rowwise
_SCALED_MM = torch.ops.fp8ext.scaled_mm.default  # fp8ext.scaled_mm
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _shape_problem(in_features: int, out_features: int) -> Optional[str]:
    """Why fp8ext.scaled_mm cannot take this layer's shape, or None."""
    if in_features % 16 or in_features == 0:
        return f"in_features = {in_features} is not a positive multiple of 16"
    if out_features % 16 or out_features == 0:
        return f"out_features = {out_features} is not a positive multiple of 16"
    return None


class Float8Linear(nn.Module):
    """``y = x @ W.t() + b`` with W stored as float8_e4m3fn ``[N, K]`` and one float32 scale per output row.

    The forward quantizes ``x`` per token (quantize_rowwise over the last dimension, any leading dimensions) and
    calls fp8ext.scaled_mm with the bias fused; the output has ``x``'s dtype (bfloat16, float16 or float32) and
    shape ``x.shape[:-1] + (N,)``. ``weight``, ``weight_scale`` (float32 ``[N]``) and ``bias`` (in the dtype of
    the layer it came from) are parameters without grad, so ``state_dict()`` / ``load_state_dict()`` and
    ``.to(device)`` carry them. Inference only: call it under ``torch.no_grad()`` or ``torch.inference_mode()``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, use_fast_accum: bool = True,
                 bias_dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        problem = _shape_problem(in_features, out_features)
        if problem is not None:
            raise ValueError(f"fp8ext.Float8Linear: {problem}; fp8ext.scaled_mm needs K (in_features) and N "
                             "(out_features) to be multiples of 16")
        self.in_features, self.out_features, self.use_fast_accum = in_features, out_features, use_fast_accum
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=E4M3, device=device),
                                   requires_grad=False)
        self.weight_scale = nn.Parameter(torch.ones(out_features, dtype=torch.float32, device=device),
                                         requires_grad=False)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=bias_dtype, device=device), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, use_fast_accum: bool = True) -> "Float8Linear":
        """A Float8Linear computing ``linear`` on its device: its weight quantized once with quantize_rowwise (per
        output row), its bias kept in its dtype. ``linear`` is left unchanged."""
        weight = linear.weight
        if weight.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"fp8ext.Float8Linear.from_linear: weight: expected dtype torch.bfloat16, "
                             f"torch.float16 or torch.float32, got {weight.dtype}")
        has_bias = linear.bias is not None
        module = cls(linear.in_features, linear.out_features, bias=has_bias, use_fast_accum=use_fast_accum,
                     bias_dtype=linear.bias.dtype if has_bias else torch.bfloat16, device=weight.device)
        with torch.no_grad():
            wq, ws = quantize_rowwise(weight.detach())
            module.weight.copy_(wq)
            module.weight_scale.copy_(ws.view(-1))
            if has_bias:
                module.bias.copy_(linear.bias.detach())
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"fp8ext.Float8Linear: x: expected dtype torch.bfloat16, torch.float16 or "
                             f"torch.float32, got {x.dtype}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"fp8ext.Float8Linear: x: expected the last dimension to be in_features = "
                             f"{self.in_features}, got shape {tuple(x.shape)}")
        lead = x.shape[:-1]
        # quantize_rowwise takes 2-D and 3-D inputs with any leading strides; other ranks are flattened first.
        # The ops' overloads are called directly (not the Python wrappers, not the overload packets): an eager
        # prefill of a small model is bound by the host's time per layer.
        xq, xs = _QUANTIZE(x if x.dim() in (2, 3) else x.reshape(-1, self.in_features), E4M3, None)
        bias = self.bias
        if bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)  # scaled_mm's bias has the output's dtype
        out = _SCALED_MM(xq.view(-1, self.in_features), self.weight.t(), xs.view(-1, 1), self.weight_scale, bias,
                         x.dtype, self.use_fast_accum)
        return out.view(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"use_fast_accum={self.use_fast_accum}")


@dataclasses.dataclass
class ConvertReport:
    """What fp8ext.convert did: ``swapped`` [(name, (N, K))] and ``skipped`` [(name, reason)], in module order."""

    swapped: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"fp8ext.convert: {len(self.swapped)} Linear layers now FP8, {len(self.skipped)} skipped"]
        lines += [f"  skipped {name}: {reason}" for name, reason in self.skipped]
        return "\n".join(lines)


def _skip_reason(module: nn.Linear, name: str, filter_fn, skip_lm_head: bool) -> Optional[str]:
    # nn.MultiheadAttention reads its out_proj's weight and bias directly instead of calling it.
    if isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear):
        return "out_proj of nn.MultiheadAttention, which reads the weight directly instead of calling the layer"
    if skip_lm_head and name.split(".")[-1].endswith("lm_head"):
        return "lm_head (skip_lm_head=True)"
    if filter_fn is not None and not filter_fn(module, name):
        return "filter_fn returned False"
    if module.weight.dtype not in _FLOAT_DTYPES:
        return f"weight dtype {module.weight.dtype} is not bfloat16, float16 or float32"
    if module.weight.device.type == "meta":
        return "weight on the meta device (load the weights first)"
    return _shape_problem(module.in_features, module.out_features)


def convert(model: nn.Module, filter_fn: Optional[Callable[[nn.Module, str], bool]] = None,
            skip_lm_head: bool = True, use_fast_accum: bool = True) -> ConvertReport:
    """Replace, in place, every ``nn.Linear`` of ``model`` that fits by a Float8Linear (``from_linear``), and say
    what happened.

    A layer is swapped when its in_features and out_features are multiples of 16, its weight is bfloat16, float16
    or float32, ``filter_fn(module, fully_qualified_name)`` (if given) returns True, and, with ``skip_lm_head``
    (the default: the logits are the most sensitive output of a language model), its name does not end with
    ``lm_head``. A layer reachable under several names (shared) becomes one Float8Linear at all of them. The
    model itself is never replaced (``Float8Linear.from_linear`` converts a bare Linear).
    """
    report = ConvertReport()
    converted: dict[int, nn.Module] = {}
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if not isinstance(module, nn.Linear):
            continue
        if not name:
            report.skipped.append((name, "the model itself is an nn.Linear: use Float8Linear.from_linear"))
            continue
        if id(module) not in converted:
            reason = _skip_reason(module, name, filter_fn, skip_lm_head)
            if reason is not None:
                report.skipped.append((name, reason))
                continue
            converted[id(module)] = Float8Linear.from_linear(module, use_fast_accum=use_fast_accum)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, converted[id(module)])
        report.swapped.append((name, (module.out_features, module.in_features)))
    return report
