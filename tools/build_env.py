#!/usr/bin/env python3
"""Build facts shared by setup.py (the build of record) and CMakeLists.txt (IDE / compile_commands builds).

Finds the CUDA toolkit, the pip CUDA headers that torch's own headers include (cublas_v2.h, cusparse.h), and
CUTLASS; lists the sources and the compiler flags. setup.py imports this module; CMake runs
`python tools/build_env.py --cmake` and reads the `set(...)` lines it prints, so both builds use the same
sources and flags.

Environment switches:
    CUDA_HOME / CUDA_PATH   the CUDA toolkit (else /usr/local/cuda, else the one `nvcc` on PATH belongs to)
    CUTLASS_DIR             a CUTLASS checkout (else a populated third_party/cutlass, else the nvidia-cutlass
                            package)
    FP8EXT_FORCE_CPU=1      build without CUDA even if a toolkit is found
    FP8EXT_KERNELS=a,b,...  build only these kernels of csrc/sm90/kernels (names or fnmatch patterns); for
                            short edit-build-test loops. CI and releases build them all.
    FP8EXT_PTXAS_VERBOSE=1  print ptxas's resource usage (registers, spills) for every kernel
"""
from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
CUTLASS_VERSION = "4.2.0"
CUTLASS_PIP = "nvidia-cutlass==4.2.0.0"

VERSION = "0.1.0"  # the package version; setup.py appends +cu<CUDA major> or +cpu
# fp8ext._C uses only torch's stable ABI (torch/csrc/stable, torch/headeronly: C shims aoti_torch_* / torch_*), so
# one build runs on every torch from this floor on. TORCH_TARGET_VERSION (below) makes the headers offer only what
# the floor has, the wheel requires torch>=TORCH_FLOOR, and fp8ext's import checks it (python/fp8ext/_compat.py).
TORCH_FLOOR = "2.11"
# And only Python's limited API (abi3) from this version on: the wheel is tagged cp310-abi3.
PYTHON_FLOOR = "3.10"


class BuildError(RuntimeError):
    pass


def _is_cuda_home(path: Path) -> bool:
    return (path / "bin" / "nvcc").is_file() and (path / "include" / "cuda_runtime.h").is_file()


def find_cuda_home() -> Path | None:
    """The CUDA toolkit root, or None. A `nvcc` on PATH may be a wrapper script outside the toolkit, so each
    candidate is checked for bin/nvcc *and* include/cuda_runtime.h."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(os.path.realpath(nvcc)).parent.parent))
        # A wrapper script usually execs the real nvcc by absolute path: look inside it.
        try:
            text = Path(nvcc).read_text(errors="ignore")[:4096]
            for m in re.finditer(r"(/[^\s\"']+)/bin/nvcc", text):
                candidates.append(m.group(1))
        except OSError:
            pass
    candidates += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in candidates:
        if c and _is_cuda_home(Path(c)):
            return Path(c).resolve()
    return None


def pip_cuda_include_dirs() -> list[Path]:
    """Header folders of the pip-installed CUDA libraries (nvidia/cu13/include, nvidia/<lib>/include, ...).
    torch's CUDA headers include cublas_v2.h and cusparse.h, which a bare toolkit may not have."""
    dirs: list[Path] = []
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return dirs
    for base in map(Path, getattr(nvidia, "__path__", [])):
        for inc in sorted(base.glob("cu*/include")) + sorted(base.glob("*/include")):
            if inc.is_dir() and inc not in dirs and (any(inc.glob("cublas*.h")) or any(inc.glob("cusparse*.h"))):
                dirs.append(inc)
    return dirs


def _cutlass_version(root: Path) -> str | None:
    header = root / "include" / "cutlass" / "version.h"
    if not header.is_file():
        return None
    text = header.read_text(errors="ignore")
    parts = [re.search(rf"#define CUTLASS_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p.group(1) for p in parts) if all(parts) else None


def find_cutlass() -> tuple[Path, str]:
    """(root, where it came from). root has include/cutlass/cutlass.h and tools/util/include."""
    tried = []
    env = os.environ.get("CUTLASS_DIR")
    if env:
        root = Path(env).resolve()
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return root, "CUTLASS_DIR"
        tried.append(f"CUTLASS_DIR={env} (no include/cutlass/cutlass.h there)")
    sub = ROOT / "third_party" / "cutlass"
    if (sub / "include" / "cutlass" / "cutlass.h").is_file():
        return sub, "third_party/cutlass submodule"
    tried.append("third_party/cutlass (submodule not populated)")
    try:
        import cutlass_library  # shipped by the nvidia-cutlass wheel, headers under source/

        root = Path(cutlass_library.__file__).resolve().parent / "source"
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return root, f"nvidia-cutlass package ({root})"
        tried.append(f"nvidia-cutlass package at {root} (no headers)")
    except ImportError:
        tried.append("the nvidia-cutlass package (not installed)")
    raise BuildError(
        f"fp8ext needs the CUTLASS {CUTLASS_VERSION} headers and found none. Tried: " + "; ".join(tried) + ". "
        f"Fix it with one of: `pip install {CUTLASS_PIP}`, `git submodule update --init third_party/cutlass`, "
        "or `export CUTLASS_DIR=/path/to/cutlass` (a checkout of the v4.2.0 tag)."
    )


def kernel_sources() -> list[Path]:
    """The kernel files to build: csrc/sm90/kernels (row-wise) and csrc/sm90/blockwise_kernels (block-scaled),
    or those whose names match FP8EXT_KERNELS."""
    all_kernels = sorted((CSRC / "sm90" / "kernels").glob("*.cu")) + sorted(
        (CSRC / "sm90" / "blockwise_kernels").glob("*.cu"))
    wanted = os.environ.get("FP8EXT_KERNELS", "").strip()
    if not wanted:
        return all_kernels
    patterns = [p.strip() for p in wanted.split(",") if p.strip()]
    chosen = [k for k in all_kernels if any(fnmatch.fnmatch(k.stem, p) for p in patterns)]
    if not chosen:
        raise BuildError(f"FP8EXT_KERNELS={wanted!r} matches no kernel in csrc/sm90/kernels or blockwise_kernels")
    return chosen


def sources(with_cuda: bool) -> list[Path]:
    # The autotune cache file's I/O is plain C++ and in every build: the CPU-only one reads and tests it too.
    # quantize_{rowwise,blockwise}_op.cpp (their checks and CPU paths) and linear_checks.cpp too; their CUDA entries
    # and the quantize kernels only with CUDA.
    srcs = [CSRC / "bindings.cpp", CSRC / "internal_ops.cpp", CSRC / "op_errors.cpp", CSRC / "scaled_mm_checks.cpp",
            CSRC / "scaled_mm_cpu.cpp",
            CSRC / "sm90" / "autotune_cache.cpp", CSRC / "quantize_rowwise_op.cpp", CSRC / "quantize_blockwise_op.cpp",
            CSRC / "linear_checks.cpp"]
    if with_cuda:
        srcs += [CSRC / "quantize_rowwise_cuda.cpp", CSRC / "quantize_rowwise.cu",
                 CSRC / "quantize_blockwise_cuda.cpp", CSRC / "quantize_blockwise.cu"]
        srcs += [CSRC / "scaled_mm_cuda.cpp", CSRC / "sm90" / "kernel_registry.cpp", CSRC / "sm90" / "dispatch.cpp",
                 CSRC / "sm90" / "cost_model.cpp", CSRC / "sm90" / "autotune.cpp",
                 CSRC / "sm90" / "blockwise_registry.cpp", CSRC / "sm90" / "blockwise_dispatch.cpp"]
        # The hand-written decode kernels: every gemv_*.cu, the files generate_kernels.decode_kernel_names() reads.
        srcs += sorted((CSRC / "sm90").glob("gemv_*.cu"))
        srcs += kernel_sources()
    return srcs


# The torch-facing C++ (the .cpp files; no .cu file includes torch or Python) is built on PyTorch's stable ABI
# for the oldest torch fp8ext supports, and on Python's limited API (abi3) for Python 3.10 on: one binary serves
# every later torch and Python.


def torch_target_version(floor: str = TORCH_FLOOR) -> str:
    """TORCH_TARGET_VERSION for torch `floor`: "2.11" -> "0x020B000000000000".

    torch/headeronly/version.h: "Indicates the ABI version of LibTorch as a single uint64. [ MAJ ][ MIN ][ PATCH ]
    [ ABI TAG (5 bytes) ]", i.e. TORCH_ABI_VERSION = MAJOR << 56 | MINOR << 48 | PATCH << 40 | ABI_TAG; and
    torch/csrc/stable/version.h: "Target a specific stable version (major.minor) (e.g. PyTorch 2.9): Pass a
    compiler flag -DTORCH_TARGET_VERSION=0x0209000000000000". Patch and tag stay 0.
    """
    major, minor = (int(x) for x in floor.split(".")[:2])
    return f"0x{(major << 56) | (minor << 48):016X}"


def py_limited_api(floor: str = PYTHON_FLOOR) -> str:
    """Py_LIMITED_API for Python `floor`: "3.10" -> "0x030A0000". Spelt as torch.utils.cpp_extension spells the
    -DPy_LIMITED_API it adds itself to py_limited_api extensions (its min_supported_cpython), so that the two
    definitions are identical and the compilers do not warn that the macro is redefined."""
    major, minor = (int(x) for x in floor.split(".")[:2])
    return f"0x{major:02X}{minor:02X}0000"


# For both compilers. With TORCH_TARGET_VERSION set, torch's ATen, c10 and torch/csrc/api headers refuse to be
# included (#error), and torch/csrc/stable offers only the shims the floor has.
STABLE_ABI_FLAGS = [f"-DTORCH_TARGET_VERSION={torch_target_version()}", f"-DPy_LIMITED_API={py_limited_api()}"]
# torch/csrc/inductor/aoti_torch/c/shim.h declares aoti_torch_get_current_cuda_stream (and the CUDA stream guard)
# only under `#ifdef USE_CUDA`, torch/csrc/stable/c/shim.h its torch_*cuda* shims too, and torch.utils.cpp_extension
# does not define it: CUDA builds do.
CUDA_DEFINES = ["-DUSE_CUDA"]
CXX_FLAGS = ["-O3", "-DNDEBUG", "-std=c++20", *STABLE_ABI_FLAGS]
NVCC_FLAGS = [
    "-O3",
    "-DNDEBUG",
    "-std=c++20",
    *STABLE_ABI_FLAGS,
    *CUDA_DEFINES,
    "-lineinfo",
    "-gencode", "arch=compute_90a,code=sm_90a",  # wgmma and setmaxnreg exist only in the sm_90a target
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    # torch defines these to keep its own half types unambiguous; CUTLASS wants the CUDA operators back.
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1",
    # CUTLASS's sm100 headers (pulled in by the collective builders) trip C++20's deprecated implicit capture of
    # `this` (#2908) hundreds of times; silence that one so real warnings (ptxas C7510, spills) stay visible.
    "-diag-suppress=2908",
]
if os.environ.get("FP8EXT_PTXAS_VERBOSE") == "1":
    NVCC_FLAGS.append("-Xptxas=-v")  # registers, spills and stack per kernel, in the build log


def cxx_flags(with_cuda: bool) -> list[str]:
    """The host compiler's flags: CXX_FLAGS, and USE_CUDA in a CUDA build (its .cpp files call the CUDA shims)."""
    return CXX_FLAGS + (CUDA_DEFINES if with_cuda else [])


def cuda_version(cuda_home: Path | None) -> str | None:
    """The toolkit's CUDA version ("13.0"), from include/cuda.h (CUDA_VERSION 13000), else `nvcc --version`."""
    if cuda_home is None:
        return None
    try:
        m = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", (cuda_home / "include" / "cuda.h").read_text(errors="ignore"))
        if m:
            v = int(m.group(1))
            return f"{v // 1000}.{v % 1000 // 10}"
    except OSError:
        pass
    try:
        out = subprocess.run([str(cuda_home / "bin" / "nvcc"), "--version"], capture_output=True, text=True).stdout
    except OSError:
        return None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def cuda_major(cuda_home: Path | None) -> int | None:
    v = cuda_version(cuda_home)
    return int(v.split(".")[0]) if v else None


def local_version(with_cuda: bool, cuda_home: Path | None) -> str:
    """VERSION+cu<major> for a CUDA build (the CUDA major it links and needs torch built for), VERSION+cpu else."""
    if not with_cuda:
        return f"{VERSION}+cpu"
    major = cuda_major(cuda_home)
    if major is None:
        raise BuildError(f"cannot tell the CUDA version of the toolkit at {cuda_home} (no CUDA_VERSION in "
                         "include/cuda.h, no `release X.Y` from bin/nvcc --version)")
    return f"{VERSION}+cu{major}"


def include_dirs(with_cuda: bool) -> list[Path]:
    dirs = [CSRC]
    if with_cuda:
        cutlass_root, _ = find_cutlass()
        dirs += [cutlass_root / "include", cutlass_root / "tools" / "util" / "include"]
        dirs += pip_cuda_include_dirs()
    return dirs


def _cmake() -> int:
    """Print CMake set() lines with the same facts setup.py uses."""
    cuda_home = find_cuda_home()
    with_cuda = cuda_home is not None and os.environ.get("FP8EXT_FORCE_CPU") != "1"
    facts = {
        "FP8EXT_WITH_CUDA": "ON" if with_cuda else "OFF",
        "FP8EXT_CUDA_HOME": str(cuda_home or ""),
        "FP8EXT_SOURCES": [str(s) for s in sources(with_cuda)],
        "FP8EXT_INCLUDE_DIRS": [str(d) for d in include_dirs(with_cuda)],
        "FP8EXT_VERSION": local_version(with_cuda, cuda_home),
        "FP8EXT_TORCH_FLOOR": TORCH_FLOOR,
        "FP8EXT_CXX_FLAGS": cxx_flags(with_cuda),
        "FP8EXT_NVCC_FLAGS": NVCC_FLAGS,
    }
    for key, value in facts.items():
        if isinstance(value, list):
            value = ";".join(value)
        print(f'set({key} "{value}")')
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--cmake"]:
        try:
            sys.exit(_cmake())
        except BuildError as e:
            print(f"build_env: {e}", file=sys.stderr)
            sys.exit(1)
    if sys.argv[1:] == ["--json"]:
        home = find_cuda_home()
        print(json.dumps({"cuda_home": str(home or ""), "cutlass": str(find_cutlass()[0]),
                          "pip_cuda_include_dirs": [str(d) for d in pip_cuda_include_dirs()]}, indent=2))
        sys.exit(0)
    print(__doc__)
