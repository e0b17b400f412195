"""Whether the running torch can load this build of fp8ext._C, checked before it is loaded.

fp8ext._C is built on PyTorch's stable ABI for torch >= its floor (`torch_floor` in _build_info.json), and a
CUDA build links the CUDA runtime of one major version (`cuda_major`), which torch must be built for too. Any
other torch would fail to load it with an undefined symbol or a missing libcudart; this says instead what is
installed and what to install. Plain Python with no imports, so that the tests can call it with any versions.
"""
from __future__ import annotations

import re

def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version: "2.11.0+cu130" -> (2, 11), "2.12.0.dev20260101+cu130" -> (2, 12),
    "2.11.0a0+gitabc" -> (2, 11). The stable ABI is versioned by major.minor (TORCH_TARGET_VERSION), so a pre-release
    or nightly of a minor counts as that minor. None when there is no leading "X.Y"."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _cuda_tag(cuda_major: int, built_cuda: str | None) -> str:
    """The tag of PyTorch's wheels for a CUDA major: that of the CUDA version fp8ext was built with when it is of
    that major ("13.0" -> cu130), else <major>.0."""
    tag = f"{cuda_major}0"
    if built_cuda:
        parts = built_cuda.split(".")
        if parts[0] == str(cuda_major) and len(parts) > 1 and parts[1].isdigit():
            tag = f"{cuda_major}{parts[1]}"
    return f"cu{tag}"


def incompatibility(torch_version: str, torch_cuda: str | None, *, fp8ext_version: str, torch_floor: str | None,
                    cuda_major: int | None, built_cuda: str | None = None) -> str | None:
    """Why torch `torch_version` (torch.__version__), built for CUDA `torch_cuda` (torch.version.cuda, None for a
    CPU-only or ROCm build), cannot load fp8ext `fp8ext_version` built for torch >= `torch_floor` and CUDA major
    `cuda_major` (None: a CPU-only build of fp8ext); None when it can. A floor or torch version that cannot be read
    is not held against it (the load itself is then the test)."""
    floor = _release(torch_floor) if torch_floor else None
    have = _release(torch_version)
    too_old = floor is not None and have is not None and have < floor
    if cuda_major is None:
        wrong_cuda = False
    elif torch_cuda is None:
        wrong_cuda = True
    else:
        m = re.match(r"\s*(\d+)", torch_cuda)
        wrong_cuda = m is not None and int(m.group(1)) != cuda_major
    if not (too_old or wrong_cuda):
        return None

    torch_req = f"torch >= {torch_floor}" if floor else "torch"
    pip_req = f"'torch>={torch_floor}'" if floor else "torch"
    from_source = ("or build fp8ext from source against this torch (pip install --no-build-isolation . in its "
                   "source tree)")
    # Each message is one literal, so that the README can quote it (tests/test_docs.py).
    if cuda_major is not None:
        cuda = f"CUDA {torch_cuda}" if torch_cuda else "without CUDA"
        tag = _cuda_tag(cuda_major, built_cuda)
        return (f"fp8ext {fp8ext_version} needs {torch_req} built for CUDA {cuda_major}; this is torch {torch_version} "
                f"({cuda}). Install a CUDA {cuda_major} build of {torch_req} (pip install {pip_req} from PyTorch's "
                f"{tag} wheels), {from_source}.")
    return f"fp8ext {fp8ext_version} needs {torch_req}; this is torch {torch_version}. Install {torch_req} " \
           f"(pip install {pip_req}), {from_source}."

def check_torch(torch_version: str, torch_cuda: str | None, *, fp8ext_version: str, torch_floor: str | None,
                cuda_major: int | None, built_cuda: str | None = None) -> None:
    """Raise ImportError with incompatibility()'s message when there is one."""
    problem = incompatibility(torch_version, torch_cuda, fp8ext_version=fp8ext_version, torch_floor=torch_floor,
                              cuda_major=cuda_major, built_cuda=built_cuda)
    if problem:
        raise ImportError(problem)
