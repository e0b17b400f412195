"""fp8ext's kernels as choices of Inductor's autotuner for `aten._scaled_mm`.

Inductor lowers `aten._scaled_mm` (torch/_inductor/kernel/mm.py, tuned_scaled_mm) by asking its choices handler,
`V.choices.get_template_configs(kernel_inputs, templates, "scaled_mm", kwarg_overrides)`, for the candidates: ATen
(cuBLASLt), and under max-autotune its Triton templates. It times them and keeps the fastest. The handler comes from
`torch._inductor.config.inductor_choices_class`, a factory; fp8ext.compile sets it to `ChoicesFactory`, whose
handler answers as the one before it did and, for "scaled_mm", adds fp8ext's candidates (`offered_kernels`):

- a static shape: the cost model's `TOP_KERNELS` best row-wise kernels with their scheduler options, or the block-wise
  dispatch's kernel for block-wise scales; each runs through `fp8ext._scaled_mm_with_kernel` on that kernel alone
  and is timed with the host held out (`_time_on_gpu`);
- a dynamic shape: one candidate, fp8ext's own routing per call (kernel name ""), with its torch backstop.

Nothing is offered where fp8ext does not compute the call: tensor-wise scales (fp8ext hands those to torch anyway),
an output dtype other than bf16, fp16 or fp32, a non-CUDA device, or anything fp8ext.scaled_mm's own checks refuse
on the node's metadata (e5m2 x e5m2, K or N not a multiple of 16, strides, alignment). The winner is what Inductor's
benchmark measures; its choice is cached like any other (the autotune cache, and the FX graph cache, whose key holds
the factory's `uuid()`: fp8ext's version and this package's source).
"""
from __future__ import annotations

import functools
import hashlib
import types
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from .. import kernels, ops
from ..testing import blockwise_scale_shapes

TOP_KERNELS = 3  # row-wise kernels offered per static shape: the cost model's best, in its order
OP_NAME = "scaled_mm"  # what tuned_scaled_mm calls the op when it asks for choices


@functools.lru_cache(maxsize=None)
def own_key() -> str:
    """What fp8ext's choices depend on besides the graph: this package's source and fp8ext's version (its kernels,
    its cost model's fit). Read once per process."""
    from .. import __version__
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _operand(sizes, strides, offset: int, dtype: torch.dtype, device: torch.device) -> tuple:
    """One operand in the _check_scaled_mm_meta form (ops._operand_meta): ([dim, sizes..., strides..., offset],
    dtype, device)."""
    return ([len(sizes), *sizes, *strides, offset], dtype, device)


def offered_kernels(a: tuple, b: tuple, scale_a: tuple, scale_b: tuple, bias: Optional[tuple],
                    out_dtype: torch.dtype, use_fast_accum: bool, static: bool) -> list[str]:
    """The kernel names fp8ext offers for one aten._scaled_mm call ("" = fp8ext's routing per call), [] where it
    offers none (module docstring). Each operand is (sizes, strides, storage offset, dtype, device) with the sizes'
    example values; ``static`` says whether the call's M, N and K are fixed. Needs a CUDA build to rank kernels."""
    if out_dtype not in ops.OUT_DTYPES or not kernels._has_cuda_kernels():
        return []
    if any(t[4].type != "cuda" for t in (a, b, scale_a, scale_b)):
        return []
    if all(torch.Size(t[0]).numel() == 1 for t in (scale_a, scale_b)):
        return []
    args = []
    for t in (a, b, scale_a, scale_b, bias):
        args += [None, None, None] if t is None else list(_operand(*t))
    try:
        ops._run_check(torch.ops.fp8ext._check_scaled_mm_meta, *args, out_dtype)
    except RuntimeError:
        return []
    if not static:
        return [""]
    (M, K), N = a[0], b[0][1]
    if 0 in (M, N, K):
        return []
    if blockwise_scale_shapes(M, N, K, tuple(scale_a[0]), tuple(scale_b[0])):
        name = kernels.selected_blockwise_kernel(M, N, K, out_dtype, torch_ok=False)
        return [] if name is None else [name]
    ranking = kernels.selected_kernel(M, N, K, out_dtype, use_fast_accum, a_dtype=a[3], explain=True)["ranking"]
    return [r["kernel"] for r in ranking[:TOP_KERNELS]]


EXTERN_NAME = "fp8ext_scaled_mm_with_kernel"  # the generated code calls extern_kernels.<this>


def _run(a, b, scale_a, scale_b, bias=None, *, out_dtype, use_fast_accum, kernel):
    """A candidate's call: what _time_on_gpu times and what the generated code calls (extern_kernels.EXTERN_NAME,
    registered by fp8ext.compile.enable() in every process that compiles or loads such a graph)."""
    return torch.ops.fp8ext._scaled_mm_with_kernel.default(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum,
                                                           kernel)


def _time_on_gpu(caller, *args, out):
    """A candidate's time in ms as Inductor's benchmark wants it, but with the host held out: the minimum of
    L2-flushed calls, each started behind a spin kernel long enough for the host to have issued it (fp8ext.bench's
    Timer). Inductor's own timing of an extern kernel records events around a call it issues right after a short
    flush; on a slow host a call whose issue takes longer than its kernel then measures the host, and a candidate
    that is faster on the GPU loses to a Triton launcher that is quicker to issue."""
    from ..bench.timing import Timer
    fn = caller.to_callable()
    result = fn(*args)
    if out is not None:
        out.copy_(result)  # Inductor may compare the candidates' outputs
    # A Timer per candidate: its 256 MiB flush buffer goes back to the caching allocator when the timing ends.
    return min(Timer(rep_ms=10, warmup_ms=2).samples(lambda: fn(*args))) / 1e3


_EXTERN = None


def _extern_choice():
    """The one ExternKernelChoice all of fp8ext's candidates bind (by kernel name); made once per process, by
    fp8ext.compile.enable()."""
    global _EXTERN
    if _EXTERN is None:
        from torch._inductor.select_algorithm import ExternKernelChoice
        # A plain extern kernel (one buffer): under max-autotune Inductor may settle the choice in its scheduler,
        # which swaps one buffer for the template's and cannot take a fallback kernel's two.
        extern = ExternKernelChoice(_run, name=EXTERN_NAME, has_out_variant=False,
                                    op_overload=torch.ops.fp8ext._scaled_mm_with_kernel.default)
        # Inductor's autotune cache keeps each candidate's time under its hash_key, which holds _run's source but
        # not the kernels behind it: with fp8ext's key in it, another fp8ext (other kernels under the same names,
        # another fit) times its candidates afresh instead of reading this one's times.
        inductor_key = extern.hash_key
        extern.hash_key = lambda: f"{inductor_key()}-fp8ext-{own_key()}"
        _EXTERN = extern
    return _EXTERN


def _ir_operand(node, sizevars) -> tuple[tuple, bool]:
    """An IR node's (sizes, strides, offset, dtype, device) with example values, and whether they are all fixed."""
    layout = node.get_layout()
    exprs = [*layout.size, *layout.stride, layout.offset]
    static = all(getattr(e, "is_number", isinstance(e, int)) for e in exprs)
    # torch 2.11 names it size_hint, later ones optimization_hint; 16 for a size with no example value (unbacked)
    example = getattr(sizevars, "optimization_hint", None) or sizevars.size_hint
    hint = [int(example(e, fallback=16)) for e in exprs]
    n = len(layout.size)
    return (hint[:n], hint[n:2 * n], hint[-1], layout.dtype, node.get_device()), static


def _call_options(templates, kwarg_overrides) -> Optional[bool]:
    """use_fast_accum of the call, from what tuned_scaled_mm tells its ATen choice or its Triton templates."""
    for template in templates:
        options = (kwarg_overrides or {}).get(getattr(template, "uid", None), {})
        for key in ("use_fast_accum", "USE_FAST_ACCUM"):
            if key in options:
                return bool(options[key])
    return None


def scaled_mm_choices(kernel_inputs, templates, kwarg_overrides) -> list:
    """fp8ext's ChoiceCallers for one aten._scaled_mm lowering (module docstring)."""
    from torch._inductor.virtualized import V
    nodes = list(kernel_inputs.nodes())
    fast = _call_options(templates, kwarg_overrides)
    if len(nodes) not in (4, 5) or fast is None:
        return []
    layout = kernel_inputs.output_layout()
    operands, static = [], True
    for node in nodes:
        operand, fixed = _ir_operand(node, V.graph.sizevars)
        operands.append(operand)
        static = static and fixed
    bias = operands[4] if len(nodes) == 5 else None
    names = offered_kernels(*operands[:4], bias, layout.dtype, fast, static)
    choice = _extern_choice()
    extra = {} if bias is not None else {"bias": None}
    callers = []
    for name in names:
        caller = choice.bind(nodes, layout, **extra, out_dtype=layout.dtype, use_fast_accum=fast, kernel=name)
        caller.benchmark = types.MethodType(_time_on_gpu, caller)
        callers.append(caller)
    return callers


class ChoicesFactory:
    """``torch._inductor.config.inductor_choices_class`` while fp8ext.compile is on: makes the handler that was
    configured before (``previous``, or Inductor's default), with fp8ext's candidates added to aten._scaled_mm's.
    Picklable, and its ``key`` is in what it pickles to, so that the FX graph cache tells graphs compiled with fp8ext's
    choices from those without, and from those of another fp8ext."""

    def __init__(self, previous: Optional[Callable[[], Any]]):
        self.previous = previous
        self.key = own_key()

    def __call__(self):
        from torch._inductor.choices import InductorChoices
        handler = self.previous() if self.previous is not None else InductorChoices()
        inner_configs = handler.get_template_configs
        inner_uuid = getattr(handler, "uuid", None)

        def get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides=None):
            found = inner_configs(kernel_inputs, templates, op_name, kwarg_overrides)
            if op_name == OP_NAME:
                found = list(found) + scaled_mm_choices(kernel_inputs, templates, kwarg_overrides)
            return found

        def uuid():
            return self.key + ("" if inner_uuid is None else f"+{inner_uuid()}")

        handler.get_template_configs = get_template_configs
        handler.uuid = uuid
        return handler
