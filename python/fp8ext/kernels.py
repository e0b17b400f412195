"""Which kernels this build has and which one a call runs: the kernel queries (kernel_names, selected_kernel,
selected_blockwise_kernel, kernel_traits), and the process-wide controls of the dispatch (force_kernel,
set_backends / backends, FP8EXT_BACKENDS). Each answers without a GPU (for an H200) where it can; the ops
themselves are in ops.py, the dispatch in csrc/sm90/dispatch/."""
from __future__ import annotations

import contextlib
import operator
import os
import warnings
from typing import Iterator, Optional

import torch

from . import _eager_route
from .ops import FP8_DTYPES, OUT_DTYPES


def _has_cuda_kernels() -> bool:
    return hasattr(torch.ops.fp8ext, "_kernel_names")


def blockwise_kernel_names() -> list[str]:
    """Names of the block-scaled sm_90a kernels compiled into this build (csrc/sm90/blockwise_kernels; empty for
    a CPU-only build). ``force_kernel`` takes them too."""
    return list(torch.ops.fp8ext._blockwise_kernel_names()) if _has_cuda_kernels() else []


_MAX_DIM = 2**31 - 1  # the largest M, N and K fp8ext.scaled_mm takes (CUTLASS's problem sizes are int)
_SM_COUNT_WITHOUT_GPU = 132  # an H200's: what the kernel queries assume on a machine without a GPU


def _check_query(fn: str, M, N, K, out_dtype: torch.dtype, a_dtype: torch.dtype = torch.float8_e4m3fn) -> None:
    """A kernel query's problem, checked as fp8ext.scaled_mm checks a call, before anything reaches C++: the
    dispatch's cost model takes only calls that scaled_mm accepts and launches (it divides by M, N and K)."""
    dims = {"M": operator.index(M), "N": operator.index(N), "K": operator.index(K)}  # TypeError for a float
    for name, n in dims.items():
        if not 0 <= n <= _MAX_DIM:
            raise ValueError(f"fp8ext.{fn}: {name} = {n}: expected 0 <= {name} <= 2^31 - 1")
    for name in ("N", "K"):
        if dims[name] % 16:
            raise ValueError(f"fp8ext.{fn}: {name} = {dims[name]} is not a multiple of 16: fp8ext.scaled_mm refuses "
                             "such a call, no kernel runs it")
    if 0 in dims.values():
        raise ValueError(f"fp8ext.{fn}: M, N, K = {M}, {N}, {K}: fp8ext.scaled_mm answers a call with an empty "
                         "dimension without launching a kernel (an empty result, or zeros plus the bias for K = 0), "
                         "so no kernel is selected for it")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"fp8ext.{fn}: out_dtype: expected torch.bfloat16, torch.float16 or torch.float32, got "
                         f"{out_dtype}")
    if a_dtype not in FP8_DTYPES:
        raise ValueError(f"fp8ext.{fn}: a_dtype: expected torch.float8_e4m3fn or torch.float8_e5m2, got {a_dtype}")


def _sm_count() -> int:
    if not torch.cuda.is_available():
        return _SM_COUNT_WITHOUT_GPU
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def selected_blockwise_kernel(M: int, N: int, K: int, out_dtype: torch.dtype = torch.bfloat16,
                              capturing: bool = False, torch_ok: bool = True) -> Optional[str]:
    """What a block-wise call of this shape runs on this GPU (without a GPU: on an H200, as ``selected_kernel``
    answers): a forced block-scaled kernel, else dispatch's pick
    (csrc/sm90/blockwise_dispatch.h; inside CUDA-graph capture never a stream-K one), which is
    ``"torch._scaled_mm"`` where torch's block-wise path is predicted faster (the backstop: with torch 2.11 only,
    for M > 128, M and K / 128 multiples of 4, and bf16 output; ``torch_ok=False`` says torch cannot take the call
    as given, e.g. it has a bias or its scales are not in torch's layouts; ``set_backends("fp8ext")`` turns the
    backstop off). None if no block-scaled kernel of this build writes ``out_dtype``.

    ValueError for a shape or out dtype that fp8ext.scaled_mm refuses, and for M, N or K = 0, which it answers
    without a kernel (as ``selected_kernel``)."""
    if not _has_cuda_kernels():
        return None
    _check_query("selected_blockwise_kernel", M, N, K, out_dtype)
    return torch.ops.fp8ext._selected_blockwise_kernel(M, N, K, out_dtype, _sm_count(), capturing,
                                                       torch_ok=torch_ok) or None


def kernel_names() -> list[str]:
    """Names of the sm_90a kernels compiled into this build (empty for a CPU-only build)."""
    return list(torch.ops.fp8ext._kernel_names()) if _has_cuda_kernels() else []


def selected_kernel(M: int, N: int, K: int, out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = True,
                    a_dtype: torch.dtype = torch.float8_e4m3fn, capturing: bool = False, explain: bool = False,
                    torch_ok: bool = True):
    """What a row-wise call of this shape runs on an sm_90 GPU: a forced kernel, else the autotuner's remembered
    choice (when autotuning is on), else the cost model's best built kernel, or ``"torch._scaled_mm"`` where the
    model predicts torch's own row-wise path faster (the backstop; ``torch_ok=False`` says torch cannot take the
    call, e.g. it has a bias, and ``set_backends("fp8ext")`` turns the backstop off). With ``capturing=True``, the
    choice inside CUDA-graph capture (never a stream-K kernel unless forced). None if no built kernel fits.

    The name carries the tile scheduler's options chosen for the call, e.g. ``coop_128x256x128_c2x1_fast_bf16@H1``
    (CUTLASS's raster, bands of 1 tile: the widest band that adds no padded tile); ``force_kernel`` accepts it.

    With ``explain=True`` returns a dict: ``selected`` (the name above) and ``ranking``, every built kernel that
    computes the call, fastest predicted first, each ``{"kernel", "predicted_us", "tile_ratio", "calibrated"}``,
    and ``torch_predicted_us`` (negative when the model has no calibration for torch).

    Without a GPU it answers for an H200. Raises ValueError, naming the argument, for what fp8ext.scaled_mm
    refuses (M, N or K negative or beyond 2^31 - 1, N or K not a multiple of 16, an ``out_dtype`` other than
    bfloat16, float16 or float32, an ``a_dtype`` that is not FP8), and for M, N or K = 0: a valid call, which
    scaled_mm answers without launching any kernel, so there is none to name."""
    if not _has_cuda_kernels():
        return None
    _check_query("selected_kernel", M, N, K, out_dtype, a_dtype)
    name = torch.ops.fp8ext._selected_kernel(M, N, K, out_dtype, use_fast_accum, a_dtype, capturing, torch_ok) or None
    if not explain:
        return name
    ranking = []
    for line in torch.ops.fp8ext._rank_kernels(M, N, K, out_dtype, use_fast_accum, a_dtype, capturing):
        kernel, us, ratio, calibrated = line.split(" ")
        ranking.append({"kernel": kernel, "predicted_us": float(us), "tile_ratio": float(ratio),
                        "calibrated": calibrated == "1"})
    torch_row = ranking.pop()  # the last line is torch's row-wise estimate
    return {"selected": name, "ranking": ranking, "torch_predicted_us": torch_row["predicted_us"]}


def set_backends(backends: str) -> None:
    """``"fp8ext,torch"`` (the default): dispatch may hand a call to torch._scaled_mm (its row-wise path for
    row-wise scales, its block-wise path for block-wise ones) where the cost model predicts it faster.
    ``"fp8ext"``: fp8ext's own kernels only. Process-wide; the environment
    variable FP8EXT_BACKENDS sets the same at start-up."""
    if not _has_cuda_kernels():
        raise RuntimeError("fp8ext.set_backends: this build has no CUDA kernels")
    torch.ops.fp8ext._set_backends(backends)
    _eager_route.forget()


def _backends_from_environment() -> None:
    # FP8EXT_BACKENDS, applied at import with set_backends' own parser: a value it refuses ("fp8ext, torch",
    # "Torch") is ignored with a warning and the default stays, where it was once read another way and turned the
    # backstop off without a word.
    value = os.environ.get("FP8EXT_BACKENDS", "")
    if not value or not _has_cuda_kernels():
        return
    try:
        set_backends(value)
    except RuntimeError:
        warnings.warn(f"fp8ext: FP8EXT_BACKENDS={value!r} is ignored: it must be 'fp8ext' or 'fp8ext,torch' (no "
                      f"spaces); the backends stay {backends()!r}", stacklevel=3)


def backends() -> str:
    """The backends the default dispatch may use (see set_backends); "fp8ext" on a build without CUDA kernels."""
    return torch.ops.fp8ext._backends() if _has_cuda_kernels() else "fp8ext"


_MANIFEST = None


def kernel_traits(name: str) -> dict:
    """A kernel's traits (tile, cluster, schedule, accumulation, dtypes, max M, workspace, twin) from the kernel
    manifest (python/fp8ext/kernel_manifest.json, written by csrc/sm90/generate_kernels.py), for the row-wise and
    the block-scaled (``bw_...``) kernels alike; a block-scaled kernel's traits also say its decode kernels'
    ``rowwise_twin``. ``name`` may carry scheduler options (``...@H1``). KeyError for a name that is not a kernel
    of either family."""
    global _MANIFEST
    if _MANIFEST is None:
        from importlib import resources
        import json

        data = json.loads(resources.files(__package__).joinpath("kernel_manifest.json").read_text())
        _MANIFEST = {k["name"]: k for k in [*data["kernels"], *data["blockwise_kernels"]]}
    return dict(_MANIFEST[name.split("@")[0]])


@contextlib.contextmanager
def force_kernel(name: Optional[str]) -> Iterator[None]:
    """Run every row-wise sm_90 call in the block with the named kernel (for tests, tuning and debugging). The
    kernel must compute the call's out dtype and accumulation mode, or the call raises. A block-scaled kernel's
    name (``blockwise_kernel_names()``) forces block-wise calls instead; calls with the other kind of scales then
    raise.

    It is a context manager: ``with fp8ext.force_kernel(name):``; calling it without ``with`` does nothing.
    Blocks nest: an inner block (``None`` clears the forcing inside it) gives the outer block's kernel back when it
    ends, and the last block to end restores no forcing. The setting is process-wide, not thread-local: while a
    block is open in one thread, every thread's calls (and ``selected_kernel``) use its kernel, and blocks that
    open and close in different threads at the same time restore each other's kernels in the order they end.

    ``name`` may end in ``@`` + raster + band, the persistent tile scheduler's walk over the output tiles in the
    kernel's own frame (a swapped kernel's M is the call's N): raster ``M``, ``N`` or ``H`` (CUTLASS's
    heuristic), band width 1, 2, 4 or 8 tiles. ``name`` alone means ``@H8``."""
    if not _has_cuda_kernels():
        raise RuntimeError("fp8ext.force_kernel: this build has no CUDA kernels")
    outer = torch.ops.fp8ext._forced_kernel()
    _eager_route.hold("forced", True)  # the eager shortcuts would pass the forced kernel by
    try:
        torch.ops.fp8ext._force_kernel(name or "")
        try:
            yield
        finally:
            torch.ops.fp8ext._force_kernel(outer)
    finally:
        _eager_route.hold("forced", False)
