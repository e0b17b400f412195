"""The public op and its fake (meta) implementation.

`torch.ops.fp8ext.scaled_mm` is defined once, in C++ (csrc/bindings.cpp). This module adds the fake
implementation that torch.compile, torch.export and opcheck use to know the output's shape, dtype and strides
without running the kernel, and the documented Python entry `fp8ext.scaled_mm`.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

from . import _C  # noqa: F401  (loading the library registers torch.ops.fp8ext)

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_OUT = (torch.bfloat16, torch.float16, torch.float32)


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    use_fast_accum: bool = False,
) -> torch.Tensor:
    """``out = scale_a * scale_b * (a @ b) (+ bias)`` with FP8 inputs; a drop-in for ``torch._scaled_mm``.

    Args:
        a: ``[M, K]`` float8_e4m3fn (or e5m2), row-major; a padded leading dimension (a view ``x[:, :K]``) is fine.
        b: ``[K, N]`` float8_e4m3fn, column-major: ``w.t()`` of a row-major weight ``w`` of shape ``[N, K]``.
        scale_a: float32, ``(M, 1)`` or ``(M,)`` for one scale per row of ``a``, or one element (tensor-wise).
        scale_b: float32, ``(1, N)`` or ``(N,)`` for one scale per column of ``b``, or one element.
        bias: optional ``[N]`` tensor of dtype ``out_dtype``, added after scaling.
        out_dtype: ``torch.bfloat16`` (default), ``torch.float16`` or ``torch.float32``.
        use_fast_accum: as in ``torch._scaled_mm``; False promotes partial sums to fp32 every 128 (some large-M
            kernels: 256) of K.

    Returns:
        A new contiguous ``[M, N]`` tensor of ``out_dtype`` on ``a``'s device.

    K and N must be multiples of 16. Bad arguments raise ``RuntimeError`` naming the argument before anything
    runs (docs/errors.md lists every message).
    """
    return torch.ops.fp8ext.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


@torch.library.register_fake("fp8ext::scaled_mm")
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
    # The structural checks that decide the output's metadata, with the C++ messages (scaled_mm_checks.cpp).
    # Strides, alignment and scale layout are checked by the real kernel when the compiled graph runs.
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    prefix = "fp8ext.scaled_mm: "
    torch._check(out_dtype in _OUT, lambda: f"{prefix}out_dtype: expected torch.bfloat16, torch.float16 or "
                                            f"torch.float32, got {out_dtype}")
    for name, t, dims in (("a", a, "[M, K]"), ("b", b, "[K, N]")):
        torch._check(t.dim() == 2, lambda: f"{prefix}{name}: expected a 2-D tensor {dims}, got a {t.dim()}-D "
                                           f"tensor of shape {list(t.shape)}")
        torch._check(t.dtype in _FP8, lambda: f"{prefix}{name}: expected dtype torch.float8_e4m3fn or "
                                              f"torch.float8_e5m2, got {t.dtype}")
    torch._check(b.size(0) == a.size(1), lambda: f"{prefix}b: expected shape [K, N] with K = {a.size(1)} "
                                                 f"(a is {list(a.shape)}), got {list(b.shape)}")
    if bias is not None:
        torch._check(bias.dtype == out_dtype, lambda: f"{prefix}bias: expected dtype {out_dtype} (the out_dtype), "
                                                      f"got {bias.dtype}; pass bias.to({out_dtype})")
    return a.new_empty((a.size(0), b.size(1)), dtype=out_dtype)


def _has_cuda_kernels() -> bool:
    return hasattr(torch.ops.fp8ext, "_kernel_names")


def kernel_names() -> list[str]:
    """Names of the sm_90a kernels compiled into this build (empty for a CPU-only build)."""
    return list(torch.ops.fp8ext._kernel_names()) if _has_cuda_kernels() else []


def selected_kernel(M: int, N: int, K: int, out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = True,
                    a_dtype: torch.dtype = torch.float8_e4m3fn, capturing: bool = False) -> Optional[str]:
    """The kernel a row-wise call of this shape would run on an sm_90 GPU: a forced one, else the autotuner's
    remembered choice (when autotuning is on), else the heuristic's; with ``capturing=True``, the one it would
    run inside CUDA-graph capture (never a stream-K kernel unless forced). None if no built kernel fits.

    The name may carry the tile scheduler's options that the dispatch table measured best for the shape, e.g.
    ``pp_128x128x128_c1x2_fast_bf16@N4`` (raster along N, bands of 4 tiles); ``force_kernel`` accepts it."""
    if not _has_cuda_kernels():
        return None
    return torch.ops.fp8ext._selected_kernel(M, N, K, out_dtype, use_fast_accum, a_dtype, capturing) or None


@contextlib.contextmanager
def force_kernel(name: Optional[str]) -> Iterator[None]:
    """Run every row-wise sm_90 call in the block with the named kernel (process-wide; for tests, tuning and
    debugging). The kernel must compute the call's out dtype and accumulation mode, or the call raises.

    ``name`` may end in ``@`` + raster + band, the persistent tile scheduler's walk over the output tiles in the
    kernel's own frame (a swapped kernel's M is the call's N): raster ``M``, ``N`` or ``H`` (CUTLASS's
    heuristic), band width 1, 2, 4 or 8 tiles. ``name`` alone means ``@H8``."""
    if not _has_cuda_kernels():
        raise RuntimeError("fp8ext.force_kernel: this build has no CUDA kernels")
    torch.ops.fp8ext._force_kernel(name or "")
    try:
        yield
    finally:
        torch.ops.fp8ext._force_kernel("")
