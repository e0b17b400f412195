"""fp8ext inside torch.compile: one opt-in, reversible switch that lets compiled graphs run fp8ext's kernels.

    import fp8ext
    fp8ext.compile.enable()             # before torch.compile; fp8ext.compile.disable() undoes it
    with fp8ext.compile.enabled():      # or for a block
        model = torch.compile(model, mode="max-autotune")

Inductor lowers ``aten._scaled_mm`` itself (cuBLASLt, or under max-autotune its Triton templates too) and never sees
fp8ext. With the switch on, Inductor's post-grad graph goes through one more pass
(``torch._inductor.config.post_grad_custom_post_pass``, a ``CustomGraphPass``) before lowering. It rewrites an
``aten._scaled_mm`` node into ``fp8ext.scaled_mm`` when

- fp8ext computes the call: row-wise or block-wise scales, and every check the op's own fake implementation makes
  passes (the C++ validation on the node's metadata); no ``scale_result``; a bf16, fp16 or fp32 output;
- and fp8ext's dispatch would run one of its kernels on it: for a static shape, ``selected_kernel`` (row-wise) or
  ``selected_blockwise_kernel`` names a kernel of fp8ext's rather than ``torch._scaled_mm``; a dynamic M is always
  rewritten, so that fp8ext's dispatch (with its torch backstop) chooses per call.

Every other node stays ATen and is lowered as Inductor would (tensor-wise scales, e5m2 x e5m2, K or N not a multiple
of 16, a call the cost model gives to torch). A rewritten node computes what eager ``fp8ext.scaled_mm`` computes on
the same tensors, bit for bit where the same kernel runs. Eager code is untouched, and with the switch off (the
default) nothing changes. The pass's ``uuid()`` covers fp8ext's version and this file, so Inductor's FX graph cache
keeps graphs compiled with and without the switch apart; a post-grad pass the user had set keeps running, first.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Iterator, Optional

import torch

from . import ops

__all__ = ["enable", "disable", "enabled", "is_enabled", "rewrite_scaled_mm"]

_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# aten._scaled_mm's arguments, in its schema's order.
_ATEN_ARGS = ("self", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")


def _custom_graph_pass_base():
    try:
        from torch._inductor.custom_graph_pass import CustomGraphPass
    except ImportError as e:  # a torch without custom post-grad passes
        raise RuntimeError(f"fp8ext.compile needs torch._inductor.custom_graph_pass.CustomGraphPass, which this torch "
                           f"{torch.__version__} does not have ({e}); compiled graphs keep torch's _scaled_mm") from e
    return CustomGraphPass


def _aten_arguments(node: torch.fx.Node) -> dict:
    """aten._scaled_mm's arguments of a node, by name, defaults filled in."""
    values = dict(zip(_ATEN_ARGS, node.args))
    values.update(node.kwargs)
    for name, default in (("bias", None), ("scale_result", None), ("out_dtype", None), ("use_fast_accum", False)):
        values.setdefault(name, default)
    return values


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


def _fp8ext_computes(a, b, scale_a, scale_b, bias, out_dtype) -> bool:
    """Whether fp8ext.scaled_mm takes these (fake) tensors: its fake implementation's checks, which are the eager
    op's."""
    if any(not isinstance(t, torch.Tensor) for t in (a, b, scale_a, scale_b)) or out_dtype not in _OUT_DTYPES:
        return False
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return False  # tensor-wise: fp8ext forwards it to torch._scaled_mm anyway
    try:
        ops._scaled_mm_fake(a, b, scale_a, scale_b, bias, out_dtype, False)
    except RuntimeError:
        return False
    return True


def _fp8ext_kernel_runs(a, b, scale_a, scale_b, out_dtype, use_fast_accum: bool) -> bool:
    """Whether fp8ext's dispatch runs a kernel of its own on this call rather than torch._scaled_mm: asked of the cost
    model for a static shape; always for a dynamic M (fp8ext's dispatch then decides per call)."""
    sizes = (a.shape[0], b.shape[1], a.shape[1])
    if not all(isinstance(s, int) for s in sizes):
        return True
    M, N, K = sizes
    if M == 0 or N == 0 or K == 0:
        return False
    from .testing import is_blockwise
    if is_blockwise(a, b, scale_a, scale_b):
        choice = ops.selected_blockwise_kernel(M, N, K, out_dtype)
    else:
        choice = ops.selected_kernel(M, N, K, out_dtype, use_fast_accum, a_dtype=a.dtype)
    return choice is not None and choice != "torch._scaled_mm"


def rewrite_scaled_mm(graph: torch.fx.Graph) -> int:
    """Rewrite the graph's aten._scaled_mm nodes that fp8ext computes and would run on its own kernels (module
    docstring) into fp8ext.scaled_mm, in place. Returns how many were rewritten."""
    rewritten = 0
    target = torch.ops.aten._scaled_mm.default
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not target:
            continue
        args = _aten_arguments(node)
        out = _val(node)
        if args["scale_result"] is not None or not isinstance(out, torch.Tensor):
            continue
        a, b, scale_a, scale_b, bias = (_val(args[n]) for n in ("self", "mat2", "scale_a", "scale_b", "bias"))
        if not _fp8ext_computes(a, b, scale_a, scale_b, bias, out.dtype):
            continue
        if not _fp8ext_kernel_runs(a, b, scale_a, scale_b, out.dtype, bool(args["use_fast_accum"])):
            continue
        fast = bool(args["use_fast_accum"])
        with graph.inserting_before(node):
            new = graph.call_function(torch.ops.fp8ext.scaled_mm.default, (args["self"], args["mat2"], args["scale_a"],
                                                                           args["scale_b"], args["bias"], out.dtype, fast))
        new.meta.update({k: v for k, v in node.meta.items() if k != "eager_input_vals"})
        if "eager_input_vals" in node.meta:
            # The call's inputs as eager code made them, whose strides Inductor then keeps for the op (b column-major
            # above all), put in fp8ext.scaled_mm's argument order: left in aten's, they match no schema of the op.
            eager_args, eager_kwargs = node.meta["eager_input_vals"]
            eager = {**dict(zip(_ATEN_ARGS, eager_args)), **eager_kwargs}
            new.meta["eager_input_vals"] = ((eager["self"], eager["mat2"], eager["scale_a"], eager["scale_b"],
                                             eager.get("bias"), out.dtype, fast), {})
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        rewritten += 1
    return rewritten


def _own_key() -> str:
    """What the pass's output depends on besides the graph: this file and fp8ext's version (its kernels, its cost
    model's fit)."""
    from . import __version__
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read() + __version__.encode()).hexdigest()


def _make_pass(chained: Optional[Any]):
    base = _custom_graph_pass_base()

    class ScaledMmToFp8ext(base):
        """The post-grad pass of fp8ext.compile (module docstring), after the pass that was set before it."""

        def __init__(self, chained):
            self.chained = chained

        def __call__(self, graph: torch.fx.Graph) -> None:
            if self.chained is not None:
                self.chained(graph)
            rewrite_scaled_mm(graph)

        def uuid(self) -> Optional[Any]:
            # None (no FX graph caching) where the chained pass has no key, as Inductor does for that pass alone.
            chained = None if self.chained is None else getattr(self.chained, "uuid", lambda: None)()
            if self.chained is not None and chained is None:
                return None
            return _own_key() + ("" if chained is None else f"+{chained!r}")

    return ScaledMmToFp8ext(chained)


_installed: Optional[Any] = None  # the pass enable() set, so that disable() can tell it from a later one


def is_enabled() -> bool:
    """Whether compiled graphs currently get the pass."""
    import torch._inductor.config as config
    return _installed is not None and config.post_grad_custom_post_pass is _installed


def enable() -> None:
    """Let graphs compiled from now on run fp8ext's kernels where they are predicted faster (module docstring).
    Idempotent. RuntimeError on a torch without custom post-grad passes."""
    global _installed
    import torch._inductor.config as config
    if is_enabled():
        return
    _installed = _make_pass(config.post_grad_custom_post_pass)
    config.post_grad_custom_post_pass = _installed


def disable() -> None:
    """Undo enable(): graphs compiled from now on keep torch's _scaled_mm; the post-grad pass set before enable()
    is set again. Graphs compiled while the switch was on keep what they were compiled with."""
    global _installed
    import torch._inductor.config as config
    if _installed is not None and config.post_grad_custom_post_pass is _installed:
        config.post_grad_custom_post_pass = _installed.chained
    _installed = None


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """The switch on inside a block (the state before it comes back after)."""
    was = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was:
            disable()
