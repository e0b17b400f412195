#!/usr/bin/env python3
"""Does an extension stay inside PyTorch's stable ABI? `python3 tools/abi_audit.py path/to/_C.abi3.so`

fp8ext._C may call torch only through the stable ABI's C functions (aoti_torch_*, torch_*), so that one build
loads into every torch from its floor on. An undefined symbol of libtorch's C++ API (at::, c10::, torch::, caffe2::,
libtorch_python's THP*) would tie it to the torch it was built against, and so would a DT_NEEDED on
libtorch_python. Everything else is allowed: the stable C shims, the Python C API (Py*, _Py*), the CUDA runtime and
driver (cuda*, cu*), libc, libm, libstdc++ and libgcc.

Exit status 0 with a one-line summary, 1 with the offending symbols listed (2: the file cannot be read).
Needs binutils (nm, c++filt, readelf).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

# Namespaces of libtorch's C++ API (outside the stable ABI).
DENIED_NAMESPACES = ("at::", "c10::", "torch::", "caffe2::")
# libtorch_python's C++ functions in the global namespace (THPVariable_Wrap, THPDtypeType, ...).
DENIED_PREFIXES = ("THP",)
DENIED_LIBRARIES = ("libtorch_python",)
# What the demangler puts before the entity a special symbol belongs to.
_SPECIAL = re.compile(r"^(?:vtable for |VTT for |construction vtable for |typeinfo for |typeinfo name for |"
                      r"guard variable for |(?:non-)?virtual thunk to |covariant return thunk to |"
                      r"TLS init function for |TLS wrapper function for |reference temporary #\d+ for )+")
# The same namespaces in the mangled name: the entity's outermost scope (_ZN3c10..., _ZNK2at..., _ZTVN5torch...,
# _ZN2at3fooIfEEvv for `void at::foo<float>()`, whose demangled form starts with its return type).
_MANGLED = re.compile(r"^_Z(?:T[VTISHW]|GV|Th[n\d_]*|Tv[n\d_]*|Tc[hv\dn_]*)?N?[rVKRO]*(?:3c10|2at|5torch|6caffe2)")


def undefined_symbols(so: Path) -> list[tuple[str, str]]:
    """(mangled, demangled) of every undefined dynamic symbol of `so`, without the @VERSION suffix."""
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(f"nm -D --undefined-only {so}: {out.stderr.strip() or out.returncode}")
    names = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts:
            names.append(parts[-1].split("@")[0])
    if not names:
        return []
    demangled = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True,
                               check=True).stdout.splitlines()
    if len(demangled) != len(names):
        raise OSError("c++filt did not return one line per symbol")
    return list(zip(names, demangled))


def needed_libraries(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(f"readelf -d {so}: {out.stderr.strip() or out.returncode}")
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)


def is_denied(mangled: str, demangled: str) -> bool:
    entity = _SPECIAL.sub("", demangled)
    return (entity.startswith(DENIED_NAMESPACES) or entity.startswith(DENIED_PREFIXES)
            or bool(_MANGLED.match(mangled)))


def audit(so: Path) -> tuple[list[str], str]:
    """(offenders, summary): the undefined symbols and needed libraries outside the stable ABI, and a summary
    line."""
    symbols = undefined_symbols(so)
    offenders = [f"{d}  [{m}]" if d != m else m for m, d in symbols if is_denied(m, d)]
    offenders += [f"DT_NEEDED {lib}" for lib in needed_libraries(so) if lib.startswith(DENIED_LIBRARIES)]
    stable = sum(1 for m, _ in symbols if m.startswith(("aoti_torch_", "torch_")))
    summary = (f"{so.name}: {len(symbols)} undefined symbols, {stable} of them stable-ABI C shims "
               f"(aoti_torch_*, torch_*), none from libtorch's C++ API ({', '.join(DENIED_NAMESPACES)} THP*) "
               "and no libtorch_python")
    return offenders, summary


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    so = Path(argv[0])
    try:
        offenders, summary = audit(so)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"abi_audit: {e}", file=sys.stderr)
        return 2
    if offenders:
        print(f"abi_audit: {so} uses {len(offenders)} symbol(s) outside PyTorch's stable ABI:")
        for o in offenders:
            print(f"  {o}")
        return 1
    print(f"abi_audit: ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
