"""Helpers to make FP8 test data and to judge results against a float64 reference.

The bound (docs/accuracy.md) is per element:

    |out - ref| <= u(out_dtype) * |ref| + eps * P + tiny(out_dtype)
    P[i, j]     =  |scale_a[i] * scale_b[j]| * sum_k |a[i, k] * b[k, j]|

with u the unit roundoff of the output type (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) doubled for margin, eps = 2^-10
for precise accumulation and ceil(K / 32) * 2^-13 for fast accumulation (Hopper's fp8 MMA keeps about 14
mantissa bits between promotions and rounds once per 32-deep k-step), and tiny the spacing of the output
type's subnormals. NaN never passes.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
_ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-23}
_TINY = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24, torch.float32: 2.0**-149}


def random_fp8(rows: int, cols: int, dtype=torch.float8_e4m3fn, device="cpu", generator=None, std: float = 2.0):
    """A [rows, cols] fp8 tensor of rounded N(0, std^2) values (never all zeros, no NaN)."""
    x = torch.randn(rows, cols, device=device, generator=generator) * std
    return x.clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)


def random_scales(n: int, device="cpu", generator=None, shape=None) -> torch.Tensor:
    """Positive float32 scales in [2^-9, 2^-5) (typical of activations/weights quantised to fp8)."""
    s = torch.exp2(torch.rand(n, device=device, generator=generator) * 4 - 9)
    return s.reshape(shape) if shape is not None else s


def random_operands(M: int, N: int, K: int, device="cpu", a_dtype=torch.float8_e4m3fn,
                    b_dtype=torch.float8_e4m3fn, generator=None):
    """A fresh row-wise problem (a [M, K], b = w.t() [K, N], scale_a (M, 1), scale_b (1, N)), as
    fp8ext.scaled_mm takes it."""
    a = random_fp8(M, K, a_dtype, device=device, generator=generator)
    b = random_fp8(N, K, b_dtype, device=device, generator=generator).t()
    sa = random_scales(M, device=device, generator=generator, shape=(M, 1))
    sb = random_scales(N, device=device, generator=generator, shape=(1, N))
    return a, b, sa, sb


def quantize_rowwise(x: torch.Tensor, dtype=torch.float8_e4m3fn):
    """x [..., C] float -> (fp8 [..., C], float32 scales [..., 1]) with x ~= q * scale, the usual row-wise recipe
    over the last dimension, with fp8ext.quantize_rowwise's bits."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    # True float32 divisions, as fp8ext.quantize_rowwise does: a division by a Python float (or of one) is computed
    # on CUDA through a reciprocal, which is not correctly rounded and moves a scale or an FP8 value now and then.
    fp8_max = torch.full_like(amax, FP8_MAX[dtype])
    scale = amax / fp8_max
    inv = fp8_max / amax
    q = (x.float() * inv).clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)
    return q, scale


def random_blockwise_operands(M: int, N: int, K: int, device="cpu", generator=None):
    """A fresh block-wise problem: a [M, K], b = w.t() [K, N], scale_a [M, ceil(K/128)] with strides (1, M) and
    scale_b [ceil(K/128), ceil(N/128)] with strides (1, ceil(K/128)) (torch's layouts), as fp8ext.scaled_mm and
    torch._scaled_mm take them."""
    G, H = -(-K // 128), -(-N // 128)
    a = random_fp8(M, K, device=device, generator=generator)
    b = random_fp8(N, K, device=device, generator=generator).t()
    sa = random_scales(M * G, device=device, generator=generator, shape=(G, M)).t()
    sb = random_scales(H * G, device=device, generator=generator, shape=(H, G)).t()
    return a, b, sa, sb


def is_blockwise(a, b, scale_a, scale_b) -> bool:
    """Whether fp8ext.scaled_mm reads these scales block-wise (blockwise_scale_shapes)."""
    (M, K), N = a.shape, b.shape[1]
    return blockwise_scale_shapes(M, N, K, tuple(scale_a.shape), tuple(scale_b.shape))


def blockwise_scale_shapes(M: int, N: int, K: int, scale_a_shape: tuple, scale_b_shape: tuple) -> bool:
    """Whether scales of these shapes are read block-wise (csrc/scaled_mm_checks.cpp): scale_b of shape
    (ceil(K/128), ceil(N/128)) with more than one value, or scale_a of shape (M, ceil(K/128)) with K > 128."""
    G, H = -(-K // 128), -(-N // 128)
    b_block = scale_b_shape == (G, H) and G * H > 1 and scale_b_shape != (1, N)
    a_block = scale_a_shape == (M, G) and G >= 2
    return a_block or b_block


def _block_scaled(a, b, scale_a, scale_b):
    """a and b in float64 with each element times its block's scale (block-wise scales)."""
    K, N = b.shape
    sa = scale_a.double().repeat_interleave(128, dim=1)[:, :K]
    sb = scale_b.double().repeat_interleave(128, dim=0)[:K].repeat_interleave(128, dim=1)[:, :N]
    return a.double() * sa, b.double() * sb


def _scale_view(s: torch.Tensor, n: int, rows: bool) -> torch.Tensor:
    if s.numel() == 1:
        return s.reshape(())
    return s.reshape(n, 1) if rows else s.reshape(1, n)


_OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def blockwise_kernel_out_dtype(name: str) -> torch.dtype:
    """The out dtype a block-scaled kernel writes: the last part of its name (``bw_..._bf16``)."""
    return _OUT_DTYPES[name.rsplit("_", 1)[1]]


def kernel_dtypes(name: str):
    """(out dtype, fast accumulation?, activation dtype) that a kernel computes, from its manifest traits;
    scheduler options after "@" do not change them. A decode kernel that reads either activation type reports
    e4m3."""
    from .kernels import kernel_traits

    t = kernel_traits(name)
    out = _OUT_DTYPES[t["out"]]
    return out, t["accum"] == "fast", torch.float8_e5m2 if t["in_a"] == "e5m2" else torch.float8_e4m3fn


def kernel_max_m(name: str) -> Optional[int]:
    """The largest M that a kernel computes (the decode kernels' manifest trait max_m); None for any M."""
    from .kernels import kernel_traits

    return kernel_traits(name)["max_m"] or None


def reference(a, b, scale_a, scale_b, bias=None) -> torch.Tensor:
    """float64 scale_a * scale_b * (a @ b) (+ bias), on the inputs' device; block-wise scales multiply their
    blocks."""
    if is_blockwise(a, b, scale_a, scale_b):
        a_s, b_s = _block_scaled(a, b, scale_a, scale_b)
        out = a_s @ b_s
    else:
        acc = a.double() @ b.double()
        M, N = acc.shape
        out = acc * _scale_view(scale_a.double(), M, True) * _scale_view(scale_b.double(), N, False)
    if bias is not None:
        out = out + bias.double()
    return out


def error_bound(a, b, scale_a, scale_b, out_dtype: torch.dtype, use_fast_accum: bool,
                ref: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The per-element bound of the module docstring, float64 [M, N]."""
    if ref is None:
        ref = reference(a, b, scale_a, scale_b)
    M, N = ref.shape
    K = a.shape[1]
    if is_blockwise(a, b, scale_a, scale_b):
        # The block-scaled mainloop promotes into fp32 (and scales) after every 128 of K: precise accumulation,
        # whatever use_fast_accum says.
        a_s, b_s = _block_scaled(a, b, scale_a, scale_b)
        p = a_s.abs() @ b_s.abs()
        return _ULP[out_dtype] * ref.abs() + 2.0**-10 * p + _TINY[out_dtype]
    p = (a.double().abs() @ b.double().abs()) * (_scale_view(scale_a.double(), M, True)
                                                  * _scale_view(scale_b.double(), N, False)).abs()
    # Fast: one reduced-precision rounding per 32-deep MMA k-step, and a partly filled step (K = 48: two steps)
    # rounds like a full one (seen on the H200 with K = 48 and fp32 output: more than one step's error).
    eps = max(math.ceil(K / 32), 1) * 2.0**-13 if use_fast_accum else 2.0**-10
    return _ULP[out_dtype] * ref.abs() + eps * p + _TINY[out_dtype]


def check_against_reference(out, a, b, scale_a, scale_b, bias=None, *, use_fast_accum: bool, what: str = ""):
    """Raise AssertionError with the worst element if `out` breaks the bound (or holds NaN where ref has none)."""
    ref = reference(a, b, scale_a, scale_b, bias)
    bound = error_bound(a, b, scale_a, scale_b, out.dtype, use_fast_accum, ref=ref)
    err = (out.double() - ref).abs()
    bad = ~(err <= bound)  # NaN in out compares False -> bad
    if bool(bad.any()):
        idx = int(torch.argmax((err - bound).nan_to_num(math.inf)).item())
        i, j = divmod(idx, ref.shape[1])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements outside the bound; worst at [{i}, {j}]: "
            f"out={out[i, j].item()!r} ref={ref[i, j].item()!r} err={err[i, j].item():.3g} "
            f"bound={bound[i, j].item():.3g}")
    return err.max().item() if err.numel() else 0.0


def torch_cpu_takes_rowwise_scales() -> bool:
    """Whether this torch's CPU torch._scaled_mm takes row-wise scales. Some releases (2.11) take per-tensor
    scales only on CPU, so the torch._scaled_mm row-wise peer of the model suite runs on CPU only where it does."""
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


# The opcheck tests fp8ext's ops pass. torch's test_schema compares the inputs before and after the call with
# torch.allclose, which has no FP8 kernel, so the ops that take FP8 tensors cannot pass it (the quantize ops do).
OPCHECK_UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def assert_opcheck(op, args, kwargs: Optional[dict] = None, test_utils: tuple = OPCHECK_UTILS) -> None:
    """torch.library.opcheck of ``op`` on these arguments, every test in ``test_utils`` passing."""
    result = torch.library.opcheck(op, tuple(args), kwargs or {}, test_utils=test_utils)
    assert all(v == "SUCCESS" for v in result.values()), result


def plant_fault(fault: str) -> None:
    """Plant a fault for the robustness tests (the internal op ``_testing_fault``: ``"tensorwise=..."``,
    ``"blockwise=..."``, ``"cc=<major><minor>"``, or ``""`` to remove it). The eager shortcuts (to torch's row-wise
    path, to a kernel) cannot see a planted fault, so they are off while one is planted."""
    from . import _eager_route
    torch.ops.fp8ext._testing_fault(fault)
    _eager_route.hold("fault", bool(fault))
