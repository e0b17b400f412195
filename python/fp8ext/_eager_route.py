"""The eager shortcuts of `fp8ext.scaled_mm`: straight to torch's row-wise path, or straight to fp8ext's kernel.

Through the op, an eager call crosses from Python into the dispatcher's boxed entry, is checked and routed in C++,
and (for a call the dispatch hands to torch) crosses out again into torch's op. That costs the host more than
torch._scaled_mm's whole call in front of cuBLASLt (docs/design.md, "Host time"). So `fp8ext.scaled_mm` makes the
common calls itself, once it knows their route:

- which calls: `a` and `b` float8_e4m3fn, `a` row-major `[M, K]` with stride `(K, 1)`, `b` column-major `[K, N]`
  with stride `(1, K)`, both 16-byte aligned; float32 row-wise scales `(M, 1)` or `(M,)` and `(1, N)` or `(N,)`,
  contiguous and 16-byte aligned; no bias; bfloat16 output; K and N multiples of 16; plain tensors or parameters
  on one CUDA device of compute capability 9.0; none requiring grad while grad mode is on. Every other call goes
  to the op as before, and so do its errors.
- the route: per (M, N, K, accumulation, device), the C++ dispatch's own answer (`_selected_kernel`), asked once,
  outside and inside CUDA-graph capture; a shape whose answer differs between the two is left to the op, so no call
  has to ask whether it is being captured. Then:
  - torch's row-wise path (the backstop, M >= 2: one row's one scale is tensor-wise to torch): `torch._scaled_mm`
    with the arguments the op would pass it;
  - one of fp8ext's kernels that needs no workspace (every kernel but stream-K): the output allocated here, and
    the kernel launched on the call's pointers by `fp8ext._C._direct_launch` (csrc/ops/direct_launch.cpp), on
    torch's current stream, as the op launches it;
  - anything else (a stream-K kernel, the reference path): the op.
- what the dispatch reads can change: a forced kernel, the autotuner, the backends, a planted test fault. The
  public functions that change them (`force_kernel`, `autotune`, `set_backends`, `fp8ext.testing.plant_fault`)
  empty the table, and while a kernel is forced, the autotuner is on or a fault is planted the shortcuts are off.

Traced calls (torch.compile, torch.export, make_fx) never take them, nor calls under a dispatch mode (a FLOP
counter, FakeTensorMode): they see fp8ext's op.
"""
from __future__ import annotations

import threading

import torch

from . import _C

_E4M3, _BF16, _F32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))  # subclasses (fake, DTensor, ...) go to the op
_MAX_DIM = 2**31 - 1
_dispatch_modes = torch._C._len_torch_dispatch_stack
_TORCH_NAME = "torch._scaled_mm"
_launch = getattr(_C, "_direct_launch", None)  # a CUDA build's
_plan = getattr(_C, "_direct_plan", None)

# The routes: the op (False), torch (True), or the direct launch's plan of a kernel (an int >= 0).
OP, TORCH = False, True
_routes: dict = {}  # (a.shape, b.shape, use_fast_accum, device index) -> route
_holds = {"forced": 0, "autotune": 0, "fault": 0}  # why the shortcuts are off
_held = [0]  # the sum of _holds, read on every call
_lock = threading.Lock()


def hold(reason: str, on: bool) -> None:
    """The shortcuts off (on=True) or back on (False) for one reason; the table is emptied either way."""
    with _lock:
        _holds[reason] = max(0, _holds[reason] + (1 if on else -1)) if reason == "forced" else int(on)
        _held[0] = sum(_holds.values())
        _routes.clear()


def forget() -> None:
    """Empty the table: what the dispatch reads has changed (the backends)."""
    with _lock:
        _routes.clear()


def _ask(M: int, N: int, K: int, use_fast_accum: bool, device: int):
    """The route of a shape: the dispatch's answer, the same outside and inside capture."""
    if _plan is None:
        return OP
    with torch.cuda.device(device):
        if torch.cuda.get_device_capability() != (9, 0):
            return OP  # elsewhere the op runs the reference path, and warns
        # torch's row-wise path takes a call of one row as tensor-wise, so the op never offers it one (torch_can_run)
        torch_ok = M >= 2
        names = {torch.ops.fp8ext._selected_kernel(M, N, K, _BF16, use_fast_accum, _E4M3, capturing, torch_ok)
                 for capturing in (False, True)}
    if len(names) != 1:
        return OP
    (name,) = names
    if name == _TORCH_NAME:
        return TORCH
    try:
        plan = _plan(name)
    except ValueError:  # not a kernel of the build: the op's reference path, with its warning
        return OP
    return plan if plan >= 0 else OP


def _plain_call(a, b, scale_a, scale_b, out_dtype, M: int, K: int, K_b: int, N: int) -> bool:
    """Whether the call is one of those listed above; a is [M, K] and b [K_b, N]. About 35 reads of tensor
    metadata, a few microseconds of the host's time."""
    if (type(a) not in _PLAIN or type(b) not in _PLAIN or type(scale_a) not in _PLAIN or type(scale_b) not in _PLAIN
            or a.dtype is not _E4M3 or b.dtype is not _E4M3 or scale_a.dtype is not _F32 or scale_b.dtype is not _F32
            or (out_dtype is not None and out_dtype is not _BF16)):
        return False
    if (K_b != K or M < 1 or K == 0 or K % 16 or N % 16 or N == 0 or M > _MAX_DIM or N > _MAX_DIM or K > _MAX_DIM
            or a.stride() != (K, 1) or b.stride() != (1, K)):
        return False
    device = a.get_device()
    if device < 0 or b.get_device() != device or scale_a.get_device() != device or scale_b.get_device() != device:
        return False
    if not ((scale_a.shape == (M, 1) and scale_a.stride(0) == 1) or (scale_a.shape == (M,) and scale_a.stride(0) == 1)):
        return False
    if not ((scale_b.shape == (1, N) and scale_b.stride(1) == 1) or (scale_b.shape == (N,) and scale_b.stride(0) == 1)):
        return False
    if (a.data_ptr() | b.data_ptr() | scale_a.data_ptr() | scale_b.data_ptr()) % 16:
        return False
    # An input that requires grad while grad mode is on meets the op's refusal, with its message.
    return not (torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or scale_a.requires_grad
                                             or scale_b.requires_grad))


def call(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out_dtype,
         use_fast_accum: bool):
    """The call's result by a shortcut, or None when the op must make it (bias, or any call not listed above).

    A shape whose route is the op costs its calls one table lookup; the other calls are checked in full."""
    if _held[0] or _dispatch_modes():  # under a mode (make_fx, FakeTensorMode, a FLOP counter) the op is what it sees
        return None
    try:
        a_shape, b_shape = a.shape, b.shape
        key = (a_shape, b_shape, use_fast_accum, a.get_device())
        route = _routes.get(key)
        if route is OP:
            return None
        (M, K), (K_b, N) = a_shape, b_shape
    except (AttributeError, TypeError, ValueError):  # not 2-D tensors: the op's checks say what is wrong
        return None
    if not _plain_call(a, b, scale_a, scale_b, out_dtype, M, K, K_b, N):
        return None
    if route is None:
        route = _ask(M, N, K, use_fast_accum, key[3])
        with _lock:
            if not _held[0]:
                _routes[key] = route
        if route is OP:
            return None
    if route is TORCH:
        return torch._scaled_mm(a, b, scale_a if len(scale_a.shape) == 2 else scale_a.view(M, 1),
                                scale_b if len(scale_b.shape) == 2 else scale_b.view(1, N), None, None, _BF16,
                                use_fast_accum)
    out = a.new_empty((M, N), dtype=_BF16)
    _launch(route, a.data_ptr(), b.data_ptr(), scale_a.data_ptr(), scale_b.data_ptr(), out.data_ptr(), M, N, K,
            key[3], M > 1)
    return out
