"""The build's bookkeeping: generated kernel sources match their table, and the installed extension says what
it was built with."""
import subprocess
import sys
from pathlib import Path

import fp8ext

ROOT = Path(__file__).resolve().parent.parent


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
        assert {"gemv_m4_precise_bf16", "gemv_m4_precise_fp16", "gemv_m4_precise_fp32"} <= registered
        if not info["subset"]:
            table = subprocess.run([sys.executable, str(ROOT / "csrc" / "sm90" / "generate_kernels.py"), "--list"],
                                   capture_output=True, text=True, check=True).stdout.split()
            assert sorted(info["kernels"]) == sorted(table)
    else:
        assert info["registered_kernels"] == []
