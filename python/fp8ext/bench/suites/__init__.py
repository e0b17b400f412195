"""One module per suite; importing this package registers them all, in the order --help lists them."""
from . import peers, zoo  # noqa: F401
