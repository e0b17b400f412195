"""fp8ext.scaled_grouped_mm and scaled_grouped_mm_masked: G scaled FP8 matrix products in one call, for
mixture-of-experts layers.

The contract (layouts, scale shapes, what is checked) is written once, in csrc/ops/grouped_checks.h; the CPU
backend is the scaled_mm reference per group (csrc/reference/scaled_grouped_mm_cpu.cpp). This module holds the
Python function, the fake implementation (the same C++ checks, for traced calls) and the autograd guard.
"""
from __future__ import annotations

from typing import Optional

import torch

from .ops import _operands_meta, _refuse_missing, _register_autograd_guard, _run_check

GROUPED_TENSORS = ("a", "b", "scale_a", "scale_b", "offs", "bias")
MASKED_TENSORS = ("a", "b", "scale_a", "scale_b", "masked_m", "bias")


def scaled_grouped_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      offs: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                      out_dtype: Optional[torch.dtype] = None, use_fast_accum: bool = False) -> torch.Tensor:
    """``out_g = (a_g @ b_g) * scales (+ bias[g])`` for every group g, with ``torch._scaled_grouped_mm``'s
    arguments.

    Layouts (``b`` column-major in its last two dimensions: ``w.transpose(-2, -1)`` of row-major weights):

    - ``a [T, K]``, ``b [G, K, N]``, ``offs [G]`` int32: group g owns rows ``offs[g-1] <= r < offs[g]``
      (``offs[-1] = 0``); out ``[T, N]``, zero in the rows past ``offs[G-1]``. Groups may be empty and may start
      at any row.
    - ``a [G, M, K]``, ``b [G, K, N]``, no ``offs``: out ``[G, M, N]``.
    - ``a [M, K_total]``, ``b [K_total, N]``, ``offs [G]`` along K (multiples of 16): out ``[G, M, N]``, the
      gradient of expert weights; an empty K slice gives zeros (plus the bias).

    Scales, float32: row-wise in torch's shapes (``scale_a [T]``, ``[G, M]`` or ``[G * M]``; ``scale_b [G, N]``
    or ``[G * N]``), or block-wise in DeepSeek-V3's (``scale_a [T, ceil(K/128)]`` or ``[G, M, ceil(K/128)]``,
    ``scale_b [G, ceil(K/128), ceil(N/128)]`` as ``s.transpose(-2, -1)`` of the weights' scales), not in the
    2d x 2d layout. The CUDA kernels read block-wise scales in one layout, each row's K groups side by side
    (``scale_a`` row-major; ``scale_b`` as above, from contiguous weight scales); others (torch's ``scale_a``,
    strides ``(1, T)``, as ``quantize_blockwise`` returns it, or slices of wider tensors) are copied to it once per
    call, a small extra kernel. ``bias [G, N]`` in ``out_dtype`` (bfloat16 by default, float16 or
    float32). Operands are ``torch.float8_e4m3fn``; at most 1023 groups.

    Every check that metadata decides runs before anything is allocated. The values of ``offs`` (non-decreasing,
    within a's rows or K_total) are checked where they are read on the host (the CPU backend); on CUDA they stay on
    the device, nothing waits for the GPU and a call can be captured in a CUDA graph, so they are the caller's to
    get right (out-of-range values are clamped: no memory outside the tensors is touched, the result is wrong).

    On an H100/H200 (sm_90a), row-wise and block-wise scales with bfloat16 output run fp8ext's grouped CUTLASS
    kernels; float16/float32 output raises RuntimeError on CUDA in this version. On CPU, every form runs the
    float32 reference, group by group equal to ``scaled_mm``.
    """
    return _SCALED_GROUPED_MM(a, b, scale_a, scale_b, offs, bias, out_dtype, use_fast_accum)


def _output_shape(a: torch.Tensor, b: torch.Tensor, offs: Optional[torch.Tensor]) -> tuple:
    if a.dim() == 2 and b.dim() == 3:
        return (a.size(0), b.size(2))
    if a.dim() == 3:
        return (a.size(0), a.size(1), b.size(2))
    return (offs.size(0), a.size(0), b.size(1))


@torch.library.register_fake("fp8ext::scaled_grouped_mm")
def _scaled_grouped_mm_fake(a, b, scale_a, scale_b, offs=None, bias=None, out_dtype=None, use_fast_accum=False):
    _refuse_missing("fp8ext.scaled_grouped_mm", GROUPED_TENSORS[:4], (a, b, scale_a, scale_b))
    moved = {}
    meta = _operands_meta(GROUPED_TENSORS, (a, b, scale_a, scale_b, offs, bias), moved)
    _run_check(torch.ops.fp8ext._check_scaled_grouped_mm_meta, *meta, out_dtype, moved=moved)
    return a.new_empty(_output_shape(a, b, offs), dtype=torch.bfloat16 if out_dtype is None else out_dtype)


def scaled_grouped_mm_masked(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                             masked_m: torch.Tensor, bias: Optional[torch.Tensor] = None,
                             out_dtype: Optional[torch.dtype] = None, use_fast_accum: bool = False,
                             expected_m: Optional[int] = None) -> torch.Tensor:
    """The masked form of scaled_grouped_mm, for decode under CUDA graphs (fixed shapes, counts on the device):
    ``a [G, M_max, K]``, ``b [G, K, N]`` and the 3d x 3d layout's scales (row-wise ``[G, M_max]`` and ``[G, N]``,
    or block-wise), with ``masked_m [G]`` int32: group g computes its first ``masked_m[g]`` rows. The output is
    ``[G, M_max, N]``; the rows past each group's count are not written (their values are undefined).
    ``expected_m``: a hint, the rows a group usually holds (within [0, M_max]), for the choice of kernel (default
    M_max). The counts are checked (within [0, M_max]) where they are read on the host (CPU); on CUDA, out-of-range
    counts are clamped.
    """
    return _SCALED_GROUPED_MM_MASKED(a, b, scale_a, scale_b, masked_m, bias, out_dtype, use_fast_accum, expected_m)


@torch.library.register_fake("fp8ext::scaled_grouped_mm_masked")
def _scaled_grouped_mm_masked_fake(a, b, scale_a, scale_b, masked_m, bias=None, out_dtype=None,
                                   use_fast_accum=False, expected_m=None):
    _refuse_missing("fp8ext.scaled_grouped_mm_masked", MASKED_TENSORS[:5], (a, b, scale_a, scale_b, masked_m))
    moved = {}
    meta = _operands_meta(GROUPED_TENSORS + ("masked_m",), (a, b, scale_a, scale_b, None, bias, masked_m), moved)
    _run_check(torch.ops.fp8ext._check_scaled_grouped_mm_meta, *meta[:18], out_dtype, *meta[18:], expected_m,
               moved=moved)
    return a.new_empty(_output_shape(a, b, None), dtype=torch.bfloat16 if out_dtype is None else out_dtype)


if hasattr(torch.ops.fp8ext, "_scaled_grouped_mm_with_kernel"):  # a CUDA build: the op exists
    @torch.library.register_fake("fp8ext::_scaled_grouped_mm_with_kernel")
    def _scaled_grouped_mm_with_kernel_fake(a, b, scale_a, scale_b, offs, bias, out_dtype, use_fast_accum, kernel,
                                            masked_m=None):
        # scaled_grouped_mm (masked where masked_m is given) on one named kernel (the grouped suite's timings),
        # checked alike.
        if masked_m is not None:
            return _scaled_grouped_mm_masked_fake(a, b, scale_a, scale_b, masked_m, bias, out_dtype, use_fast_accum)
        return _scaled_grouped_mm_fake(a, b, scale_a, scale_b, offs, bias, out_dtype, use_fast_accum)


_SCALED_GROUPED_MM = _register_autograd_guard("scaled_grouped_mm", GROUPED_TENSORS, 4)
_SCALED_GROUPED_MM_MASKED = _register_autograd_guard("scaled_grouped_mm_masked", MASKED_TENSORS, 5)
