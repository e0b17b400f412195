"""torchao integration: `torchao.quantization.quantize_(model, fp8ext.TorchaoConfig())` swaps each nn.Linear that
fits for a Float8Linear. Imported only when `fp8ext.TorchaoConfig` is first used, so that fp8ext neither needs
torchao nor pays for importing it."""
from __future__ import annotations

import dataclasses

from torch import nn
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler

from .nn import Float8Linear, _skip_reason


@dataclasses.dataclass
class TorchaoConfig(AOBaseConfig):
    """fp8ext's row-wise FP8 (weight per output row, activation per token, e4m3) as a torchao workflow config.
    quantize_'s filter_fn chooses the layers (torchao's default: every nn.Linear); a layer that fp8ext.convert would
    skip (in or out features not multiples of 16, a weight that is not bfloat16, float16 or float32, or on the meta
    device, nn.MultiheadAttention's out_proj) is left as it is. torchao hands over one layer at a time, so a weight
    tied to another module (an lm_head tied to the embedding) gets an FP8 copy of its own, and the tie is gone:
    fp8ext.convert keeps ties, or leaves the layer and says why."""

    use_fast_accum: bool = True


@register_quantize_module_handler(TorchaoConfig)
def _to_float8_linear(module: nn.Module, config: TorchaoConfig) -> nn.Module:
    if not isinstance(module, nn.Linear) or _skip_reason(module, "", None, False) is not None:
        return module
    return Float8Linear.from_linear(module, use_fast_accum=config.use_fast_accum)
