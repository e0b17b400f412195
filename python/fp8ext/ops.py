"""The public ops and their fake (meta) implementations.

`torch.ops.fp8ext.scaled_mm` and `torch.ops.fp8ext.linear` are defined once, in C++ (csrc/bindings.cpp). This
module adds the fake implementations that torch.compile, torch.export and opcheck use to know the output's shape,
dtype and strides without running the kernel, linear's CPU backend, and the documented Python entries
`fp8ext.scaled_mm` and `fp8ext.linear`.

torch.library.opcheck: every op passes test_faketensor, test_autograd_registration and test_aot_dispatch_dynamic.
scaled_mm and linear fail opcheck's test_schema for a reason of torch's: its SchemaCheckMode compares each input
before and after the call with torch.allclose, which has no FP8 kernel. The quantize ops, whose inputs are float,
pass it too.
"""
from __future__ import annotations

import re
import weakref
from typing import Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from . import _C  # noqa: F401  (loading the library registers torch.ops.fp8ext)
from . import _eager_route

OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what scaled_mm writes
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_is_compiling = torch.compiler.is_compiling


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    use_fast_accum: bool = False,
) -> torch.Tensor:
    """``out = scale_a * scale_b * (a @ b) (+ bias)`` with FP8 inputs; a drop-in for ``torch._scaled_mm``, which
    also has ``scale_result`` (between bias and out_dtype): pass ``out_dtype`` and ``use_fast_accum`` by keyword.

    Args:
        a: ``[M, K]`` float8_e4m3fn (or e5m2), row-major; a padded leading dimension (a view ``x[:, :K]``) is fine.
        b: ``[K, N]`` float8_e4m3fn, column-major: ``w.t()`` of a row-major weight ``w`` of shape ``[N, K]``.
        scale_a: float32, ``(M, 1)`` or ``(M,)`` for one scale per row of ``a``, or one element (tensor-wise);
            or ``(M, ceil(K / 128))`` for one scale per 1 x 128 group of a row (block-wise, any strides; torch's
            layout is ``(1, M)``, as ``quantize_blockwise`` returns it).
        scale_b: float32, ``(1, N)`` or ``(N,)`` for one scale per column of ``b``, or one element; or
            ``(ceil(K / 128), ceil(N / 128))`` for one scale per 128 x 128 block of ``b`` (block-wise, with
            block-wise scale_a; a weight's ``[N / 128, K / 128]`` scales passed as ``s.t()``, as ``b = w.t()``: strides
            ``(1, >= ceil(K / 128))``, the only layout taken, so that a square grid cannot pass untransposed).
        bias: optional ``[N]`` tensor of dtype ``out_dtype``, added after scaling.
        out_dtype: ``torch.bfloat16`` (default), ``torch.float16`` or ``torch.float32``.
        use_fast_accum: as in ``torch._scaled_mm``; False promotes partial sums to fp32 every 128 (some large-M
            kernels: 256) of K. Block-wise calls always promote and scale once per 128 of K; there it changes
            nothing.

    Returns:
        A new contiguous ``[M, N]`` tensor of ``out_dtype`` on ``a``'s device.

    K and N must be multiples of 16. Bad arguments raise ``RuntimeError`` naming the argument before anything
    runs (docs/errors.md lists every message); traced calls (torch.compile, torch.export) raise the same ones.

    On CPU tensors, and on GPUs other than compute capability 9.0 (with a one-time warning there), a float32
    reference path computes the call in tiles: float32 buffers of at most 64 MiB beyond the output, reused by
    every tile, while K <= 8M (plus one tile-sized temporary for a bias).
    """
    if use_fast_accum.__class__ is torch.dtype or isinstance(out_dtype, torch.Tensor):
        # torch._scaled_mm's arguments by position put scale_result and out_dtype in out_dtype's and use_fast_accum's
        # places: say so, rather than leave it to a schema's type error (on CUDA, an internal op's).
        raise TypeError("fp8ext.scaled_mm: out_dtype, use_fast_accum: got a tensor or a dtype where torch._scaled_mm "
                        "takes scale_result and out_dtype; fp8ext.scaled_mm has no scale_result: pass out_dtype= and "
                        "use_fast_accum= by keyword")
    if bias is None and not _is_compiling():
        # The common eager calls go straight to torch's row-wise path or to fp8ext's kernel (_eager_route.py).
        out = _eager_route.call(a, b, scale_a, scale_b, out_dtype, use_fast_accum)
        if out is not None:
            return out
    return _SCALED_MM(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


def _size_hint(s) -> int:
    # A traced size may be symbolic (dynamic shapes): the checks read its example value without a guard, which
    # would specialise the dimension; the real op checks every call's own sizes when the graph runs. A size with
    # no example value (data-dependent) is given 16, which passes the multiple-of-16 and alignment checks.
    if isinstance(s, int):
        return s
    hint = s.node.hint
    return 16 if hint is None else int(hint)


# Per FakeTensorMode converter: (the storage id it would give next when last looked, {storage id: bytes past a
# 16-byte boundary} of the real storages it described that start misaligned).
_MISALIGNED_STORAGES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fake_storage_misalignment(t: FakeTensor) -> int:
    # FakeTensorMode remembers which real storage each fake storage it made stands for (the mapping torch's own
    # fake_utils.try_convert_fake_to_real reads); views made while tracing share their base's fake storage. The
    # misaligned real storages are few: they are found once per storage described, not per call.
    try:
        meta = t.fake_mode.fake_tensor_converter.meta_converter
        described = meta.describer
        seen, misaligned = _MISALIGNED_STORAGES.get(meta, (0, {}))
        if described.next_storage_id != seen:
            for real, sid in described.lookup_storage.items():
                try:
                    bytes_past = real.data_ptr() % 16 if sid >= seen else 0
                except RuntimeError:  # a storage without data
                    continue
                if bytes_past:
                    misaligned[sid] = bytes_past
            _MISALIGNED_STORAGES[meta] = (described.next_storage_id, misaligned)
        if misaligned:
            storage = t.untyped_storage()
            for sid, bytes_past in misaligned.items():
                if meta.storage_memo.get(sid) is storage:
                    return bytes_past
    except AttributeError:  # a torch whose FakeTensorMode keeps no such mapping: counted as aligned
        pass
    return 0


def _storage_misalignment(t: torch.Tensor) -> int:
    """How many bytes past a 16-byte boundary t's storage starts. 0 for the storages of torch's allocators
    (aligned to far more), not always for tensors over foreign memory (torch.frombuffer, torch.from_numpy). A
    fake tensor made from a real one (torch.compile's and torch.export's inputs, FakeTensorMode.from_tensor), or
    a view of one, answers for that real storage; other fake tensors have no address and count as aligned."""
    if isinstance(t, FakeTensor):
        return _fake_storage_misalignment(t)
    return t.untyped_storage().data_ptr() % 16


def _operand_meta(t: torch.Tensor, name: str, moved: dict) -> tuple[list[int], torch.dtype, torch.device]:
    """What the C++ checks read of a tensor, in the _check_*_meta ops' form: ([dim, sizes..., strides...,
    storage_offset], dtype, device).

    Those ops infer the address from the storage offset alone (storage_offset * element size), as if the
    storage started 16-byte aligned. Where it does not (_storage_misalignment), the offset given is 0 or 1, so
    that the check passes or fails exactly as the address decides, and ``moved[name]`` keeps (the address's
    bytes past 16, the real storage offset) for _run_check to put in the message."""
    offset = _size_hint(t.storage_offset())
    misaligned = _storage_misalignment(t)
    if misaligned:
        address = (misaligned + offset * t.element_size()) % 16
        moved[name] = (address, offset)
        offset = 0 if address == 0 else 1  # 1 element: 1, 2, 4 or 8 bytes, never a multiple of 16
    return ([t.dim(), *map(_size_hint, t.shape), *map(_size_hint, t.stride()), offset], t.dtype, t.device)


def _operands_meta(names: tuple[str, ...], tensors: tuple, moved: dict) -> list:
    """The _check_*_meta ops' arguments for these operands, None (an absent optional one) as three Nones."""
    args = []
    for name, t in zip(names, tensors):
        args += (None, None, None) if t is None else _operand_meta(t, name, moved)
    return args


_MISALIGNED_MESSAGE = re.compile(r"(fp8ext\.\w+: (\w+): the data pointer must be 16-byte aligned, got an address )"
                                 r"-?\d+( bytes past a 16-byte boundary \(storage_offset )-?\d+\)")


def _run_check(check, *args, moved: Optional[dict] = None) -> None:
    """Run one of the C++ _check_*_meta ops, which read no tensors, outside FakeTensorMode: inside it (where a fake
    implementation runs), a check that raises would first be logged by FakeTensorMode at ERROR level, with a
    traceback ("failed while attempting to run meta for ..."), before the error reaches the caller.

    An alignment error about an operand of ``moved`` (_operand_meta) gets that operand's real numbers back."""
    try:
        with unset_fake_temporarily():
            check(*args)
    except RuntimeError as e:
        m = _MISALIGNED_MESSAGE.match(str(e))
        if not moved or m is None or m.group(2) not in moved:
            raise
        address, offset = moved[m.group(2)]
        raise RuntimeError(f"{m.group(1)}{address}{m.group(3)}{offset})") from None


SCALED_MM_TENSORS = ("a", "b", "scale_a", "scale_b", "bias")
LINEAR_TENSORS = ("x", "weight", "weight_scale", "bias")


@torch.library.register_fake("fp8ext::scaled_mm")
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, use_fast_accum=False):
    # Every check that metadata decides, by the C++ validation itself (csrc/scaled_mm_checks.cpp), so that a
    # traced call raises exactly the eager message. Only alignment differs in what it reads: the storage
    # offset, and the real storage's address where the fake tensor was made from one (_operand_meta).
    _refuse_missing("fp8ext.scaled_mm", SCALED_MM_TENSORS[:4], (a, b, scale_a, scale_b))
    moved = {}
    meta = _operands_meta(SCALED_MM_TENSORS, (a, b, scale_a, scale_b, bias), moved)
    _run_check(torch.ops.fp8ext._check_scaled_mm_meta, *meta, out_dtype, moved=moved)
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    return a.new_empty((a.size(0), b.size(1)), dtype=out_dtype)


if hasattr(torch.ops.fp8ext, "_kernel_names"):  # a CUDA build: the op exists
    @torch.library.register_fake("fp8ext::_scaled_mm_with_kernel")
    def _scaled_mm_with_kernel_fake(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum, kernel):
        # fp8ext.compile's choices (python/fp8ext/compile): scaled_mm on one named kernel, checked alike.
        return _scaled_mm_fake(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)


def linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias: Optional[torch.Tensor] = None,
           use_fast_accum: bool = True) -> torch.Tensor:
    """A linear layer's forward on an FP8 weight, in one call: ``x`` quantized per token (``quantize_rowwise``),
    then ``scaled_mm`` against ``weight.t()`` with the bias fused, in ``x``'s dtype.

    Args:
        x: ``[M, K]`` or ``[B, S, K]``, bfloat16, float16 or float32, the last dimension contiguous.
        weight: ``[N, K]`` float8_e4m3fn as stored (not transposed), rows of K contiguous elements starting at
            multiples of 16; K and N multiples of 16.
        weight_scale: float32 ``(N,)`` or ``(N, 1)``, one scale per row of the weight.
        bias: optional ``[N]`` in ``x``'s dtype.
        use_fast_accum: as in ``scaled_mm``.

    Returns:
        A new contiguous tensor of ``x``'s shape with K replaced by N, in ``x``'s dtype.

    It is ``q, s = quantize_rowwise(x)`` then ``scaled_mm(q, weight.t(), s, weight_scale, bias, x.dtype,
    use_fast_accum)`` (with ``q`` and ``s`` viewed as 2-D), bit for bit: the same kernels, chosen alike. One call
    saves the host a dispatcher round trip and the views between the two; ``Float8Linear`` runs on it.
    Bad arguments raise ``RuntimeError`` starting ``fp8ext.linear: <argument>:`` (docs/model_path.md).
    """
    if not _is_compiling():
        out = _eager_route.linear_call(x, weight, weight_scale, bias, use_fast_accum)  # _eager_route.py
        if out is not None:
            return out
    return _LINEAR(x, weight, weight_scale, bias, use_fast_accum)


def _check_linear(x, weight, weight_scale, bias) -> None:
    """The C++ validation of fp8ext.linear (csrc/linear_checks.cpp) on the arguments' metadata."""
    _refuse_missing("fp8ext.linear", LINEAR_TENSORS[:3], (x, weight, weight_scale))
    moved = {}
    meta = _operands_meta(LINEAR_TENSORS, (x, weight, weight_scale, bias), moved)
    _run_check(torch.ops.fp8ext._check_linear_meta, *meta, moved=moved)


@torch.library.register_fake("fp8ext::linear")
def _linear_fake(x, weight, weight_scale, bias=None, use_fast_accum=True):
    _check_linear(x, weight, weight_scale, bias)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_cpu(x, weight, weight_scale, bias=None, use_fast_accum=True):
    # The CPU backend: the two ops in turn, each on its own CPU backend (the reference paths).
    _check_linear(x, weight, weight_scale, bias)
    K, N = weight.shape[1], weight.shape[0]
    q, s = torch.ops.fp8ext.quantize_rowwise.default(x, torch.float8_e4m3fn, None)
    out = torch.ops.fp8ext.scaled_mm.default(q.view(-1, K), weight.t(), s.view(-1, 1), weight_scale.reshape(N),
                                             bias, x.dtype, use_fast_accum)
    return out.view(*x.shape[:-1], N)


# ---- The autograd guard of the ops, and their eager entries ----
# The ops have no backward. Rather than return a result whose backward fails later (or silently has no grad_fn),
# refuse at the call while grad mode would record it; under no_grad() and inference_mode() this passes. It is a
# Python kernel at the Autograd key because the C++ side is on PyTorch's stable ABI, which can neither read
# requires_grad nor redispatch below autograd. Under inference_mode() the autograd keys are skipped and it does
# not run at all.
#
# A Python kernel inside the dispatcher costs the host two crossings between C++ and Python per call (the
# arguments boxed into Python objects and parsed back), which is more than all of torch._scaled_mm's host work
# in front of cuBLASLt. So the Python functions (fp8ext.scaled_mm, linear, the quantizes, the grouped ops and the
# layers built on them) do not go through it: their eager entry makes the guard's checks in Python and calls the
# op with the autograd keys excluded, as torch's own autograd kernels call the op below them. The op called
# directly (torch.ops.fp8ext.*) and a traced call (torch.compile, torch.export) still meet the guard.
_IMPL = torch.library.Library("fp8ext", "IMPL")
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd


def _refuse_missing(op: str, names: tuple[str, ...], args: tuple) -> None:
    """None where the schema takes a Tensor: the dispatcher passes it on as an undefined tensor, whose error in the
    C++ validation names no argument. Refused before it, by the autograd guard and the fake implementations."""
    for name, t in zip(names, args):
        if t is None:
            raise RuntimeError(f"{op}: {name}: expected a tensor, got None")


def _refuse_grad(op: str, names: tuple[str, ...], args: tuple) -> None:
    for name, t in zip(names, args):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(f"{op}: {name}: requires grad, but {op} is not differentiable (it has no backward). "
                               f"Call it under torch.no_grad() or torch.inference_mode(), or pass {name}.detach()")


_OOM_PREFIX = "CUDA out of memory"  # how torch's caching allocator words it (c10/cuda/CUDACachingAllocator.cpp)


def _typed_error(e: RuntimeError) -> RuntimeError:
    """The stable ABI carries no exception types: torch's out-of-memory error raised inside the op comes back as a
    plain RuntimeError with torch's message. This gives it its type back."""
    if type(e) is RuntimeError and str(e).startswith(_OOM_PREFIX):
        return torch.OutOfMemoryError(str(e))
    return e


def _register_autograd_guard(name: str, tensor_args: tuple[str, ...], required: int):
    """Registers the op's autograd guard and returns its eager entry: ``entry(*args)`` (every schema argument, in
    order) is the op's call with the guard's checks. ``tensor_args``: the op's Tensor arguments in order, the
    first ``required`` of them not optional."""
    overload = getattr(torch.ops.fp8ext, name).default
    public = f"fp8ext.{name}"
    required_args = tensor_args[:required]
    required_positions = range(required)

    # No _AutoDispatchBelowAutograd around the redispatch: it would cost more than it saves. The inputs do not
    # require grad here, so the aten ops the C++ backends call record nothing either way.
    # A None where a tensor is required would reach the C++ validation as an undefined tensor, whose error names
    # no argument and comes with a C++ stack trace on stderr; the loop that refuses it first costs some 60 ns.
    # The try costs nothing when nothing is raised.
    def guard(keyset, *args):
        for i in required_positions:
            if args[i] is None:
                _refuse_missing(public, required_args, args)
        if torch.is_grad_enabled():
            _refuse_grad(public, tensor_args, args)
        try:
            return overload.redispatch(keyset & _AFTER_AUTOGRAD, *args)
        except RuntimeError as e:
            raise _typed_error(e) from None

    # Traced, the op itself is recorded (the guard and the fake implementation run in the tracer). The tensor
    # arguments lead the schema; torch's functions are bound once (this runs on every eager call).
    tensors = len(tensor_args)
    is_compiling, inference, grad_enabled = torch.compiler.is_compiling, torch.is_inference_mode_enabled, \
        torch.is_grad_enabled

    def entry(*args):
        if is_compiling():
            return overload(*args)
        for i in required_positions:
            if args[i] is None:
                _refuse_missing(public, required_args, args)
        try:
            if inference():  # the autograd keys are skipped already
                return overload(*args)
            if grad_enabled():
                for t in args[:tensors]:
                    if getattr(t, "requires_grad", False):  # None, or what the op's checks will refuse
                        _refuse_grad(public, tensor_args, args)
            with _BELOW_AUTOGRAD():
                return overload(*args)
        except RuntimeError as e:
            raise _typed_error(e) from None

    _IMPL.impl(name, guard, "Autograd", with_keyset=True)
    return entry


_SCALED_MM = _register_autograd_guard("scaled_mm", SCALED_MM_TENSORS, 4)
_QUANTIZE_ROWWISE = _register_autograd_guard("quantize_rowwise", ("x",), 1)
_QUANTIZE_BLOCKWISE = _register_autograd_guard("quantize_blockwise", ("x",), 1)
_SILU_MUL_QUANTIZE = _register_autograd_guard("silu_mul_quantize_rowwise", ("x",), 1)
_LINEAR = _register_autograd_guard("linear", LINEAR_TENSORS, 3)
_IMPL.impl("linear", _linear_cpu, "CPU")
