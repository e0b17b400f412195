"""fp8ext: FP8 GEMM with row-wise and block-wise scales for PyTorch on NVIDIA Hopper.

    import fp8ext
    out = fp8ext.scaled_mm(a, w.t(), scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True)

scale_a / scale_b: one float32 per row of a / column of b (row-wise), or one per 1 x 128 group of a's rows and one
per 128 x 128 block of b (block-wise, DeepSeek-V3 and Qwen3-FP8 checkpoints; fp8ext.quantize_blockwise makes them).

The same op is `torch.ops.fp8ext.scaled_mm` (torch.compile and CUDA graphs work with it; of
torch.library.opcheck's tests it passes test_faketensor, test_autograd_registration and test_aot_dispatch_dynamic,
not test_schema, which compares the inputs before and after with torch.allclose, and that has no FP8 kernel).

From a bf16 model to FP8 (docs/model_path.md): `fp8ext.convert(model)` swaps its nn.Linear layers for
`fp8ext.nn.Float8Linear`, built on `fp8ext.linear` (`torch.ops.fp8ext.linear`: `fp8ext.quantize_rowwise`, also
`torch.ops.fp8ext.quantize_rowwise`, then scaled_mm, in one call);
`fp8ext.f8f8bf16_rowwise` takes FBGEMM's argument convention; `fp8ext.TorchaoConfig` (needs torchao) is the same
swap as a `torchao.quantization.quantize_` config.
"""
from __future__ import annotations

import copy
import json
from importlib import resources

import torch as _torch

from . import _compat


def _read_build_info() -> dict | None:
    try:
        return json.loads(resources.files(__package__).joinpath("_build_info.json").read_text())
    except (FileNotFoundError, OSError, ValueError):
        return None  # a source tree that was never built


_BUILD_INFO = _read_build_info()
__version__ = (_BUILD_INFO or {}).get("version", "0.1.0")  # 0.1.0+cu<CUDA major> or 0.1.0+cpu once built
# Before fp8ext._C is loaded (by .ops): a torch it cannot run on gets one ImportError that says what to install,
# instead of an undefined symbol or a missing CUDA library.
if _BUILD_INFO is not None:
    _compat.check_torch(_torch.__version__, _torch.version.cuda, fp8ext_version=__version__,
                        torch_floor=_BUILD_INFO.get("torch_floor"), cuda_major=_BUILD_INFO.get("cuda_major"),
                        built_cuda=(_BUILD_INFO.get("built_with") or {}).get("cuda"))

from .autotune import _configure_from_environment, autotune, autotune_entries
from .kernels import (_backends_from_environment, _has_cuda_kernels, backends, blockwise_kernel_names, force_kernel,
                      kernel_names, kernel_traits, selected_blockwise_kernel, selected_kernel, set_backends)
from .ops import linear, scaled_mm
from .quantize import f8f8bf16_rowwise, quantize_blockwise, quantize_rowwise, silu_mul_quantize_rowwise
from .grouped import scaled_grouped_mm, scaled_grouped_mm_masked
from .moe_routing import moe_combine, moe_dispatch
from . import compile, nn  # noqa: A004  (fp8ext.compile: the torch.compile switch)
from .nn import ConvertReport, Float8Linear, convert

__all__ = ["scaled_mm", "scaled_grouped_mm", "scaled_grouped_mm_masked", "linear", "kernel_names", "kernel_traits",
           "selected_kernel", "force_kernel", "set_backends", "backends", "autotune", "autotune_entries",
           "build_info", "__version__", "quantize_rowwise", "silu_mul_quantize_rowwise", "f8f8bf16_rowwise",
           "quantize_blockwise", "moe_dispatch", "moe_combine", "blockwise_kernel_names", "selected_blockwise_kernel",
           "nn", "Float8Linear",
           "convert", "ConvertReport", "TorchaoConfig", "compile"]

if _has_cuda_kernels():
    # Part of the autotuner's cache key: a choice measured under other versions is tuned again.
    _torch.ops.fp8ext._set_software_key(f"cuda{_torch.version.cuda}/torch{_torch.__version__}/fp8ext{__version__}")
_configure_from_environment()
_backends_from_environment()


def __getattr__(name: str):
    # TorchaoConfig needs torchao, an optional dependency: imported (and its handler registered) on first use.
    if name == "TorchaoConfig":
        try:
            from ._torchao import TorchaoConfig
        except ImportError as e:
            raise ImportError(f"fp8ext.TorchaoConfig needs torchao, which could not be imported ({e}); "
                              "pip install torchao, or use fp8ext.convert(model), which swaps the same layers and "
                              "keeps tied weights") from e
        return TorchaoConfig
    raise AttributeError(f"module 'fp8ext' has no attribute {name!r}")


def build_info() -> dict:
    """How this copy of fp8ext was built: {"cuda": bool, "arch": "sm_90a" | None, "kernels": [...], "cuda_major":
    13 | None, "torch_floor": "2.11", "built_with": {"torch": ..., "python": ...}, ...}."""
    unbuilt = {"cuda": None, "arch": None, "kernels": [], "subset": None}
    info = copy.deepcopy(_BUILD_INFO) if _BUILD_INFO is not None else unbuilt
    info["registered_kernels"] = kernel_names()
    info["version"] = __version__
    return info
