"""Build of record for fp8ext: `pip install --no-build-isolation .` (or `-e .`), or the wheel:
`pip wheel --no-build-isolation --no-deps -w dist .`.

Builds fp8ext._C with the sm_90a CUTLASS kernels when a CUDA toolkit is found (see tools/build_env.py for how
CUDA and CUTLASS are located), otherwise a CPU-only extension, and says which it built.

fp8ext._C uses only PyTorch's stable ABI and Python's limited API, so the wheel is tagged cp310-abi3 and runs
on every torch >= build_env.TORCH_FLOOR built for the same CUDA major as the toolkit used here: its version is
0.1.0+cu<major> (0.1.0+cpu without CUDA) and it requires torch>=TORCH_FLOOR.
"""
import json
import os
import platform
import sys
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import build_env  # noqa: E402

cuda_home = build_env.find_cuda_home()
force_cpu = os.environ.get("FP8EXT_FORCE_CPU") == "1"
with_cuda = cuda_home is not None and not force_cpu
if with_cuda:
    # torch.utils.cpp_extension reads CUDA_HOME when it is imported: set it first, so nobody has to export it.
    os.environ["CUDA_HOME"] = str(cuda_home)

import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402

try:
    version = build_env.local_version(with_cuda, cuda_home)
except build_env.BuildError as e:
    sys.exit(f"fp8ext build error: {e}")
cuda_major = build_env.cuda_major(cuda_home) if with_cuda else None
# The wheel's tag, cp310-abi3: Python's limited API from PYTHON_FLOOR on.
abi3_tag = "cp" + build_env.PYTHON_FLOOR.replace(".", "")


def _rel(paths):
    return [os.path.relpath(p, ROOT) for p in paths]


def _extension():
    try:
        include_dirs = [str(d) for d in build_env.include_dirs(with_cuda)]
        sources = _rel(build_env.sources(with_cuda))
    except build_env.BuildError as e:
        sys.exit(f"fp8ext build error: {e}")
    if with_cuda:
        cutlass_root, cutlass_from = build_env.find_cutlass()
        # The row-wise kernels built, by name (what fp8ext.build_info() lists as "kernels").
        kernels = [Path(s).stem for s in sources if Path(s).parent == build_env.ROWWISE_KERNELS.relative_to(ROOT)]
        print(f"fp8ext: building with CUDA from {cuda_home}, CUTLASS {build_env._cutlass_version(cutlass_root)} "
              f"from {cutlass_from}, {len(kernels)} sm_90a kernels", flush=True)
        # py_limited_api: the abi3 file name (_C.abi3.so), and no libtorch_python in the link.
        return CUDAExtension(
            name="fp8ext._C",
            sources=sources,
            include_dirs=include_dirs,
            define_macros=[("FP8EXT_WITH_CUDA", "1")],
            extra_compile_args={"cxx": build_env.cxx_flags(True), "nvcc": build_env.NVCC_FLAGS},
            py_limited_api=True,
        ), kernels
    reason = "FP8EXT_FORCE_CPU=1" if force_cpu else "no CUDA toolkit found (set CUDA_HOME to use one)"
    print(f"fp8ext: building a CPU-only extension: {reason}. torch.ops.fp8ext.scaled_mm will run its float32 "
          "reference path on CPU tensors only.", flush=True)
    return CppExtension(name="fp8ext._C", sources=sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": build_env.cxx_flags(False)}, py_limited_api=True), []


ext, kernels = _extension()

# What was built, for fp8ext.build_info() and the check fp8ext's import makes (python/fp8ext/_compat.py);
# written into the package before setuptools copies it.
(ROOT / "python" / "fp8ext" / "_build_info.json").write_text(json.dumps({
    "cuda": with_cuda,
    "arch": "sm_90a" if with_cuda else None,
    "kernels": kernels,
    "subset": bool(os.environ.get("FP8EXT_KERNELS")),
    "version": version,
    "cuda_major": cuda_major,
    "torch_floor": build_env.TORCH_FLOOR,
    "built_with": {"torch": torch.__version__, "python": platform.python_version(),
                   "cuda": build_env.cuda_version(cuda_home) if with_cuda else None},
}, indent=1) + "\n")

setup(
    version=version,
    # numpy: fp8ext.bench and fp8ext.testing. torch: any build of TORCH_FLOOR or later; for a +cu<major> wheel it
    # must be built for that CUDA major, which pip cannot express: fp8ext's import checks it and says what to install.
    install_requires=[f"torch>={build_env.TORCH_FLOOR}", "numpy"],
    packages=find_packages("python"),
    package_dir={"": "python"},
    package_data={"fp8ext": ["_build_info.json", "kernel_manifest.json"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    options={"bdist_wheel": {"py_limited_api": abi3_tag}},
    zip_safe=False,
)
