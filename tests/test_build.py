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


def test_cost_model_coefficients_name_kernels_of_the_family():
    # cost_model.cpp looks coefficients up by name, so a row of a dropped or misspelt kernel would silently leave
    # that kernel on its twin's or the default coefficients: every row must name a kernel of the manifest, or
    # torch's row-wise path.
    import json
    import re
    manifest = {k["name"] for k in json.loads((ROOT / "python" / "fp8ext" / "kernel_manifest.json").read_text())["kernels"]}
    text = (ROOT / "csrc" / "sm90" / "cost_model_coeffs.inc").read_text()
    rows = re.findall(r'^\{"([^"]+)", \{([^}]+)\}\},$', text, re.M)
    assert len(rows) == sum(1 for line in text.splitlines() if line.startswith("{"))
    assert rows
    for name, coeffs in rows:
        assert name in manifest | {"torch_rowwise_fast", "torch_rowwise_precise"}, name
        assert len(coeffs.split(",")) == 4 and all(float(c) >= 0 for c in coeffs.split(",")), (name, coeffs)


def test_manifest_lists_the_table_and_the_decode_kernels():
    import json
    manifest = {k["name"]: k for k in json.loads((ROOT / "python" / "fp8ext" / "kernel_manifest.json").read_text())["kernels"]}
    assert set(manifest) == {r.name for r in ROWS} | DECODE_KERNELS
    for r in ROWS:
        t = manifest[r.name]
        assert (t["tile"], t["cluster"], t["swap_ab"], t["workspace"]) == (list(r.tile), list(r.cluster), r.swap_ab,
                                                                           r.schedule == "sk")
        if t["twin"] is not None:  # the bf16 e4m3 kernel of the same tile, cluster and schedule
            twin = manifest[t["twin"]]
            assert (twin["out"], twin["in_a"]) == ("bf16", "e4m3")
            assert all(twin[k] == t[k] for k in ("schedule", "tile", "cluster", "accum", "swap_ab", "promotion"))


def test_registered_traits_match_the_manifest():
    # C++ takes each kernel's traits from its KernelConfig (the decode kernels from their registration); Python
    # reads the manifest. Both come from generate_kernels.py and must agree.
    import torch
    if not fp8ext.kernel_names():
        return
    for line in torch.ops.fp8ext._kernel_traits():
        name, sched, tm, tn, tk, cm, cn, accum, out, in_a, swap, promo, overlap, max_m, workspace = line.split()
        t = fp8ext.kernel_traits(name)
        assert (t["schedule"], t["tile"], t["cluster"]) == (sched, [int(tm), int(tn), int(tk)] if sched != "gemv"
                                                            else [0, 0, 0], [int(cm), int(cn)] if sched != "gemv"
                                                            else [1, 1]), line
        assert (t["accum"], t["out"], t["in_a"], t["swap_ab"], t["promotion"], t["overlap"], t["max_m"],
                t["workspace"]) == (accum, out, in_a, swap == "1", int(promo), overlap == "1", int(max_m),
                                    workspace == "1"), line
