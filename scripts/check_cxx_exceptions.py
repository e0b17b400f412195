#!/usr/bin/env python3
"""Does a C++ exception thrown through a torch extension survive on this machine? Builds a one-line
load_inline extension whose TORCH_CHECK fails, with a few compiler settings, each in its own process, and
prints which ones raise RuntimeError and which crash. On the H200 image the default compiler (/opt/gcc) crashed
and CXX=/usr/bin/g++ raised (2026-11-29)."""
import os, subprocess, sys, textwrap
variants = {
    "default": ([], {}),
    "cxx20": (["-std=c++20"], {}),
    "g0_cxx20": (["-std=c++20", "-g0"], {}),
    "sysgcc_cxx20": (["-std=c++20"], {"CXX": "/usr/bin/g++"}),
}
child = textwrap.dedent('''
import sys, torch
from torch.utils.cpp_extension import load_inline
name, flags = sys.argv[1], sys.argv[2:]
src = "torch::Tensor f(torch::Tensor x){ TORCH_CHECK(x.numel() == 0, \\"boom \\", x.numel()); return x; }"
m = load_inline(name="probe_" + name, cpp_sources=src, functions=["f"], extra_cflags=flags, verbose=False,
                build_directory=None)
try:
    m.f(torch.ones(3))
except RuntimeError as e:
    print(name, "caught:", str(e).splitlines()[0])
''')
for name, (flags, env) in variants.items():
    if "CXX" in env and not os.path.exists(env["CXX"]):
        print(name, "skipped (no", env["CXX"], ")"); continue
    r = subprocess.run([sys.executable, "-c", child, name] + flags, env={**os.environ, **env},
                       capture_output=True, text=True, timeout=240)
    print(name, "rc", r.returncode, (r.stdout.strip() or r.stderr.strip()[-300:]))
