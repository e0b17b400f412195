"""What the ctypes probes (probe_blockwise_mainloop.py, probe_rowwise_mainloop.py) share: a probe build loaded from
PATH or PATH@TAG, its variants' names, and a checked call of its probe_run(i, ..., err, err_len)."""
import ctypes

import torch


class ProbeBuild:
    """One probe .so. `run_argtypes` are the ctypes types of probe_run's arguments between the variant's index and
    the error buffer; the variants of a build given as PATH@TAG are timed as NAME@TAG."""

    def __init__(self, spec: str, run_argtypes: list):
        path, _, tag = spec.partition("@")
        self.tag = f"@{tag}" if tag else ""
        self.lib = ctypes.CDLL(path)
        self.lib.probe_name.restype = ctypes.c_char_p
        self.lib.probe_run.argtypes = [ctypes.c_int, *run_argtypes, ctypes.c_char_p, ctypes.c_int]
        self.names = [self.lib.probe_name(i).decode() for i in range(self.lib.probe_count())]
        self.workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        self.sm_count = torch.cuda.get_device_properties(0).multi_processor_count
        self.err = ctypes.create_string_buffer(256)

    def run(self, i: int, *args) -> None:
        if self.lib.probe_run(i, *args, self.err, len(self.err)):
            raise RuntimeError(f"{self.names[i]}: {self.err.value.decode()}")
