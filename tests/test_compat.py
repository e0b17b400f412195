"""The check fp8ext's import makes before it loads fp8ext._C (python/fp8ext/_compat.py): a torch older than the
build's floor, or built for another CUDA major (or for none) than a CUDA build of fp8ext, gets one ImportError that
says what is installed, what fp8ext needs and what to install. CPU only."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "fp8ext"

# This tree's _compat.py by path: the function under test, whichever fp8ext is installed.
_spec = importlib.util.spec_from_file_location("fp8ext_compat_under_test", PACKAGE / "_compat.py")
compat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compat)

CU13 = dict(fp8ext_version="0.1.0+cu13", torch_floor="2.11", cuda_major=13, built_cuda="13.0")
CPU = dict(fp8ext_version="0.1.0+cpu", torch_floor="2.11", cuda_major=None)


@pytest.mark.parametrize("torch_version, torch_cuda", [
    ("2.11.0+cu130", "13.0"),
    ("2.11.0", "13.0"),
    ("2.11.1+cu130", "13.0"),
    ("2.14.1+cu130", "13.0"),
    ("2.20.0+cu132", "13.2"),              # a later CUDA 13 minor
    ("3.0.0+cu130", "13.0"),
    ("2.12.0.dev20260101+cu130", "13.0"),  # a nightly of a later minor
    ("2.11.0a0+gitabc1234", "13.0"),       # a source build of the floor's minor
])
def test_supported_torch_passes(torch_version, torch_cuda):
    assert compat.incompatibility(torch_version, torch_cuda, **CU13) is None
    compat.check_torch(torch_version, torch_cuda, **CU13)  # no raise


def test_cpu_build_runs_on_any_torch_from_the_floor():
    for torch_version, torch_cuda in [("2.11.0+cpu", None), ("2.14.1+cu130", "13.0"), ("2.12.0+cu126", "12.6"),
                                      ("2.13.0.dev20260301+cpu", None)]:
        assert compat.incompatibility(torch_version, torch_cuda, **CPU) is None, torch_version
    msg = compat.incompatibility("2.10.0+cpu", None, **CPU)
    assert msg.startswith("fp8ext 0.1.0+cpu needs torch >= 2.11; this is torch 2.10.0+cpu.")
    assert "pip install 'torch>=2.11'" in msg and "CUDA" not in msg


def _raises(torch_version, torch_cuda, **build):
    with pytest.raises(ImportError) as e:
        compat.check_torch(torch_version, torch_cuda, **build)
    return str(e.value)


def test_older_torch_is_refused_with_what_to_install():
    msg = _raises("2.10.0+cu130", "13.0", **CU13)
    assert msg.startswith("fp8ext 0.1.0+cu13 needs torch >= 2.11 built for CUDA 13; "
                          "this is torch 2.10.0+cu130 (CUDA 13.0).")
    assert "Install a CUDA 13 build of torch >= 2.11" in msg
    assert "pip install 'torch>=2.11' from PyTorch's cu130 wheels" in msg
    assert "build fp8ext from source against this torch" in msg
    # A nightly or pre-release of an older minor is that minor.
    assert "this is torch 2.10.0.dev20251101+cu130" in _raises("2.10.0.dev20251101+cu130", "13.0", **CU13)
    assert "needs torch >= 2.11" in _raises("2.9.1", "13.0", **CU13)
    assert "needs torch >= 2.11" in _raises("1.13.1+cu117", "11.7", **CU13)


def test_other_cuda_major_is_refused():
    msg = _raises("2.14.1+cu128", "12.8", **CU13)
    assert "needs torch >= 2.11 built for CUDA 13; this is torch 2.14.1+cu128 (CUDA 12.8)" in msg
    assert "from PyTorch's cu130 wheels" in msg
    # Older and the wrong CUDA: one message with both requirements.
    msg = _raises("2.10.0+cu126", "12.6", **CU13)
    assert msg.count("fp8ext 0.1.0+cu13 needs") == 1 and "this is torch 2.10.0+cu126 (CUDA 12.6)" in msg
    assert "needs torch >= 2.11 built for CUDA 13" in msg
    # A CUDA 14 torch does not run a CUDA 13 build either.
    assert "(CUDA 14.0)" in _raises("2.16.0+cu140", "14.0", **CU13)


def test_cpu_only_torch_with_a_cuda_build_is_refused():
    msg = _raises("2.14.1+cpu", None, **CU13)
    assert "needs torch >= 2.11 built for CUDA 13; this is torch 2.14.1+cpu (without CUDA)" in msg
    assert "from PyTorch's cu130 wheels" in msg


def test_index_follows_the_cuda_fp8ext_was_built_with():
    msg = _raises("2.14.1+cpu", None, **{**CU13, "built_cuda": "13.1"})
    assert "from PyTorch's cu131 wheels" in msg
    msg = _raises("2.14.1+cpu", None, **{**CU13, "built_cuda": None})
    assert "from PyTorch's cu130 wheels" in msg


def test_unreadable_versions_are_not_held_against_torch():
    assert compat.incompatibility("unknown", "13.0", **CU13) is None
    assert compat.incompatibility("2.14.1+cu130", "13.0", **{**CU13, "torch_floor": None}) is None
    # ...but the CUDA major still is.
    assert "built for CUDA 13" in _raises("unknown", None, **CU13)


# ---- The import itself: the check runs before fp8ext._C is loaded ----

def test_import_refuses_before_loading_the_extension(tmp_path):
    """A copy of python/fp8ext without its extension, under several _build_info.json: an incompatible build
    raises the check's ImportError (so the check ran before fp8ext._C was needed); a compatible one gets past it
    and fails only on the missing extension."""
    import torch

    pkg = tmp_path / "fp8ext"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build_info.json"))
    cuda = torch.version.cuda
    major = int(cuda.split(".")[0]) if cuda else None
    cases = {
        "floor": {"cuda": False, "cuda_major": None, "torch_floor": "99.0", "version": "0.1.0+cpu"},
        "cuda": {"cuda": True, "cuda_major": (major or 13) + 1, "torch_floor": "2.0", "version": "0.1.0+cuX"},
        "ok": {"cuda": False, "cuda_major": None, "torch_floor": "2.0", "version": "0.1.0+cpu"},
    }
    script = f"""
import importlib, json, sys
results = {{}}
for name, info in json.loads({json.dumps(json.dumps(cases))}).items():
    open({str(pkg / "_build_info.json")!r}, "w").write(json.dumps(info))
    for m in [m for m in sys.modules if m == "fp8ext" or m.startswith("fp8ext.")]:
        del sys.modules[m]
    importlib.invalidate_caches()
    try:
        import fp8ext
        results[name] = "imported " + fp8ext.__file__
    except ImportError as e:
        results[name] = str(e)
print(json.dumps(results))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert results["floor"].startswith(f"fp8ext 0.1.0+cpu needs torch >= 99.0; this is torch {torch.__version__}.")
    assert results["cuda"].startswith(f"fp8ext 0.1.0+cuX needs torch >= 2.0 built for CUDA {(major or 13) + 1}; "
                                      f"this is torch {torch.__version__}")
    assert "needs torch" not in results["ok"], results["ok"]
    assert "_C" in results["ok"], results["ok"]  # got as far as loading the (absent) extension
