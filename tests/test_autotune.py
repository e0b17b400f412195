"""The opt-in autotuner (fp8ext.autotune): its cache file, and on the GPU the tuning, the remembered choice, and
the file read back by a new process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fp8ext
from fp8ext.autotune import FORMAT, read_cache
from fp8ext.testing import check_against_reference, random_operands

ROOT = Path(__file__).resolve().parent.parent
needs_autotuner = pytest.mark.skipif(not hasattr(torch.ops.fp8ext, "_autotune_configure"),
                                     reason="a CPU-only build has no autotuner")


@pytest.fixture(autouse=True)
def _autotune_off():
    yield
    if hasattr(torch.ops.fp8ext, "_autotune_configure"):
        fp8ext.autotune(False)


def write(path, data):
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize("content", ["{not json", [], {"format": "other", "entries": {}},
                                     {"format": FORMAT}, {"format": FORMAT, "entries": {"b": 3}}],
                         ids=["not-json", "list", "wrong-format", "no-entries", "non-string-kernel"])
def test_a_file_that_is_not_a_cache_is_refused(tmp_path, content):
    path = write(tmp_path / "cache.json", content)
    with pytest.raises(ValueError, match="fp8ext.autotune: .*cache.json"):
        read_cache(path)


@needs_autotuner
def test_loading_a_cache_file_remembers_its_entries(tmp_path):
    entries = {"Some GPU/132sm|m<=16|n=4096|k=4096|bf16|fast|a=e4m3|b=e4m3": "swap_pp_64x32x128_c1x1_fast_bf16"}
    path = write(tmp_path / "cache.json", {"format": FORMAT, "entries": entries})
    fp8ext.autotune(True, cache_file=path)
    assert fp8ext.autotune_entries().items() >= entries.items()


@needs_autotuner
def test_the_cache_file_can_come_from_the_environment(tmp_path, monkeypatch):
    entries = {"Env GPU/132sm|m<=1|n=16|k=16|bf16|fast|a=e4m3|b=e4m3": "gemv_m4_precise_bf16"}
    monkeypatch.setenv("FP8EXT_AUTOTUNE_CACHE", str(write(tmp_path / "env.json", {"format": FORMAT,
                                                                                   "entries": entries})))
    fp8ext.autotune(True)
    assert fp8ext.autotune_entries().items() >= entries.items()


# ---- on the GPU ----

@pytest.mark.gpu
def test_first_call_tunes_and_writes_the_file(tmp_path):
    path = tmp_path / "tuned.json"
    fp8ext.autotune(True, cache_file=path)
    M, N, K = 48, 2736, 1040
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    before = set(fp8ext.autotune_entries())
    out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what="first, tuned call")
    new = set(fp8ext.autotune_entries()) - before
    assert len(new) == 1
    (bucket,) = new
    assert "|m<=64|n=2736|k=1040|bf16|fast|" in bucket
    kernel = fp8ext.autotune_entries()[bucket]
    assert kernel in fp8ext.kernel_names()
    assert read_cache(path)[bucket] == kernel
    # the same bucket (M=33..64) is not tuned again, and runs the remembered kernel
    assert fp8ext.selected_kernel(33, N, K) == kernel
    a2, b2, sa2, sb2 = random_operands(40, N, K, device="cuda")
    out2 = fp8ext.scaled_mm(a2, b2, sa2, sb2, use_fast_accum=True)
    check_against_reference(out2, a2, b2, sa2, sb2, use_fast_accum=True, what="second call of the bucket")
    assert set(fp8ext.autotune_entries()) - before == new


@pytest.mark.gpu
def test_a_new_process_uses_the_cache_file(tmp_path):
    # Plant a choice the heuristic would not make (a precise kernel for a fast call) and check that another
    # process, configured from the environment, runs it without tuning.
    M, N, K = 300, 2736, 1040
    fp8ext.autotune(True)
    a, b, sa, sb = random_operands(M, N, K, device="cuda")
    before = set(fp8ext.autotune_entries())
    fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)
    (bucket,) = set(fp8ext.autotune_entries()) - before
    planted = next(k for k in fp8ext.kernel_names() if k.endswith("_precise_bf16") and not k.startswith("gemv")
                   and k != fp8ext.selected_kernel(M, N, K))
    path = write(tmp_path / "planted.json", {"format": FORMAT, "entries": {bucket: planted}})
    code = ("import torch, fp8ext\n"
            f"print('selected', fp8ext.selected_kernel({M}, {N}, {K}))\n"
            "from fp8ext.testing import random_operands, check_against_reference\n"
            f"a, b, sa, sb = random_operands({M}, {N}, {K}, device='cuda')\n"
            "out = fp8ext.scaled_mm(a, b, sa, sb, use_fast_accum=True)\n"
            "check_against_reference(out, a, b, sa, sb, use_fast_accum=True, what='planted')\n"
            "print('entries', len(fp8ext.autotune_entries()))\n")
    env = {**os.environ, "FP8EXT_AUTOTUNE": "1", "FP8EXT_AUTOTUNE_CACHE": str(path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"selected {planted}" in r.stdout and "entries 1" in r.stdout, r.stdout
