"""Build of record for fp8ext: `pip install --no-build-isolation .` (or `-e .`).

Builds fp8ext._C with the sm_90a CUTLASS kernels when a CUDA toolkit is found (see tools/build_env.py for how
CUDA and CUTLASS are located), otherwise a CPU-only extension, and says which it built.
"""
import json
import os
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

from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402


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
        kernels = [Path(s).stem for s in sources if "/kernels/" in s]
        print(f"fp8ext: building with CUDA from {cuda_home}, CUTLASS {build_env._cutlass_version(cutlass_root)} "
              f"from {cutlass_from}, {len(kernels)} sm_90a kernels", flush=True)
        return CUDAExtension(
            name="fp8ext._C",
            sources=sources,
            include_dirs=include_dirs,
            define_macros=[("FP8EXT_WITH_CUDA", "1")],
            extra_compile_args={"cxx": build_env.CXX_FLAGS, "nvcc": build_env.NVCC_FLAGS},
        ), kernels
    reason = "FP8EXT_FORCE_CPU=1" if force_cpu else "no CUDA toolkit found (set CUDA_HOME to use one)"
    print(f"fp8ext: building a CPU-only extension: {reason}. torch.ops.fp8ext.scaled_mm will run its float32 "
          "reference path on CPU tensors only.", flush=True)
    return CppExtension(name="fp8ext._C", sources=sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": build_env.CXX_FLAGS}), []


ext, kernels = _extension()

# What was built, for fp8ext.build_info(); written into the package before setuptools copies it.
(ROOT / "python" / "fp8ext" / "_build_info.json").write_text(json.dumps({
    "cuda": with_cuda,
    "arch": "sm_90a" if with_cuda else None,
    "kernels": kernels,
    "subset": bool(os.environ.get("FP8EXT_KERNELS")),
}, indent=1) + "\n")

setup(
    packages=find_packages("python"),
    package_dir={"": "python"},
    package_data={"fp8ext": ["_build_info.json", "kernel_manifest.json"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    zip_safe=False,
)
