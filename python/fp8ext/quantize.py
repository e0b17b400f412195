"""FP8 quantization, row-wise (`fp8ext.quantize_rowwise`) and block-wise (`fp8ext.quantize_blockwise`), and the
FBGEMM-style GEMM entry (`fp8ext.f8f8bf16_rowwise`).

`torch.ops.fp8ext.quantize_rowwise` and `torch.ops.fp8ext.quantize_blockwise` (1 x 128 groups) are defined in C++
(csrc/bindings.cpp; CPU paths in csrc/quantize_{rowwise,blockwise}_op.cpp, CUDA kernels in
csrc/quantize_{rowwise,blockwise}.cu); this module adds their fake implementations and the documented Python
entries. docs/model_path.md and docs/blockwise.md describe the numerics.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import _C  # noqa: F401  (loading the library registers torch.ops.fp8ext)
from .ops import (_IMPL, _QUANTIZE_BLOCKWISE, _QUANTIZE_ROWWISE, _SILU_MUL_QUANTIZE, FP8_DTYPES, _refuse_grad,
                  _refuse_missing, _run_check,
                  _size_hint, scaled_mm)

E4M3 = torch.float8_e4m3fn


def quantize_rowwise(x: torch.Tensor, dtype: torch.dtype = E4M3,
                     scale_ub: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize each row (last dimension) of ``x`` to FP8 with its own float32 scale: ``(x_fp8, scale)``.

    For each row, in float32::

        amax  = max(|x|)                       # over the row
        amax  = min(amax, scale_ub)            # only if scale_ub is given
        amax  = max(amax, 1e-12)               # an all-zero row gets a finite scale
        scale = amax / FP8_MAX                 # 448 for float8_e4m3fn, 57344 for float8_e5m2
        x_fp8 = fp8(clamp(x * (FP8_MAX / amax), -FP8_MAX, FP8_MAX))   # round to nearest even

    so that ``x_fp8.float() * scale`` approximates ``x``; ``scale`` is what fp8ext.scaled_mm takes as scale_a
    (per token) or, for a weight ``[N, K]``, as scale_b (``scale.view(1, N)``). A NaN in a row makes the row's
    scale and every value of it NaN. CPU and CUDA compute the same bits.

    Args:
        x: bfloat16, float16 or float32, 2-D ``[M, K]`` or 3-D ``[B, S, K]``, last dimension contiguous, K a
            positive multiple of 16. Other strides are fine (no copy is made).
        dtype: ``torch.float8_e4m3fn`` (default) or ``torch.float8_e5m2``.
        scale_ub: optional upper bound on amax (a finite Python float > 0, taken in float32): values beyond
            ``scale_ub`` saturate at FP8_MAX instead of stretching the row's scale (outliers, inf). A tensor is
            refused (``TypeError``), eager and traced alike: the op's schema takes a float, which a traced
            tensor cannot become without reading its value.

    Returns:
        ``x_fp8``: x's shape, ``dtype``, contiguous; ``scale``: float32 of shape ``x.shape[:-1] + (1,)``. Both are
        new tensors and the only ones allocated.

    Not differentiable: with grad mode on, an ``x`` that requires grad is refused. Bad arguments raise
    ``RuntimeError`` naming the argument, what is accepted and what was given (traced calls raise the same).
    """
    if isinstance(scale_ub, torch.Tensor):
        # Eagerly, torch's argument parsing reads a one-element tensor's value for the float (a host sync for a
        # GPU tensor); a traced tensor has no value to read, so tracing failed where the eager call ran.
        raise TypeError(f"fp8ext.quantize_rowwise: scale_ub: expected a Python float or None, got a tensor of "
                        f"shape {tuple(scale_ub.shape)}; pass float(scale_ub) (which reads it on the host)")
    return _QUANTIZE_ROWWISE(x, dtype, scale_ub)


_FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
BLOCK = 128  # K elements per block-wise scale group, and N elements per weight block


def quantize_blockwise(x: torch.Tensor, block: tuple[int, int] = (1, 128),
                       dtype: torch.dtype = E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x [R, C]`` to FP8 with one float32 scale per ``block`` of it: ``(x_fp8, scale)``, the block-wise
    recipe of DeepSeek-V3 and of the Qwen3 ``-FP8`` checkpoints. For each block, in float32::

        amax  = max(max(|x|) over the block, 1e-12)   # an all-zero block gets a finite scale
        scale = amax / FP8_MAX                          # 448 for float8_e4m3fn
        x_fp8 = fp8(clamp(x * (FP8_MAX / amax), -FP8_MAX, FP8_MAX))   # round to nearest even

    ``block=(1, 128)``: activations ``[M, K]``, one scale per 1 x 128 group of a row. ``scale`` is
    ``[M, ceil(K / 128)]`` in torch's layout (strides ``(1, M)``), what ``fp8ext.scaled_mm`` and
    ``torch._scaled_mm`` take as ``scale_a``.

    ``block=(128, 128)``: a weight ``[N, K]``, one scale per 128 x 128 block. ``scale`` is
    ``[ceil(N / 128), ceil(K / 128)]``, contiguous (the layout of DeepSeek's ``weight_scale_inv``); pass
    ``b = x_fp8.t()`` and ``scale_b = scale.t()``.

    A partial last group or block (K or N not a multiple of 128) is scaled by its own values. Activations whose
    K is a multiple of 16 with a contiguous last dimension (any row stride) go through one fused op,
    ``torch.ops.fp8ext.quantize_blockwise`` (a CUDA kernel, csrc/quantize_blockwise.cu, and a CPU path), which
    allocates only the two outputs; weights and other activations through torch ops. Both compute the same bits,
    on any device, under ``torch.compile`` and in CUDA graphs, with no host sync. Not differentiable: with grad
    mode on, an ``x`` that requires grad is refused (``RuntimeError``), by either path.
    """
    _refuse_missing("fp8ext.quantize_blockwise", ("x",), (x,))
    if isinstance(block, list):  # as checkpoints' configs store it (weight_block_size: [128, 128])
        block = tuple(block)
    if block not in ((1, BLOCK), (BLOCK, BLOCK)):
        raise ValueError(f"fp8ext.quantize_blockwise: block must be (1, 128) (activations) or (128, 128) "
                         f"(weights), got {block!r}")
    if dtype not in _FP8_MAX:
        raise ValueError(f"fp8ext.quantize_blockwise: dtype must be torch.float8_e4m3fn or torch.float8_e5m2, "
                         f"got {dtype}")
    if x.dim() != 2:
        raise ValueError(f"fp8ext.quantize_blockwise: expected a 2-D tensor [R, C], got shape {list(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"fp8ext.quantize_blockwise: expected a bfloat16, float16 or float32 tensor, got {x.dtype}")
    if torch.is_grad_enabled():
        # The fused op's autograd guard refuses it; the torch ops of the other path would record a backward.
        _refuse_grad("fp8ext.quantize_blockwise", ("x",), (x,))
    if block == (1, BLOCK) and _fused_groups(x):
        return _QUANTIZE_BLOCKWISE(x, dtype)
    return _quantize_blocks_composed(x, block, dtype)


def _fused_groups(x: torch.Tensor) -> bool:
    """Whether torch.ops.fp8ext.quantize_blockwise takes these activations: K a positive multiple of 16, the last
    dimension contiguous (its checks, quantize_blockwise_op.cpp)."""
    K = x.shape[1]
    return K > 0 and K % 16 == 0 and (x.shape[0] == 0 or x.stride(1) == 1)


def _quantize_blocks_composed(x: torch.Tensor, block: tuple[int, int], dtype: torch.dtype):
    """quantize_blockwise in torch ops: the weights' 128 x 128 blocks, activations the fused op does not take, and
    the reference the tests hold the fused op to."""
    fp8_max = _FP8_MAX[dtype]
    rows, cols = x.shape
    br, bc = block
    groups_r, groups_c = -(-rows // br), -(-cols // bc)
    # Zero padding to whole blocks changes no block's amax.
    xp = torch.nn.functional.pad(x.float(), (0, groups_c * bc - cols, 0, groups_r * br - rows))
    blocks = xp.view(groups_r, br, groups_c, bc)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # [groups_r, groups_c]
    inv = torch.full_like(amax, fp8_max) / amax  # a true float32 division, as quantize_rowwise computes it
    q = (blocks * inv[:, None, :, None]).clamp(-fp8_max, fp8_max).to(dtype)
    q = q.view(groups_r * br, groups_c * bc)[:rows, :cols].contiguous()
    # A tensor divisor: CUDA divides by a Python scalar as a multiply by its reciprocal, which is not the correctly
    # rounded quotient the kernels and the CPU compute.
    scale = amax / torch.full_like(amax, fp8_max)
    if br == 1:
        scale = scale.t().contiguous().t()  # [M, G] with strides (1, M), torch's layout for scale_a
    return q, scale


@torch.library.register_fake("fp8ext::quantize_blockwise")
def _quantize_blockwise_fake(x, dtype=None):
    # The C++ validation on the traced tensor's metadata, as for quantize_rowwise.
    _refuse_missing("fp8ext.quantize_blockwise", ("x",), (x,))
    _run_check(torch.ops.fp8ext._check_quantize_blockwise_meta, [_size_hint(s) for s in x.shape],
               [_size_hint(s) for s in x.stride()], x.dtype, dtype)
    M, K = x.shape
    q = x.new_empty((M, K), dtype=E4M3 if dtype is None else dtype)
    return q, x.new_empty((-(-K // BLOCK), M), dtype=torch.float32).t()


def _check_quantize_rowwise(x, dtype, scale_ub) -> None:
    """The C++ validation of quantize_rowwise on x's metadata, so that tracing raises the eager messages."""
    _refuse_missing("fp8ext.quantize_rowwise", ("x",), (x,))
    _run_check(torch.ops.fp8ext._check_quantize_rowwise_meta, [_size_hint(s) for s in x.shape],
               [_size_hint(s) for s in x.stride()], x.dtype, dtype, scale_ub)


@torch.library.register_fake("fp8ext::quantize_rowwise")
def _quantize_rowwise_fake(x, dtype=None, scale_ub=None):
    _check_quantize_rowwise(x, dtype, scale_ub)
    q = x.new_empty(x.shape, dtype=E4M3 if dtype is None else dtype)
    return q, x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


def silu_mul_quantize_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated activation of a SwiGLU MLP and its row-wise quantize in one call: for ``x [M, 2I]`` (the gate
    half, then the up half, as a fused gate-up projection writes them)::

        y = silu(x[:, :I]) * x[:, I:]          # as torch computes it in x's dtype: each op in float32, rounded
        x_fp8, scale = quantize_rowwise(y)     # float8_e4m3fn [M, I], float32 [M, 1]

    equal bit for bit to ``quantize_rowwise(torch.nn.functional.silu(gate) * up)``. On CUDA one kernel reads x once
    and writes only q and scale (the three ops read and write y twice more); on CPU it runs those three ops.

    Args:
        x: bfloat16, float16 or float32 ``[M, 2I]``, I a multiple of 16, last dimension contiguous.

    Not differentiable (an ``x`` that requires grad is refused with grad mode on). Bad arguments raise
    ``RuntimeError`` naming the argument, as quantize_rowwise's do.
    """
    return _SILU_MUL_QUANTIZE(x)


def _check_silu_mul_quantize(x) -> None:
    _refuse_missing("fp8ext.silu_mul_quantize_rowwise", ("x",), (x,))
    _run_check(torch.ops.fp8ext._check_silu_mul_quantize_meta, [_size_hint(s) for s in x.shape],
               [_size_hint(s) for s in x.stride()], x.dtype)


@torch.library.register_fake("fp8ext::silu_mul_quantize_rowwise")
def _silu_mul_quantize_fake(x):
    _check_silu_mul_quantize(x)
    return x.new_empty((x.shape[0], x.shape[1] // 2), dtype=E4M3), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def _silu_mul_quantize_cpu(x):
    # torch's own silu and mul, then quantize_rowwise: the definition itself (the CUDA kernel matches it bit for bit)
    _check_silu_mul_quantize(x)
    gate, up = x.chunk(2, dim=-1)
    return torch.ops.fp8ext.quantize_rowwise(torch.nn.functional.silu(gate) * up)


_IMPL.impl("silu_mul_quantize_rowwise", _silu_mul_quantize_cpu, "CPU")


def _check(cond: bool, arg: str, message: str) -> None:
    if not cond:
        raise ValueError(f"fp8ext.f8f8bf16_rowwise: {arg}: {message}")


def _check_device(t: torch.Tensor, arg: str, device: torch.device) -> None:
    _check(t.device == device, arg, f"expected a tensor on {device} (the device of XQ), got one on {t.device}")


def _scale_vector(scale: torch.Tensor, arg: str, length: int, shapes: tuple, accepted: str) -> torch.Tensor:
    _check(scale.dtype == torch.float32, arg, f"expected dtype torch.float32, got {scale.dtype}")
    _check(tuple(scale.shape) in shapes, arg, f"expected shape {accepted}, got {tuple(scale.shape)}")
    return scale.reshape(length)


def f8f8bf16_rowwise(XQ: torch.Tensor, WQ: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor,
                     bias: Optional[torch.Tensor] = None, use_fast_accum: bool = True,
                     output: Optional[torch.Tensor] = None) -> torch.Tensor:
    """FBGEMM's / MSLK's ``f8f8bf16_rowwise`` convention on fp8ext.scaled_mm:
    ``out[m, n] = x_scale[m] * w_scale[n] * sum_k XQ[m, k] * WQ[n, k] (+ bias[n])`` in bfloat16.

    Args:
        XQ: ``[M, K]`` float8_e4m3fn activations (e.g. from quantize_rowwise), or ``[..., K]``: as FBGEMM, the
            leading dimensions are the rows (M is their product) and the result has them too.
        WQ: ``[N, K]`` float8_e4m3fn weight, row-major as stored (not transposed).
        x_scale: float32 ``[M]`` or ``[M, 1]``, or for a ``[..., K]`` XQ its leading shape ``[...]`` or ``[..., 1]``.
        w_scale: float32 ``[N]``, ``[1, N]`` or ``[N, 1]``.
        bias: optional ``[N]`` bfloat16 (added in float32 before the one rounding) or float32 (rounded to
            bfloat16 first: fp8ext.scaled_mm takes a bias of the output's dtype).
        use_fast_accum: as in fp8ext.scaled_mm.
        output: optional ``[M, N]`` (``[..., N]``) bfloat16 tensor on XQ's device to receive the result. It is
            filled by a copy of the op's result (fp8ext.scaled_mm has no out= variant), so it saves no memory.

    Returns:
        The ``[M, N]`` (``[..., N]``) bfloat16 result (``output`` itself if given).

    A wrong rank, shape, dtype or device of any argument above raises ``ValueError`` naming it (XQ and WQ may
    also be float8_e5m2, as fp8ext.scaled_mm allows); the rest (K or N not a multiple of 16, both operands e5m2,
    strides, alignment) raise fp8ext.scaled_mm's RuntimeError, where ``a`` is XQ and ``b`` is ``WQ.t()``.
    """
    for name, t in (("XQ", XQ), ("WQ", WQ)):
        _check(t.dtype in FP8_DTYPES, name, f"expected dtype torch.float8_e4m3fn or torch.float8_e5m2, got {t.dtype}")
    _check(XQ.dim() >= 2, "XQ", f"expected a tensor [M, K] or [..., K], got shape {tuple(XQ.shape)}")
    _check(WQ.dim() == 2, "WQ", f"expected a 2-D tensor [N, K] (the weight as stored, not transposed), "
                                f"got shape {tuple(WQ.shape)}")
    lead, K, N = tuple(XQ.shape[:-1]), XQ.shape[-1], WQ.shape[0]
    M = math.prod(lead)
    _check(WQ.shape[1] == K, "WQ", f"expected shape [N, K] with K = {K} (XQ is {list(XQ.shape)}), "
                                   f"got {list(WQ.shape)}")
    _check_device(WQ, "WQ", XQ.device)
    # a 2-D XQ's leading shape is (M,): the same two shapes, named once
    accepted = "(M,) or (M, 1)" if len(lead) == 1 else f"(M,), (M, 1), {lead} or {(*lead, 1)}"
    sa = _scale_vector(x_scale, "x_scale", M, ((M,), (M, 1), lead, (*lead, 1)), f"{accepted} with M = {M}")
    sb = _scale_vector(w_scale, "w_scale", N, ((N,), (1, N), (N, 1)), f"(N,), (1, N) or (N, 1) with N = {N}")
    _check_device(x_scale, "x_scale", XQ.device)
    _check_device(w_scale, "w_scale", XQ.device)
    if bias is not None:
        _check(bias.dtype in (torch.bfloat16, torch.float32), "bias",
               f"expected dtype torch.bfloat16 or torch.float32, got {bias.dtype}")
        _check(tuple(bias.shape) == (N,), "bias", f"expected shape (N,) with N = {N}, got {tuple(bias.shape)}")
        _check_device(bias, "bias", XQ.device)
        bias = bias.to(torch.bfloat16)
    if output is not None:
        _check(tuple(output.shape) == (*lead, N) and output.dtype == torch.bfloat16 and output.device == XQ.device,
               "output", f"expected a torch.bfloat16 tensor of shape {(*lead, N)} on {XQ.device}, got "
                         f"{output.dtype} of shape {tuple(output.shape)} on {output.device}")
    out = scaled_mm(XQ.reshape(M, K), WQ.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16,
                    use_fast_accum=use_fast_accum).view(*lead, N)
    if output is None:
        return out
    return output.copy_(out)
