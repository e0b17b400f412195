"""The opt-in autotuner: time every built kernel once per shape bucket and keep the fastest.

    fp8ext.autotune(True, cache_file="~/.cache/fp8ext-h200.json")   # or FP8EXT_AUTOTUNE=1 [FP8EXT_AUTOTUNE_CACHE=...]

A bucket is (GPU, M rounded up to a power of two, N, K, out dtype, accumulation, input dtypes). The first
row-wise call of a bucket on an sm_90 GPU times each kernel that computes it on that call's own operands (a few
milliseconds, once) and remembers the fastest; later calls of the bucket run it directly. The choices live in
the process and, with a cache file, in a JSON file that is rewritten after each new choice and loaded by the
next process. Tuning never happens during CUDA-graph capture (a capture uses a remembered choice, or the
built-in heuristic), is serialised across threads, and a kernel forced with `fp8ext.force_kernel` wins over it.

The tuning itself lives in C++ (csrc/sm90/autotune.cpp, timed in csrc/scaled_mm_cuda.cu) so that it also
serves `torch.ops.fp8ext.scaled_mm` under torch.compile; this module only configures it and reads the file.
"""
from __future__ import annotations

import json
import os
from typing import Optional, Union

import torch

from .ops import _has_cuda_kernels  # the autotuner's ops are registered with the CUDA kernels

FORMAT = "fp8ext-autotune-1"
ENV_ENABLE = "FP8EXT_AUTOTUNE"
ENV_CACHE = "FP8EXT_AUTOTUNE_CACHE"


def read_cache(path: Union[str, os.PathLike]) -> dict[str, str]:
    """The {bucket: kernel name} entries of an autotune cache file; ValueError if it is not one."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"fp8ext.autotune: {path} is not valid JSON ({e}); delete it or pass another "
                         f"cache_file") from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(entries, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        raise ValueError(f"fp8ext.autotune: {path} is not an fp8ext autotune cache (expected a JSON object with "
                         f"\"format\": \"{FORMAT}\" and \"entries\" mapping strings to kernel names)")
    return dict(entries)


def autotune(enabled: bool = True, cache_file: Optional[Union[str, os.PathLike]] = None) -> None:
    """Turn the autotuner on (or off) for this process.

    Args:
        enabled: tune (and use tuned choices) from now on; False goes back to the built-in heuristic, keeping
            the choices made so far for a later ``autotune(True)``.
        cache_file: JSON file of choices, loaded now if it exists and rewritten after each new choice. None
            means ``$FP8EXT_AUTOTUNE_CACHE`` if set, else choices stay in memory only.

    Raises RuntimeError on a build without CUDA kernels, ValueError if the cache file is not an fp8ext cache.
    """
    if not _has_cuda_kernels():
        raise RuntimeError("fp8ext.autotune: this build has no CUDA kernels to tune")
    if cache_file is None:
        cache_file = os.environ.get(ENV_CACHE) or None
    path = os.path.abspath(os.path.expanduser(os.fspath(cache_file))) if cache_file is not None else ""
    entries = read_cache(path) if path and os.path.exists(path) else {}
    torch.ops.fp8ext._autotune_configure(bool(enabled), path, list(entries), list(entries.values()))


def autotune_entries() -> dict[str, str]:
    """The choices made or loaded so far in this process: {bucket: kernel name}."""
    if not _has_cuda_kernels():
        return {}
    flat = list(torch.ops.fp8ext._autotune_entries())
    return dict(zip(flat[0::2], flat[1::2]))


def _configure_from_environment() -> None:
    # FP8EXT_AUTOTUNE=1 turns tuning on at import; a CPU-only build has nothing to tune and ignores it.
    if os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes", "on") and _has_cuda_kernels():
        autotune(True)
