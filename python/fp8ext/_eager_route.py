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
  - torch's row-wise path (the backstop, M >= 2: one row's one scale is tensor-wise to torch): the output
    allocated here and cuBLASLt called as torch._scaled_mm calls it (the same descriptors, workspace size and
    heuristic, so the same kernel and bits) by `fp8ext._C._torch_rowwise` (csrc/ops/cublaslt_rowwise.cpp), without
    torch's per-call descriptors and heuristic; where that cannot be taken (a, b or the output not 256-byte
    aligned, which cuBLASLt's defaults assume; another cuBLASLt than the one mirrored; a stream being captured),
    `torch._scaled_mm` with the arguments the op would pass it;
  - one of fp8ext's kernels that needs no workspace (every kernel but stream-K): the output allocated here, and
    the kernel launched on the call's pointers by `fp8ext._C._direct_launch` (csrc/ops/direct_launch.cpp), on
    torch's current stream, as the op launches it;
  - anything else (a stream-K kernel, the reference path): the op.
- what the dispatch reads can change: a forced kernel, the autotuner, the backends, a planted test fault. The
  public functions that change them (`force_kernel`, `autotune`, `set_backends`, `fp8ext.testing.plant_fault`)
  empty the table, and while a kernel is forced, the autotuner is on or a fault is planted the shortcuts are off.

`fp8ext.linear` (and so `Float8Linear`) has both routes too (`linear_call`): for a contiguous x and a contiguous e4m3
weight, the quantize and the GEMM are launched by `fp8ext._C._direct_linear` as the op launches them, the GEMM one of
fp8ext's kernels or, for a shape the dispatch hands to torch (bf16 x, no bias, the weight 256-byte aligned), torch's
cuBLASLt call as above; everything else goes to the op.

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
_linear_launch = getattr(_C, "_direct_linear", None)
_plan = getattr(_C, "_direct_plan", None)
_torch_rowwise = getattr(_C, "_torch_rowwise", None)
_torch_rowwise_ready = getattr(_C, "_torch_rowwise_ready", lambda: False)
# Whether torch's cuBLASLt is the one _torch_rowwise mirrors, with torch's default workspace: asked once, when the
# first call goes to torch (after the user's environment is set, as torch reads it then too).
_lt_ready = [True]
_LT_ALIGN = 256  # the alignment of a, b and out that cuBLASLt's heuristic assumes unless told less, as torch leaves it
_TORCH_PLAN = -2  # _direct_linear's plan for torch's row-wise path
_OUT_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}  # _direct_linear's x_dtype

# The routes: the op (False), torch (True), or the direct launch's plan of a kernel (an int >= 0).
OP, TORCH = False, True
_routes: dict = {}  # (a.shape, b.shape, use_fast_accum, device index) -> route
_linear_routes: dict = {}  # (x.shape, weight.shape, has bias, x.dtype, use_fast_accum, device index) -> route
_holds = {"forced": 0, "autotune": 0, "fault": 0}  # why the shortcuts are off
_held = [0]  # the sum of _holds, read on every call
_lock = threading.Lock()


def hold(reason: str, on: bool) -> None:
    """The shortcuts off (on=True) or back on (False) for one reason; the table is emptied either way."""
    with _lock:
        _holds[reason] = max(0, _holds[reason] + (1 if on else -1)) if reason == "forced" else int(on)
        _held[0] = sum(_holds.values())
        _routes.clear()
        _linear_routes.clear()


def forget() -> None:
    """Empty the table: what the dispatch reads has changed (the backends)."""
    with _lock:
        _routes.clear()
        _linear_routes.clear()


def _remember(table: dict, key, route):
    """Stores a route unless the shortcuts were held off meanwhile; returns it."""
    with _lock:
        if not _held[0]:
            table[key] = route
    return route


def _ask(M: int, N: int, K: int, use_fast_accum: bool, device: int, out_dtype=_BF16, bias: bool = False):
    """The route of a shape: the dispatch's answer, the same outside and inside capture."""
    if _plan is None:
        return OP
    with torch.cuda.device(device):
        if torch.cuda.get_device_capability() != (9, 0):
            return OP  # elsewhere the op runs the reference path, and warns
        # torch's row-wise path takes a call of one row as tensor-wise, and no bias, so the op never offers it
        # those (torch_can_run)
        torch_ok = M >= 2 and not bias
        names = {torch.ops.fp8ext._selected_kernel(M, N, K, out_dtype, use_fast_accum, _E4M3, capturing, torch_ok)
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


def _plain_call(a, b, scale_a, scale_b, out_dtype, M: int, K: int, K_b: int, N: int):
    """The four data pointers when the call is one of those listed above (a is [M, K] and b [K_b, N]), else None.
    About 30 reads of tensor metadata, two microseconds of the host's time."""
    if (type(a) not in _PLAIN or type(b) not in _PLAIN or type(scale_a) not in _PLAIN or type(scale_b) not in _PLAIN
            or a.dtype is not _E4M3 or b.dtype is not _E4M3 or scale_a.dtype is not _F32 or scale_b.dtype is not _F32
            or (out_dtype is not None and out_dtype is not _BF16)):
        return None
    if (K_b != K or M < 1 or K == 0 or K % 16 or N % 16 or N == 0 or M > _MAX_DIM or N > _MAX_DIM or K > _MAX_DIM
            or a.stride() != (K, 1) or b.stride() != (1, K)):
        return None
    device = a.get_device()
    if device < 0 or b.get_device() != device or scale_a.get_device() != device or scale_b.get_device() != device:
        return None
    # (M, 1) or (M,), and (1, N) or (N,): contiguous is a stride of 1 along the M or N values
    sa_shape, sb_shape = scale_a.shape, scale_b.shape
    if ((sa_shape != (M, 1) and sa_shape != (M,)) or (sb_shape != (1, N) and sb_shape != (N,))
            or not scale_a.is_contiguous() or not scale_b.is_contiguous()):
        return None
    pointers = a.data_ptr(), b.data_ptr(), scale_a.data_ptr(), scale_b.data_ptr()
    if (pointers[0] | pointers[1] | pointers[2] | pointers[3]) % 16:
        return None
    # An input that requires grad while grad mode is on meets the op's refusal, with its message.
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or scale_a.requires_grad
                                    or scale_b.requires_grad):
        return None
    return pointers


def _output(a: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """A new [M, N] bf16 output on a's device (empty_strided: the quickest of torch's allocating calls)."""
    return torch.empty_strided((M, N), (N, 1), dtype=_BF16, device=a.device)


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
    pointers = _plain_call(a, b, scale_a, scale_b, out_dtype, M, K, K_b, N)
    if pointers is None:
        return None
    if route is None:
        route = _remember(_routes, key, _ask(M, N, K, use_fast_accum, key[3]))
        if route is OP:
            return None
        if route is TORCH and _torch_rowwise is not None and _lt_ready[0]:
            _lt_ready[0] = _torch_rowwise_ready()
    if route is TORCH:
        if _torch_rowwise is not None and _lt_ready[0] and not (pointers[0] | pointers[1]) % _LT_ALIGN:
            out = _output(a, M, N)
            out_ptr = out.data_ptr()
            if not out_ptr % _LT_ALIGN and _torch_rowwise(*pointers, out_ptr, M, N, K, use_fast_accum, key[3]):
                return out
        return torch._scaled_mm(a, b, scale_a if len(scale_a.shape) == 2 else scale_a.view(M, 1),
                                scale_b if len(scale_b.shape) == 2 else scale_b.view(1, N), None, None, _BF16,
                                use_fast_accum)
    out = _output(a, M, N)
    _launch(route, *pointers, out.data_ptr(), M, N, K, key[3], M > 1)
    return out


def _plain_linear(x, weight, weight_scale, bias, K: int, K_w: int, N: int) -> bool:
    """Whether an fp8ext.linear call is one the direct launch takes: x 2-D or 3-D and contiguous, the weight
    [N, K] e4m3 contiguous, its scales float32 (N,) or (N, 1) contiguous, the bias None or x's dtype (N,)
    contiguous, the three 16-byte aligned; plain tensors on one CUDA device; none requiring grad in grad mode."""
    if (type(x) not in _PLAIN or type(weight) not in _PLAIN or type(weight_scale) not in _PLAIN
            or (bias is not None and type(bias) not in _PLAIN)
            or weight.dtype is not _E4M3 or weight_scale.dtype is not _F32
            or (bias is not None and bias.dtype is not x.dtype)):
        return False
    if (K_w != K or K <= 0 or K % 16 or N <= 0 or N % 16 or N > _MAX_DIM or K > _MAX_DIM or x.dim() not in (2, 3)
            or x.numel() == 0 or x.numel() // K > _MAX_DIM or not x.is_contiguous() or weight.stride() != (K, 1)
            or weight_scale.stride(0) != 1 or weight_scale.shape not in ((N,), (N, 1))
            or (bias is not None and (bias.shape != (N,) or bias.stride(0) != 1))):
        return False
    device = x.get_device()
    if (device < 0 or weight.get_device() != device or weight_scale.get_device() != device
            or (bias is not None and bias.get_device() != device)):
        return False
    if (weight.data_ptr() | weight_scale.data_ptr() | (0 if bias is None else bias.data_ptr())) % 16:
        return False
    return not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad or weight_scale.requires_grad
                                             or (bias is not None and bias.requires_grad)))


def linear_call(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias, use_fast_accum: bool):
    """fp8ext.linear's result by the direct launch (its quantize and GEMM, as the op runs them on a kernel), or None
    when the op must make the call: one the dispatch hands to torch or a stream-K kernel, and any not listed in
    _plain_linear. q and its scales share one temporary buffer."""
    if _held[0] or _linear_launch is None or _dispatch_modes():
        return None
    try:
        x_shape, w_shape = x.shape, weight.shape
        key = (x_shape, w_shape, bias is None, x.dtype, use_fast_accum, x.get_device())
        route = _linear_routes.get(key)
        if route is OP:
            return None
        code = _OUT_CODES.get(x.dtype)
        K, (N, K_w) = x_shape[-1], w_shape
    except (AttributeError, TypeError, ValueError, IndexError):  # the op's checks say what is wrong
        return None
    if code is None or not _plain_linear(x, weight, weight_scale, bias, K, K_w, N):
        return None
    M = x.numel() // K
    if route is None:
        route = _ask(M, N, K, use_fast_accum, key[5], x.dtype, bias is not None)
        if route is TORCH:  # the op quantizes, then hands the GEMM to torch: here as torch calls cuBLASLt
            route = (_TORCH_PLAN if _torch_rowwise is not None and code == 0 and bias is None
                     and _torch_rowwise_ready() else OP)
        route = _remember(_linear_routes, key, route)
        if route is OP:
            return None
    if route == _TORCH_PLAN and weight.data_ptr() % _LT_ALIGN:
        return None
    device = x.device
    buffer = torch.empty_strided(((M * K + 15) // 16 * 16 + 4 * M,), (1,), dtype=torch.uint8, device=device)
    out = torch.empty_strided((*x_shape[:-1], N), (N, 1) if len(x_shape) == 2 else (x_shape[1] * N, N, 1),
                              dtype=x.dtype, device=device)
    if not _linear_launch(route, x.data_ptr(), code, M, K, buffer.data_ptr(), weight.data_ptr(),
                          weight_scale.data_ptr(), 0 if bias is None else bias.data_ptr(), out.data_ptr(), N, key[5],
                          use_fast_accum):
        return None  # torch's path under capture: the op's
    return out
