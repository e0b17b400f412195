"""fp8ext inside torch.compile: one opt-in, reversible switch.

    import fp8ext
    fp8ext.compile.enable()             # before torch.compile; fp8ext.compile.disable() undoes it
    with fp8ext.compile.enabled():      # or for a block
        model = torch.compile(model, mode="max-autotune")

With the switch on, graphs compiled from then on get two things:

- **fp8ext's kernels among Inductor's choices for ``aten._scaled_mm``** (``choices.py``). Inductor times its own
  candidates for each call (ATen's cuBLASLt, and under max-autotune its Triton templates) and fp8ext's (the cost
  model's best kernels for a static shape, fp8ext's routing for a dynamic one), and the fastest runs. Calls fp8ext
  does not compute (tensor-wise scales, e5m2 x e5m2, K or N not a multiple of 16, ...) get Inductor's candidates alone.
  Where fp8ext's kernel wins, the result equals eager ``fp8ext.scaled_mm`` with that kernel, bit for bit.
- **the activation quantize fused into its producer** (``decompositions.py``): ``fp8ext.quantize_rowwise`` and
  ``fp8ext.linear`` (and so ``Float8Linear``) are written in torch ops for Inductor, which fuses the per-row amax,
  scale and cast into the kernel before them; the bits equal the eager quantize's on the same input.

Eager code is untouched, and with the switch off (the default) compiled graphs are what they were. The switch sets
``torch._inductor.config.inductor_choices_class`` (keeping any factory set before it, which ``disable()`` sets back)
and adds entries to Inductor's decomposition table. The FX graph cache keys graphs compiled with the switch apart
from those without, and from those of another fp8ext version; a second process hits the cache and times nothing.
It needs torch's ``InductorChoices.get_template_configs`` (torch 2.9 and later: every torch fp8ext supports);
``enable()`` on a torch without it raises one ``RuntimeError`` saying so.

The switch belongs to the thread that turned it on: torch 2.14 keeps Inductor's settings per thread, so another
thread would compile with fp8ext's decompositions (a process-wide table) but without its choices or its cache key.
Compile in the thread that called ``enable()``; ``enable()`` or ``disable()`` in another thread while the switch is
on raises ``RuntimeError`` rather than half-apply.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

import torch

from . import choices, decompositions

__all__ = ["enable", "disable", "enabled", "is_enabled"]

_factory: Optional[choices.ChoicesFactory] = None  # what enable() set, so that disable() can tell it from another
_owner: Optional[int] = None  # the thread that turned the switch on (threading.get_ident())


def _inductor():
    try:
        import torch._inductor.config as config
        from torch._inductor import decomposition
        from torch._inductor.choices import InductorChoices
        from torch._inductor.virtualized import V
    except ImportError as e:
        raise RuntimeError(f"fp8ext.compile needs torch._inductor's choices handler, which this torch "
                           f"{torch.__version__} does not have ({e}); compiled graphs keep torch's _scaled_mm") from e
    if not hasattr(InductorChoices, "get_template_configs") or not hasattr(config, "inductor_choices_class"):
        raise RuntimeError(f"fp8ext.compile needs InductorChoices.get_template_configs and "
                           f"config.inductor_choices_class (torch 2.9 and later), which this torch "
                           f"{torch.__version__} does not have; compiled graphs keep torch's _scaled_mm")
    return config, decomposition, V


def _set_table(decomposition, add: bool) -> None:
    for op, fn in decompositions.table().items():
        if add:
            decomposition.decompositions[op] = fn
        elif decomposition.decompositions.get(op) is fn:
            del decomposition.decompositions[op]
    decomposition.fast_random_decomps.cache_clear()  # a cached copy of the table


def _set_handler(config, V) -> None:
    # The handler is made once per thread from the factory; this thread's is replaced now, other threads make theirs
    # from the factory when they first compile.
    factory = config.inductor_choices_class
    if factory is None:
        from torch._inductor.choices import InductorChoices
        factory = InductorChoices
    V.set_choices_handler(factory())


def is_enabled() -> bool:
    """Whether graphs compiled now get fp8ext's choices and decompositions."""
    import torch._inductor.config as config
    return _factory is not None and getattr(config, "inductor_choices_class", None) is _factory


def enable() -> None:
    """Turn the switch on for graphs compiled from now on (module docstring). Idempotent. RuntimeError on a torch
    without the hooks it needs."""
    global _factory, _owner
    config, decomposition, V = _inductor()
    if is_enabled():
        return
    _refuse_other_thread("enable")
    choices._extern_choice()  # what a cached graph that ran fp8ext's kernel calls, in a process that loads it
    _factory = choices.ChoicesFactory(config.inductor_choices_class)
    config.inductor_choices_class = _factory
    _set_table(decomposition, add=True)
    _set_handler(config, V)
    _owner = threading.get_ident()


def disable() -> None:
    """Undo enable(): graphs compiled from now on are Inductor's own again, and the choices factory set before
    enable() is set back. Graphs compiled while the switch was on keep what they were compiled with."""
    global _factory, _owner
    if _factory is None:
        return
    _refuse_other_thread("disable")
    config, decomposition, V = _inductor()
    if config.inductor_choices_class is _factory:
        config.inductor_choices_class = _factory.previous
    _set_table(decomposition, add=False)
    _set_handler(config, V)
    _factory = _owner = None


def _refuse_other_thread(what: str) -> None:
    if _factory is not None and _owner != threading.get_ident():
        raise RuntimeError(f"fp8ext.compile.{what}: the switch is on in another thread; turn it on and off, and "
                           f"compile, in one thread (torch keeps Inductor's settings per thread, the decomposition "
                           f"table is process-wide)")


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


def chosen(code: Any) -> list[str]:
    """What a compiled graph runs for its scaled GEMMs, from its generated code (``torch._inductor.utils.
    run_and_get_code``): per call in order, fp8ext's kernel name (``"fp8ext"`` for its routing), ``"aten"``
    (``extern_kernels._scaled_mm``) or the Triton template kernel's name."""
    import re
    text = "\n".join(code) if isinstance(code, (list, tuple)) else str(code)
    found = []
    pattern = (rf"extern_kernels\.{choices.EXTERN_NAME}\([^\n]*?kernel=['\"]([^'\"]*)['\"]|extern_kernels\._scaled_mm\(|"
               r"(triton_tem_\w+)\.run\(")
    for m in re.finditer(pattern, text):
        if m.group(1) is not None:
            found.append(m.group(1) or "fp8ext")
        elif m.group(2):
            found.append(m.group(2))
        else:
            found.append("aten")
    return found
