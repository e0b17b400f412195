"""The build's bookkeeping: generated kernel sources match their table, and the installed extension says what
it was built with."""
import subprocess
import sys
from pathlib import Path

import fp8ext

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "csrc" / "sm90"))
from generate_kernels import ROWS, decode_kernel_names  # noqa: E402

# The hand-written decode kernels (gemv_rowwise.cu, gemv_tensor_core.cu), which the generator's table does not list.
DECODE_KERNELS = decode_kernel_names()


def test_decode_kernel_names_are_read_from_their_sources():
    assert {f"gemv_m4_precise_{o}" for o in ("bf16", "fp16", "fp32")} <= DECODE_KERNELS
    assert {"gemv_tc_m32_r16_s4_fast_bf16", "gemv_tc_m32_r16_s8_fast_bf16"} <= DECODE_KERNELS
    assert all(n.startswith("gemv_") and n.split("_")[-1] in ("bf16", "fp16", "fp32") for n in DECODE_KERNELS)


def test_generated_kernels_match_the_table():
    result = subprocess.run([sys.executable, str(ROOT / "csrc" / "sm90" / "generate_kernels.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_build_info_is_consistent():
    info = fp8ext.build_info()
    assert info["version"] == fp8ext.__version__
    if info["cuda"]:
        assert info["arch"] == "sm_90a"
        registered = set(info["registered_kernels"])
        assert set(info["kernels"]) <= registered, "a compiled kernel did not register"
        assert DECODE_KERNELS <= registered
        if not info["subset"]:
            table = subprocess.run([sys.executable, str(ROOT / "csrc" / "sm90" / "generate_kernels.py"), "--list"],
                                   capture_output=True, text=True, check=True).stdout.split()
            assert sorted(info["kernels"]) == sorted(table)
    else:
        assert info["registered_kernels"] == []


def test_dispatch_table_names_built_kernels_and_valid_options():
    # dispatch.cpp skips a table row whose name does not parse, so a typo would silently fall back to the shape
    # rules: every row must name a kernel of the generator's table (or the GEMV), with well-formed options.
    import re
    names = {r.name for r in ROWS} | DECODE_KERNELS
    text = (ROOT / "csrc" / "sm90" / "heuristic_table.inc").read_text()
    rows = re.findall(r'^\{OutType::\w+, Accum::\w+, \d+, \d+, \d+, "([^"]+)", "([^"]+)"\},$', text, re.M)
    assert len(rows) == sum(1 for line in text.splitlines() if line.startswith("{"))
    assert rows
    for choice in (c for row in rows for c in row):
        name, _, opts = choice.partition("@")
        assert name in names, choice
        assert opts == "" or (re.fullmatch(r"[HMN][1248]", opts) and not name.startswith("gemv_")), choice
