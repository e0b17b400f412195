"""fp8ext: row-wise scaled FP8 GEMM for PyTorch on NVIDIA Hopper.

    import fp8ext
    out = fp8ext.scaled_mm(a, w.t(), scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True)

The same op is `torch.ops.fp8ext.scaled_mm` (torch.compile, CUDA graphs and torch.library.opcheck work with it).

`fp8ext.quantize_rowwise` (also `torch.ops.fp8ext.quantize_rowwise`) quantizes per row to FP8;
`fp8ext.f8f8bf16_rowwise` takes FBGEMM's argument convention (docs/model_path.md).
"""
from __future__ import annotations

import json
from importlib import resources

from .autotune import _configure_from_environment, autotune, autotune_entries
from .ops import (_has_cuda_kernels, backends, force_kernel, kernel_names, kernel_traits, scaled_mm,
                  selected_kernel, set_backends)
from .quantize import f8f8bf16_rowwise, quantize_rowwise

__version__ = "0.1.0"
__all__ = ["scaled_mm", "kernel_names", "kernel_traits", "selected_kernel", "force_kernel", "set_backends",
           "backends", "autotune", "autotune_entries", "build_info", "__version__", "quantize_rowwise",
           "f8f8bf16_rowwise"]

if _has_cuda_kernels():
    # Part of the autotuner's cache key: a choice measured under other versions is tuned again.
    import torch as _torch

    _torch.ops.fp8ext._set_software_key(f"cuda{_torch.version.cuda}/torch{_torch.__version__}/fp8ext{__version__}")
_configure_from_environment()


def build_info() -> dict:
    """How this copy of fp8ext was built: {"cuda": bool, "arch": "sm_90a" | None, "kernels": [...], ...}."""
    try:
        info = json.loads(resources.files(__package__).joinpath("_build_info.json").read_text())
    except (FileNotFoundError, OSError):
        info = {"cuda": None, "arch": None, "kernels": [], "subset": None}
    info["registered_kernels"] = kernel_names()
    info["version"] = __version__
    return info
