"""One module per suite; importing this package registers them all, in the order --help lists them."""
from . import peers, zoo, floor, host, invariance, torch_compile, autotune, edge  # noqa: F401
from . import model, quantize, linear, blockwise, decode_chain, compile_switch, grouped, moe  # noqa: F401
from . import large_m, torch_blockwise  # noqa: F401
