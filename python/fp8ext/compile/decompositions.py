"""fp8ext's ops written in torch ops for Inductor, so that the quantize of a compiled layer's input fuses into the
kernel that produces the input (RMSNorm, SiLU-mul, a residual add) instead of costing a launch of its own.

While fp8ext.compile is on, Inductor's decomposition table holds:

- ``fp8ext.quantize_rowwise`` as its formula in torch ops (docs/model_path.md; csrc/quantize/quantize_rowwise.h):
  per row, in float32, ``amax = max|x|``, bounded by scale_ub and floored at 1e-12, ``scale = amax / FP8_MAX``,
  ``q = fp8(clamp(x * (FP8_MAX / amax), -FP8_MAX, FP8_MAX))``. Inductor turns a float32 ``/`` into Triton's
  approximate division, so the two per-row divisions are taken in float64 and rounded once to float32, which is
  the correctly rounded float32 quotient (float64 has more than 2 x 24 + 2 bits), as the kernel computes it: the
  bits equal the eager op's on the same input. (Fused with its producer, Inductor may skip the producer's rounding
  to bf16 unless ``torch._inductor.config.emulate_precision_casts`` is set, so the input itself can differ from the
  eager model's.)
- ``fp8ext.linear`` as that quantize and ``fp8ext.scaled_mm``, as its CPU backend composes them; on CUDA tensors
  the GEMM is ``fp8ext._scaled_mm_with_kernel`` with no kernel named: scaled_mm's routing without the Python
  autograd guard an eager call goes through (compiled code records no autograd on the op).

``fp8ext.scaled_mm`` itself is not in the table: Inductor refuses a table entry that can hand the op back (as this
one would on the CPU) for an op that it also runs as a fallback kernel.

Each checks its arguments as the op does, so a traced call raises the eager messages.
"""
from __future__ import annotations

import torch

from .. import kernels, ops, quantize

E4M3 = torch.float8_e4m3fn


def _untraced():
    # The checks are C++ ops that read metadata only; inside a decomposition the tracer would record them into the
    # graph, to run again at every call.
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    return disable_proxy_modes_tracing()


def quantize_rowwise(x: torch.Tensor, dtype=None, scale_ub=None):
    with _untraced():
        quantize._check_quantize_rowwise(x, dtype, scale_ub)
    dtype = E4M3 if dtype is None else dtype
    fp8_max = quantize._FP8_MAX[dtype]
    amax = x.float().abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub)  # a float32 bound, as the op takes it; NaN stays NaN
    amax = amax.clamp(min=1e-12).double()
    # Tensor by tensor: a Python number over a tensor is traced as a reciprocal and a multiply, two roundings.
    bound = torch.full_like(amax, fp8_max)
    inv = (bound / amax).float()
    scale = (amax / bound).float()
    q = (x.float() * inv).clamp(-fp8_max, fp8_max).to(dtype)
    return q, scale


def linear(x, weight, weight_scale, bias=None, use_fast_accum=True):
    with _untraced():
        ops._check_linear(x, weight, weight_scale, bias)
    N, K = weight.shape
    q, s = quantize_rowwise(x)
    args = (q.reshape(-1, K), weight.t(), s.reshape(-1, 1), weight_scale.reshape(N), bias, x.dtype, use_fast_accum)
    if x.device.type == "cuda" and kernels._has_cuda_kernels():
        out = torch.ops.fp8ext._scaled_mm_with_kernel.default(*args, "")
    else:
        out = torch.ops.fp8ext.scaled_mm.default(*args)
    return out.view(*x.shape[:-1], N)


def table() -> dict:
    """The entries fp8ext.compile adds to Inductor's decomposition table."""
    return {torch.ops.fp8ext.quantize_rowwise.default: quantize_rowwise,
            torch.ops.fp8ext.linear.default: linear}
