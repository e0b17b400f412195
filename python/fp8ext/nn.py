"""From a bf16 model to FP8: `Float8Linear` and `convert`.

    import fp8ext
    report = fp8ext.convert(model)          # every nn.Linear that fits becomes a Float8Linear, in place
    with torch.inference_mode():
        out = model(inputs)

Inference only: the weight is quantized once (per output row, e4m3), each forward quantizes the activation per
token and runs fp8ext.scaled_mm with the bias fused. docs/model_path.md describes the numerics and the limits.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch
from torch import nn

from ._cast import keeping_dtypes
from .moe import Float8Experts, experts_problem, is_stacked_experts
from . import _eager_route
from .ops import _LINEAR
from .quantize import quantize_rowwise

E4M3 = torch.float8_e4m3fn
_is_compiling = torch.compiler.is_compiling
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _fp8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias: Optional[torch.Tensor],
                use_fast_accum: bool) -> torch.Tensor:
    """Float8Linear's forward on (a view of) its parameters: fp8ext.linear, x quantized per token, bias fused."""
    if bias is not None and bias.dtype != x.dtype:
        bias = bias.to(x.dtype)  # the op's bias has the output's dtype
    # The op takes 2-D and 3-D inputs whose last dimension is contiguous; other ranks are flattened first (reshape
    # copies where it must), and a strided last dimension (x.flatten(2).transpose(1, 2), say) is copied, as
    # nn.Linear takes any strides. Its eager entry is called directly (not the Python wrapper): an eager decode step
    # is bound by the host's time per layer.
    if x.dim() in (2, 3):
        if x.stride(-1) != 1 and x.shape[-1] > 1:
            x = x.contiguous()
        if not _is_compiling():
            out = _eager_route.linear_call(x, weight, weight_scale, bias, use_fast_accum)  # the direct launch
            if out is not None:
                return out
        return _LINEAR(x, weight, weight_scale, bias, use_fast_accum)
    out = _LINEAR(x.reshape(-1, weight.shape[1]), weight, weight_scale, bias, use_fast_accum)
    return out.view(*x.shape[:-1], weight.shape[0])


def _shape_problem(in_features: int, out_features: int) -> Optional[str]:
    """Why fp8ext.scaled_mm cannot take this layer's shape, or None."""
    if in_features <= 0 or in_features % 16:
        return f"in_features = {in_features} is not a positive multiple of 16"
    if out_features <= 0 or out_features % 16:
        return f"out_features = {out_features} is not a positive multiple of 16"
    return None


class Float8Linear(nn.Module):
    """``y = x @ W.t() + b`` with W stored as float8_e4m3fn ``[N, K]`` and one float32 scale per output row.

    The forward quantizes ``x`` per token (quantize_rowwise over the last dimension, any leading dimensions) and
    calls fp8ext.scaled_mm with the bias fused; the output has ``x``'s dtype (bfloat16, float16 or float32) and
    shape ``x.shape[:-1] + (N,)``. ``weight``, ``weight_scale`` (float32 ``[N]``) and ``bias`` (in the dtype of
    the layer it came from) are parameters without grad, so ``state_dict()`` / ``load_state_dict()`` and
    ``.to(device)`` carry them. Inference only: call it under ``torch.no_grad()`` or ``torch.inference_mode()``.

    A dtype cast of the module (``.to(torch.bfloat16)``, ``.half()``, ``.float()``, ...) casts the bias only: the
    FP8 weight and its float32 scale keep their dtypes (and follow device moves). ``load_state_dict()`` takes the
    checkpoint's bias dtype, whatever ``bias_dtype`` the layer was built with, so that a round trip is bit for
    bit; it refuses a weight that is not float8_e4m3fn or a weight_scale that is not float32, which ``copy_``
    would otherwise convert (a bfloat16 weight to FP8 without its scale).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, use_fast_accum: bool = True,
                 bias_dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        problem = _shape_problem(in_features, out_features)
        if problem is not None:
            raise ValueError(f"fp8ext.Float8Linear: {problem}; fp8ext.scaled_mm needs K (in_features) and N "
                             "(out_features) to be multiples of 16")
        self.in_features, self.out_features, self.use_fast_accum = in_features, out_features, use_fast_accum
        self.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=E4M3, device=device),
                                   requires_grad=False)
        self.weight_scale = nn.Parameter(torch.ones(out_features, dtype=torch.float32, device=device),
                                         requires_grad=False)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=bias_dtype, device=device), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, use_fast_accum: bool = True) -> "Float8Linear":
        """A Float8Linear computing ``linear`` on its device: its weight quantized once with quantize_rowwise (per
        output row), its bias kept in its dtype. ``linear`` is left unchanged."""
        return cls._from_weight(linear.weight, linear.bias, use_fast_accum)

    @classmethod
    def _from_weight(cls, weight: torch.Tensor, bias: Optional[torch.Tensor], use_fast_accum: bool) -> "Float8Linear":
        if weight.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"fp8ext.Float8Linear.from_linear: weight: expected dtype torch.bfloat16, "
                             f"torch.float16 or torch.float32, got {weight.dtype}")
        out_features, in_features = weight.shape
        module = cls(in_features, out_features, bias=bias is not None, use_fast_accum=use_fast_accum,
                     bias_dtype=bias.dtype if bias is not None else torch.bfloat16, device=weight.device)
        with torch.no_grad():
            wq, ws = quantize_rowwise(weight.detach().contiguous())  # any layout, as nn.Linear's weight may be
            module.weight.copy_(wq)
            module.weight_scale.copy_(ws.view(-1))
            if bias is not None:
                module.bias.copy_(bias.detach())
        return module

    def _apply(self, fn, recurse=True):
        # A dtype cast leaves the FP8 weight and its scale as they are (fp8ext._cast); the bias takes it.
        return super()._apply(keeping_dtypes(fn, (self.weight, self.weight_scale)), recurse)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name, dtype, hint in (("weight", E4M3, "; load the unconverted model's state dict before "
                                                   "fp8ext.convert(), not after"), ("weight_scale", torch.float32, "")):
            t = state_dict.get(prefix + name)
            if isinstance(t, torch.Tensor) and t.dtype != dtype:
                raise RuntimeError(f"fp8ext.Float8Linear: {prefix}{name}: expected dtype {dtype} in the state dict, "
                                   f"got {t.dtype}{hint}")
        bias = state_dict.get(prefix + "bias")
        if (self.bias is not None and isinstance(bias, torch.Tensor) and bias.dtype in _FLOAT_DTYPES
                and bias.dtype != self.bias.dtype):
            # The checkpoint's bias dtype (from_linear keeps its layer's), not a rounding to this one's; .data keeps
            # the Parameter itself, and any tie to it.
            self.bias.data = torch.empty_like(self.bias, dtype=bias.dtype)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"fp8ext.Float8Linear: x: expected dtype torch.bfloat16, torch.float16 or "
                             f"torch.float32, got {x.dtype}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"fp8ext.Float8Linear: x: expected the last dimension to be in_features = "
                             f"{self.in_features}, got shape {tuple(x.shape)}")
        # The parameters straight from their dict: nn.Module.__getattr__ costs about a microsecond a name, a third
        # of this forward's own host time. A name the dict lacks (a parametrization holds it) is read as usual.
        params = self._parameters
        weight, scale = params.get("weight"), params.get("weight_scale")
        if weight is None or scale is None:
            weight, scale = self.weight, self.weight_scale
        bias = params["bias"] if "bias" in params else self.bias
        return _fp8_linear(x, weight, scale, bias, self.use_fast_accum)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"use_fast_accum={self.use_fast_accum}")


# Sibling layers: children of one module that read the same input in the architectures that have them (the
# attention and MLP of Hugging Face's Llama, Mistral, Qwen2 and Gemma), fused by convert(fuse_siblings=True).
SIBLING_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class FusedSiblings:
    """One Float8Linear over the concatenated weights of sibling layers ([N_0 + N_1 + ..., K]; per-row weight
    scales make that the same FP8 weight as each layer's own), run once per input: the first sibling called with
    an input runs it, and each sibling returns its columns of the result as a view. Inputs of more than
    MAX_FUSED_ROWS rows (prefill) run each sibling on its own rows of the fused weight instead: there the launches
    saved are a small part of the time, and the strided views slowed the model's next ops (measured, 8B and 70B
    prefill: 2-4% slower fused, while decode at 1 to 64 rows was 2-9% faster; docs/model_path.md).

    The contract (convert's fuse_siblings=True): the siblings are called with the same tensor object, unchanged in
    between, as the attention and MLP of the models in SIBLING_GROUPS do. A sibling called with another tensor, or
    with one whose version counter moved (an in-place change; inference tensors have no counter), runs the GEMM
    again for it. The result is held until every sibling has taken its part, then let go."""

    MAX_FUSED_ROWS = 256  # between the decode batches measured faster fused (<= 64) and the prefills slower (>= 2048)

    def __init__(self, fused: Float8Linear, widths: list[int]):
        self.fused = fused
        self.bounds, start = [], 0
        for w in widths:
            self.bounds.append((start, start + w))
            start += w
        self._x = self._out = self._version = None
        self._left = 0

    @staticmethod
    def _version_of(x: torch.Tensor):
        # Inference tensors have no version counter; under torch.compile the trace sees the calls in order.
        if torch.compiler.is_compiling() or x.is_inference():
            return None
        return x._version

    def _own(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Sibling `index` alone: Float8Linear's forward on its rows of the fused weight (views, no copy)."""
        f = self.fused
        start, stop = self.bounds[index]
        return _fp8_linear(x, f.weight[start:stop], f.weight_scale[start:stop],
                           None if f.bias is None else f.bias[start:stop], f.use_fast_accum)

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if x.numel() > self.MAX_FUSED_ROWS * x.shape[-1]:
            return self._own(x, index)
        version = self._version_of(x)
        if self._x is not x or self._version != version:
            self._out = self.fused(x)
            self._x, self._version, self._left = x, version, len(self.bounds)
        start, stop = self.bounds[index]
        part = self._out[..., start:stop]
        self._left -= 1
        if self._left == 0:
            self._x = self._out = self._version = None
        return part


class SiblingLinear(nn.Module):
    """A layer of a FusedSiblings group: ``forward(x)`` is its columns of the group's GEMM on ``x`` (a view of
    the fused output). The first sibling of a group holds the fused Float8Linear as its submodule ``fused`` (so the
    weights appear once in the state dict and move with ``.to()``); the others refer to it."""

    def __init__(self, group: FusedSiblings, index: int, owner: bool):
        super().__init__()
        self.group, self.index = group, index
        self.in_features = group.fused.in_features
        start, stop = group.bounds[index]
        self.out_features = stop - start
        if owner:
            self.fused = group.fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.part(x, self.index)

    def extra_repr(self) -> str:
        start, stop = self.group.bounds[self.index]
        return f"columns {start}:{stop} of a fused [{self.group.fused.out_features}, {self.in_features}] GEMM"


@dataclasses.dataclass
class ConvertReport:
    """What fp8ext.convert did: ``swapped`` [(name, (N, K))] and ``skipped`` [(name, reason)], in module order,
    ``fused`` [(names, (N, K))]: the sibling groups run as one GEMM (fuse_siblings=True), ``tied`` [names]:
    each a parameter that several swapped layers shared (a weight, or a bias) under those names, still one
    parameter after the swap (a weight with its weight_scale), and ``experts`` [(name, (G, I, H))]: the
    mixture-of-experts expert sets now Float8Experts (fp8ext.moe)."""

    swapped: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)
    fused: list = dataclasses.field(default_factory=list)
    tied: list = dataclasses.field(default_factory=list)
    experts: list = dataclasses.field(default_factory=list)  # [(name, (G, I, H))]: MoE experts now Float8Experts

    def __str__(self) -> str:
        def count(n: int, noun: str) -> str:
            return f"{n} {noun}{'' if n == 1 else 's'}"

        # A module registered under several names (or tied into several) is counted once per name, as listed.
        lines = [f"fp8ext.convert: {count(len(self.swapped), 'Linear layer')} now FP8, {len(self.skipped)} skipped"
                 + (f", {count(len(self.experts), 'MoE expert set')} now FP8" if self.experts else "")
                 + (f", {count(len(self.fused), 'sibling group')} fused" if self.fused else "")
                 + (f", {count(len(self.tied), 'tied parameter')} kept tied" if self.tied else "")]
        lines += [f"  skipped {name or '(the model itself)'}: {reason}" for name, reason in self.skipped]
        return "\n".join(lines)


def _skip_reason(module: nn.Linear, name: str, filter_fn, skip_lm_head: bool) -> Optional[str]:
    # nn.MultiheadAttention reads its out_proj's weight and bias directly instead of calling it.
    if isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear):
        return "out_proj of nn.MultiheadAttention, which reads the weight directly instead of calling the layer"
    if skip_lm_head and name.split(".")[-1].endswith("lm_head"):
        return "lm_head (skip_lm_head=True)"
    if filter_fn is not None and not filter_fn(module, name):
        return "filter_fn returned False"
    if module.weight.dtype not in _FLOAT_DTYPES:
        return f"weight dtype {module.weight.dtype} is not bfloat16, float16 or float32"
    if module.weight.device.type == "meta":
        return "weight on the meta device (load the weights first)"
    return _shape_problem(module.in_features, module.out_features)


def _shared_parameters(model: nn.Module) -> dict[int, list[tuple[str, nn.Module]]]:
    """The parameters that more than one module holds (tied weights): {id: [(name, holding module), ...]}."""
    holders: dict[int, list[tuple[str, nn.Module]]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for name, p in module._parameters.items():
            if p is not None:
                holders.setdefault(id(p), []).append((f"{module_name}.{name}" if module_name else name, module))
    return {pid: held for pid, held in holders.items() if len({id(m) for _, m in held}) > 1}


def _untying_reasons(model: nn.Module, shared: dict, filter_fn, skip_lm_head: bool) -> dict[int, str]:
    """{id(layer): why it stays} for the Linears that would be swapped but share a parameter with a module that
    stays as it is (an nn.Embedding, a skipped Linear): a Float8Linear has its own FP8 copy, so swapping one of
    them would untie the two silently (and tying them again later would hand the Float8Linear a float weight)."""
    swappable = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if name and isinstance(module, nn.Linear) and id(module) not in swappable:
            swappable[id(module)] = _skip_reason(module, name, filter_fn, skip_lm_head) is None
    reasons: dict[int, str] = {}
    changed = True
    while changed:  # a layer kept for its tie keeps the layers tied to it in turn
        changed = False
        for held in shared.values():
            stays = [n for n, m in held if not swappable.get(id(m)) or id(m) in reasons]
            for name, module in held:
                if stays and swappable.get(id(module)) and id(module) not in reasons:
                    reasons[id(module)] = (f"{name.rpartition('.')[2]} shared with {', '.join(stays)}, which "
                                           "stays as it is (swapping would untie them; give the layer its own copy "
                                           "to swap it)")
                    changed = True
    return reasons


def _sibling_groups(model: nn.Module, eligible: set[int], uses: dict[int, int]) -> list[tuple[str, list]]:
    """(parent name, [(child name, Linear), ...]) for each group of SIBLING_GROUPS whose members are all eligible
    Linears (swapped, used once), with one in_features, one weight dtype and device, and bias on all or none."""
    groups = []
    for parent_name, parent in model.named_modules():
        for names in SIBLING_GROUPS:
            members = [(n, getattr(parent, n, None)) for n in names]
            if not all(isinstance(m, nn.Linear) and id(m) in eligible and uses[id(m)] == 1 for _, m in members):
                continue
            layers = [m for _, m in members]
            if (len({m.in_features for m in layers}) == 1 and len({m.weight.dtype for m in layers}) == 1
                    and len({m.weight.device for m in layers}) == 1
                    and len({m.bias is None or m.bias.dtype for m in layers}) == 1):
                groups.append((parent_name, members))
    return groups


def convert(model: nn.Module, filter_fn: Optional[Callable[[nn.Module, str], bool]] = None,
            skip_lm_head: bool = True, use_fast_accum: bool = True, fuse_siblings: bool = False) -> ConvertReport:
    """Replace, in place, every ``nn.Linear`` of ``model`` that fits by a Float8Linear (``from_linear``), and say
    what happened.

    A layer is swapped when its in_features and out_features are multiples of 16, its weight is bfloat16, float16
    or float32, ``filter_fn(module, fully_qualified_name)`` (if given) returns True, and, with ``skip_lm_head``
    (the default: the logits are the most sensitive output of a language model), its name does not end with
    ``lm_head``. A layer reachable under several names (shared) becomes one Float8Linear at all of them. The
    model itself is never replaced (``Float8Linear.from_linear`` converts a bare Linear).

    Tied parameters stay tied. Swapped layers that shared a weight share the FP8 weight and its scale (a bias
    likewise), listed in ``tied``. A layer that shares a parameter with a module that is not swapped (the
    ``lm_head`` tied to the token embedding, a Linear that ``filter_fn`` keeps) stays as it is, with the reason in
    ``skipped``: a Float8Linear holds its own FP8 copy, which would untie them.

    With ``fuse_siblings=True``, sibling layers that would all be swapped (SIBLING_GROUPS: q/k/v and gate/up
    children of one module, same in_features, used nowhere else) become one FusedSiblings group: one quantize and
    one GEMM per input instead of one each, for the models whose siblings read the same, unchanged input (see
    FusedSiblings). Their weights then live under the first sibling (``q_proj.fused.weight``), so the state dict
    differs from an unfused conversion's.

    Mixture-of-experts layers: transformers' stacked-experts modules (``gate_up_proj`` [G, 2I, H], ``down_proj``
    [G, H, I]: Qwen3-MoE, Mixtral, DeepSeek-V3, ...) become Float8Experts (fp8ext.moe), two grouped GEMMs per
    layer, listed in ``experts``; their routers stay as they are.
    """
    report = ConvertReport()
    converted: dict[int, nn.Module] = {}
    shared = _shared_parameters(model)
    untying = _untying_reasons(model, shared, filter_fn, skip_lm_head) if shared else {}
    swapped_parameters: dict[int, tuple] = {}
    if fuse_siblings:
        uses: dict[int, int] = {}
        eligible: set[int] = set()
        for name, module in model.named_modules(remove_duplicate=False):
            uses[id(module)] = uses.get(id(module), 0) + 1
            if (name and isinstance(module, nn.Linear) and _skip_reason(module, name, filter_fn, skip_lm_head) is None
                    and not any(id(p) in shared for p in module.parameters(recurse=False))):
                eligible.add(id(module))  # a fused weight is a copy: layers with tied parameters are not fused
        for parent_name, members in _sibling_groups(model, eligible, uses):
            layers = [m for _, m in members]
            with torch.no_grad():
                weight = torch.cat([m.weight.detach() for m in layers])
                bias = None if layers[0].bias is None else torch.cat([m.bias.detach() for m in layers])
            fused = Float8Linear._from_weight(weight, bias, use_fast_accum)
            del weight, bias
            group = FusedSiblings(fused, [m.out_features for m in layers])
            for index, (_, layer) in enumerate(members):
                converted[id(layer)] = SiblingLinear(group, index, owner=index == 0)
            prefix = f"{parent_name}." if parent_name else ""
            report.fused.append(([prefix + n for n, _ in members], (fused.out_features, fused.in_features)))
    for name, module in list(model.named_modules(remove_duplicate=False)):
        if not isinstance(module, nn.Linear):
            continue
        if not name:
            report.skipped.append((name, "the model itself is an nn.Linear: use Float8Linear.from_linear"))
            continue
        if id(module) not in converted:
            reason = _skip_reason(module, name, filter_fn, skip_lm_head) or untying.get(id(module))
            if reason is not None:
                report.skipped.append((name, reason))
                continue
            converted[id(module)] = _swap(module, use_fast_accum, shared, swapped_parameters)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, converted[id(module)])
        report.swapped.append((name, (module.out_features, module.in_features)))
    report.tied = [[n for n, _ in shared[pid]] for pid in swapped_parameters]
    _convert_experts(model, filter_fn, use_fast_accum, report)
    return report


def _convert_experts(model: nn.Module, filter_fn, use_fast_accum: bool, report: ConvertReport) -> None:
    """Swaps transformers' stacked-experts modules (fp8ext.moe.is_stacked_experts) for Float8Experts."""
    for name, module in list(model.named_modules()):
        if not is_stacked_experts(module):
            continue
        reason = ("the model itself is a stacked-experts module: use fp8ext.moe.Float8Experts" if not name
                  else "filter_fn returned False" if filter_fn is not None and not filter_fn(module, name)
                  else experts_problem(module))
        if reason is not None:
            report.skipped.append((name, reason))
            continue
        f8 = Float8Experts(module, use_fast_accum=use_fast_accum)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, f8)
        report.experts.append((name, (f8.num_experts, f8.intermediate_dim, f8.hidden_dim)))


def _swap(linear: nn.Linear, use_fast_accum: bool, shared: dict, swapped_parameters: dict) -> Float8Linear:
    """Float8Linear.from_linear, with the parameters that ``linear`` shares with layers swapped before it taken
    from theirs: {id(original parameter): its Float8Linear parameters} in ``swapped_parameters``."""
    f8 = Float8Linear.from_linear(linear, use_fast_accum=use_fast_accum)
    for original, names in ((linear.weight, ("weight", "weight_scale")), (linear.bias, ("bias",))):
        if original is None or id(original) not in shared:
            continue
        if id(original) in swapped_parameters:
            for name, p in zip(names, swapped_parameters[id(original)]):
                setattr(f8, name, p)
        else:
            swapped_parameters[id(original)] = tuple(getattr(f8, name) for name in names)
    return f8
