"""Compiles fp8ext's torch-facing C++ against the headers of the oldest torch it supports (TORCH_FLOOR).

The wheel is built with a newer torch and TORCH_TARGET_VERSION set to the floor, which keeps the binary within
the floor's stable ABI. It does not keep the sources within the floor's *headers*: a helper macro or function
that newer headers define (STABLE_TORCH_ERROR_CODE_CHECK, say) compiles against them and breaks a source build
on the floor's torch. This downloads the floor's torch wheel (`pip download`, no install), takes its include/
folder, and runs the host compiler in syntax-only mode over every .cpp file of the build with the build's flags.

    python tools/floor_headers_check.py [--wheel-dir DIR]

Exit 0 when every file compiles cleanly (warnings count as failures), 1 otherwise.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_env  # noqa: E402


def floor_wheel(wheel_dir: Path) -> Path:
    """The floor's torch wheel for this Python, downloaded into wheel_dir unless it is there already."""
    version = f"{build_env.TORCH_FLOOR}.0"
    found = sorted(wheel_dir.glob(f"torch-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"torch=={version}", "-d",
                        str(wheel_dir)], check=True)
        found = sorted(wheel_dir.glob(f"torch-{version}-*.whl"))
    if not found:
        raise SystemExit(f"floor_headers_check: pip download gave no torch-{version} wheel in {wheel_dir}")
    return found[0]


def extract_includes(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("torch/include/"):
                z.extract(name, dest)
    return dest / "torch" / "include"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel-dir", type=Path, default=Path(tempfile.gettempdir()) / "fp8ext-floor-torch")
    args = ap.parse_args(argv)
    args.wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel = floor_wheel(args.wheel_dir)

    cuda_home = build_env.find_cuda_home()
    with_cuda = cuda_home is not None
    sources = [s for s in build_env.sources(with_cuda) if s.suffix == ".cpp"]
    with tempfile.TemporaryDirectory() as tmp:
        torch_include = extract_includes(wheel, Path(tmp))
        includes = [*build_env.include_dirs(with_cuda), torch_include, Path(sysconfig.get_paths()["include"])]
        if with_cuda:
            includes.append(cuda_home / "include")
        defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C"]
        if with_cuda:
            defines.append("-DFP8EXT_WITH_CUDA=1")
        failed = 0
        for src in sources:
            cmd = ["g++", "-fsyntax-only", "-Wall", "-Werror", *build_env.cxx_flags(with_cuda), *defines,
                   *[f"-I{d}" for d in includes], str(src)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                failed += 1
                print(f"--- {src.relative_to(build_env.ROOT)}\n{r.stderr[-3000:]}")
    print(f"floor_headers_check: {len(sources) - failed} of {len(sources)} files compile against the headers of "
          f"{wheel.name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
