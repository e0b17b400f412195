"""The build's bookkeeping: generated kernel sources match their table, and the installed extension says what
it was built with."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fp8ext

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "csrc" / "sm90"))
from generate_kernels import BLOCKWISE_ROWS, ROWS, blockwise_decode_kernel_names, decode_kernel_names  # noqa: E402

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
    text = (ROOT / "csrc" / "sm90" / "dispatch" / "cost_model_coeffs.inc").read_text()
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


def test_manifest_lists_the_blockwise_table_and_its_decode_kernels():
    import json
    data = json.loads((ROOT / "python" / "fp8ext" / "kernel_manifest.json").read_text())
    rowwise = {k["name"] for k in data["kernels"]}
    manifest = {k["name"]: k for k in data["blockwise_kernels"]}
    assert set(manifest) == {r.name for r in BLOCKWISE_ROWS} | blockwise_decode_kernel_names()
    for r in BLOCKWISE_ROWS:
        t = manifest[r.name]
        assert (t["tile"], t["cluster"], t["swap_ab"], t["overlap"], t["workspace"]) == (
            list(r.tile), list(r.cluster), r.swap_ab, r.overlap, r.schedule == "sk")
    for name, t in manifest.items():
        assert name.startswith("bw_") and name not in rowwise
        assert fp8ext.kernel_traits(name) == t
        if t["rowwise_twin"] is not None:  # a decode kernel's row-wise counterpart
            assert t["schedule"] == "gemv" and t["rowwise_twin"] in rowwise
        if t["twin"] is not None:  # the bf16 kernel whose fit it borrows
            twin = manifest[t["twin"]]
            assert twin["out"] == "bf16" and all(twin[k] == t[k] for k in ("schedule", "tile", "cluster", "overlap"))
    if fp8ext.build_info()["cuda"] and not fp8ext.build_info()["subset"]:
        assert sorted(fp8ext.blockwise_kernel_names()) == sorted(manifest)


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


# ---- The ABI audit (tools/abi_audit.py): fp8ext._C calls torch only through the stable ABI ----

sys.path.insert(0, str(ROOT / "tools"))
import abi_audit  # noqa: E402

_BINUTILS = all(shutil.which(t) for t in ("nm", "c++filt", "readelf"))
needs_toolchain = pytest.mark.skipif(not (_BINUTILS and shutil.which("g++")), reason="needs g++ and binutils")


def _shared_library(tmp_path, name, source, *link):
    (tmp_path / f"{name}.cpp").write_text(source)
    so = tmp_path / f"lib{name}.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(tmp_path / f"{name}.cpp"), *link], check=True,
                   capture_output=True, text=True)
    return so


def _run_audit(so):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "abi_audit.py"), str(so)], capture_output=True,
                          text=True, timeout=60)


@needs_toolchain
def test_abi_audit_fails_on_a_planted_libtorch_symbol(tmp_path):
    so = _shared_library(tmp_path, "planted", """
namespace c10 { int planted_symbol(); }
namespace at { struct Planted { virtual ~Planted(); }; }
extern "C" int call_planted(void) { return c10::planted_symbol(); }
extern "C" void* make_planted(void) { return new at::Planted(); }  // vtable for at::Planted: undefined too
""")
    result = _run_audit(so)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "c10::planted_symbol()" in result.stdout
    assert "vtable for at::Planted" in result.stdout
    offenders, _ = abi_audit.audit(so)
    assert len(offenders) == 2, offenders


@needs_toolchain
def test_abi_audit_passes_stable_c_shims(tmp_path):
    so = _shared_library(tmp_path, "stable", """
#include <cstring>
#include <stdexcept>
#include <string>
extern "C" int aoti_torch_planted(void);
extern "C" int torch_planted_shim(void);
extern "C" int call_planted(const char* s) {
  if (!s) throw std::runtime_error(std::string("no string"));  // libstdc++ and libgcc symbols are fine
  return aoti_torch_planted() + torch_planted_shim() + (int)std::strlen(s);
}
""")
    result = _run_audit(so)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("abi_audit: ok: libstable.so:") and len(result.stdout.splitlines()) == 1
    assert "2 of them stable-ABI C shims" in result.stdout


@needs_toolchain
def test_abi_audit_fails_on_libtorch_python(tmp_path):
    _shared_library(tmp_path, "torch_python", 'extern "C" int THPVariable_planted(void) { return 0; }')
    so = _shared_library(tmp_path, "needs_python", 'int THPVariable_Wrap(void* v);\n'
                         'extern "C" int f(void) { return THPVariable_Wrap(nullptr); }',
                         "-Wl,--no-as-needed", f"-L{tmp_path}", "-ltorch_python")
    result = _run_audit(so)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "THPVariable_Wrap(void*)" in result.stdout and "DT_NEEDED libtorch_python.so" in result.stdout


def _installed_extension():
    import importlib.util
    spec = importlib.util.find_spec("fp8ext._C")
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".so") else None


@pytest.mark.skipif(not _BINUTILS, reason="needs binutils (nm, c++filt, readelf)")
def test_installed_extension_uses_only_the_stable_abi():
    so = _installed_extension()
    if so is None:
        pytest.skip("fp8ext._C is not built")
    if "torch_floor" not in fp8ext.build_info():
        pytest.skip(f"the fp8ext at {Path(fp8ext.__file__).parent} is a build from before the stable ABI (its "
                    "_build_info.json has no torch_floor); reinstall fp8ext from this tree")
    offenders, summary = abi_audit.audit(so)
    assert not offenders, f"{so} uses symbols outside the stable ABI:\n" + "\n".join(offenders)
    assert so.name.endswith(".abi3.so"), f"{so.name}: not built for Python's limited API (abi3)"
