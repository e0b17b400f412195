"""The opt-in autotuner: time the cost model's best few kernels once per shape bucket and keep the fastest.

    fp8ext.autotune(True, cache_file="~/.cache/fp8ext-h200.json")   # or FP8EXT_AUTOTUNE=1 [FP8EXT_AUTOTUNE_CACHE=...]

A bucket is (GPU name, SM count, CUDA, torch and fp8ext versions; M rounded up to the next multiple of 16 up to
128, of 64 up to 1024, of 128 beyond; the exact N and K; out dtype, accumulation, input dtypes). The first
row-wise call of a bucket on an sm_90 GPU times the cost model's 6 best kernels for it, each with the scheduler
options the model chose, on that call's own operands (a few milliseconds, once) and remembers the fastest
(written as ``name@options``); later calls of the bucket run it directly. The choices live in
the process and, with a cache file, in a JSON file that is loaded by the next process and, after each new
choice, merged with what is in it now (under a lock on ``<file>.lock``, so processes sharing the file keep each
other's buckets) and replaced atomically (fsynced temporary file, then rename). A file that cannot be read as a
cache (truncated, empty, NUL bytes, binary, a directory, another format) is ignored with one warning that names
it and says why; the next new choice replaces it. Tuning never happens during CUDA-graph capture (a capture uses a remembered choice, or the
cost model's), is serialised across threads, and a kernel forced with `fp8ext.force_kernel` wins over it.

The tuning itself lives in C++ (csrc/sm90/autotune.cpp, timed in csrc/scaled_mm_cuda.cpp) so that it also
serves `torch.ops.fp8ext.scaled_mm` under torch.compile; this module only configures it. The file's reader
and writer are one C++ implementation (csrc/sm90/autotune_cache.cpp), in every build.
"""
from __future__ import annotations

import os
import warnings
from typing import Optional, Union

import torch

from . import _eager_route
from .kernels import _has_cuda_kernels  # the autotuner's ops are registered with the CUDA kernels

FORMAT = "fp8ext-autotune-1"
ENV_ENABLE = "FP8EXT_AUTOTUNE"
ENV_CACHE = "FP8EXT_AUTOTUNE_CACHE"


def read_cache(path: Union[str, os.PathLike]) -> dict[str, str]:
    """The {bucket: kernel name} entries of an autotune cache file ({} if there is none); ValueError saying why
    if the file is not a readable cache."""
    path = os.fspath(path)
    error, flat = torch.ops.fp8ext._autotune_cache_read(path)
    if error:
        raise ValueError(f"fp8ext.autotune: the cache file {path} cannot be used: {error}")
    return dict(zip(flat[0::2], flat[1::2]))


def _load_cache(path: str) -> dict[str, str]:
    # A damaged cache must not stop the program (this runs at import with FP8EXT_AUTOTUNE=1): warn once, tune
    # afresh, and let the next new choice replace the file.
    try:
        return read_cache(path)
    except ValueError as e:
        warnings.warn(f"{e}; ignoring it (the next tuned bucket replaces it)", RuntimeWarning, stacklevel=3)
        return {}


def autotune(enabled: bool = True, cache_file: Optional[Union[str, os.PathLike]] = None) -> None:
    """Turn the autotuner on (or off) for this process.

    Args:
        enabled: tune (and use tuned choices) from now on; False goes back to the built-in heuristic, keeping
            the choices made so far for a later ``autotune(True)``.
        cache_file: JSON file of choices, loaded now if it exists and, after each new choice, merged with its
            current contents and replaced atomically. None means ``$FP8EXT_AUTOTUNE_CACHE`` if set, else choices
            stay in memory only. A file that is not a readable cache gives one ``RuntimeWarning`` naming it and
            why, and is ignored.

    Raises RuntimeError on a build without CUDA kernels.
    """
    if not _has_cuda_kernels():
        raise RuntimeError("fp8ext.autotune: this build has no CUDA kernels to tune")
    if cache_file is None:
        cache_file = os.environ.get(ENV_CACHE) or None
    path = os.path.abspath(os.path.expanduser(os.fspath(cache_file))) if cache_file is not None else ""
    entries = _load_cache(path) if path else {}
    torch.ops.fp8ext._autotune_configure(bool(enabled), path, list(entries), list(entries.values()))
    _eager_route.hold("autotune", bool(enabled))  # tuned choices come from the op's first calls


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
