"""The opt-in autotuner (fp8ext.autotune): its cache file (a damaged one is ignored with one warning; concurrent
writers keep each other's buckets), and on the GPU the tuning, the remembered choice, and the file read back by
a new process."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fp8ext
from fp8ext.autotune import FORMAT, _load_cache, read_cache
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


A_CACHE = json.dumps({"format": FORMAT, "entries": {"GPU/132sm|m<=16|n=4096|k=4096|bf16|fast|a=e4m3|b=e4m3":
                                                     "swap_pp_64x32x128_c1x1_fast_bf16"}}, indent=2)

# Each damaged file a crash, a full disk, a shared PID or a wrong setting leaves, and the reason given for it.
DAMAGED = {
    "truncated": (lambda p: p.write_text(A_CACHE[: len(A_CACHE) // 2]), "ends in the middle of the JSON document"),
    "empty": (lambda p: p.write_bytes(b""), "it is empty"),
    "nul-filled": (lambda p: p.write_bytes(b"\0" * 4096), "it holds NUL bytes"),
    "binary": (lambda p: p.write_bytes(bytes(range(256)) * 4), "it holds NUL bytes"),
    "binary-no-nul": (lambda p: p.write_bytes(b"\xff\xfe{\x80\x81" * 64), "it is not UTF-8 text"),
    "directory": (lambda p: p.mkdir(), "it is a directory"),
    "other-json": (lambda p: p.write_text('{"format": "other", "entries": {}}'), "not an fp8ext autotune cache"),
    "trailing-garbage": (lambda p: p.write_text(A_CACHE + "}"), "more text after the JSON document"),
}


@pytest.mark.parametrize("case", list(DAMAGED), ids=list(DAMAGED))
def test_a_damaged_cache_is_ignored_with_one_warning(tmp_path, case):
    path = tmp_path / "cache.json"
    make, reason = DAMAGED[case]
    make(path)
    with pytest.raises(ValueError, match=f"cache file {path} cannot be used: .*{reason}"):
        read_cache(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _load_cache(str(path)) == {}
    assert [str(w.message) for w in caught if "fp8ext.autotune" in str(w.message)] == [
        f"{read_error(path)}; ignoring it (the next tuned bucket replaces it)"]


def read_error(path):
    with pytest.raises(ValueError) as info:
        read_cache(path)
    return str(info.value)


def test_a_missing_cache_file_is_no_error(tmp_path):
    assert read_cache(tmp_path / "nothing.json") == {}


@needs_autotuner
@pytest.mark.parametrize("case", list(DAMAGED), ids=list(DAMAGED))
def test_import_with_a_damaged_cache_warns_and_goes_on(tmp_path, case):
    # FP8EXT_AUTOTUNE=1 loads the file at import: a damaged one must not stop the program.
    path = tmp_path / "cache.json"
    DAMAGED[case][0](path)
    code = ("import warnings; warnings.simplefilter('always')\n"
            "import fp8ext\n"
            "print('entries', len(fp8ext.autotune_entries()))\n")
    env = {**os.environ, "FP8EXT_AUTOTUNE": "1", "FP8EXT_AUTOTUNE_CACHE": str(path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "entries 0" in r.stdout
    assert r.stderr.count(f"fp8ext.autotune: the cache file {path} cannot be used: ") == 1, r.stderr
    assert DAMAGED[case][1] in r.stderr


@needs_autotuner
def test_import_with_a_fifo_as_cache_file_warns_and_goes_on(tmp_path):
    # Opening a FIFO for reading waits for a writer, and the file was opened before it was checked: import blocked
    # forever. Now it is refused like any other file that is not a cache.
    path = tmp_path / "cache.json"
    os.mkfifo(path)
    code = "import fp8ext; print('entries', len(fp8ext.autotune_entries()))"
    env = {**os.environ, "FP8EXT_AUTOTUNE": "1", "FP8EXT_AUTOTUNE_CACHE": str(path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "entries 0" in r.stdout
    assert f"the cache file {path} cannot be used: it is not a regular file" in r.stderr


def cache_write(path, entries):
    """The tuner's own writer (csrc/sm90/autotune/autotune_cache.cpp): merge `entries` into the file."""
    error = torch.ops.fp8ext._autotune_cache_write(str(path), list(entries), list(entries.values()))
    assert error == "", error


def test_a_write_merges_with_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "cache.json"
    cache_write(path, {"b1": "k1", 'odd "bucket"\\\n\u00e9\U0001f600': "k2"})
    cache_write(path, {"b3": "k3", "b1": "k1-new"})  # another writer's map: lacks the first write's second bucket
    assert read_cache(path) == {"b1": "k1-new", 'odd "bucket"\\\n\u00e9\U0001f600': "k2", "b3": "k3"}
    assert json.loads(path.read_text())["entries"] == read_cache(path)  # plain JSON for anyone else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "cache.json.lock"]


def test_a_write_replaces_a_damaged_file(tmp_path):
    path = tmp_path / "cache.json"
    path.write_bytes(b"\0" * 100)
    cache_write(path, {"b": "k"})
    assert read_cache(path) == {"b": "k"}


def test_a_write_that_cannot_rename_says_why(tmp_path):
    path = tmp_path / "cache.json"
    path.mkdir()
    error = torch.ops.fp8ext._autotune_cache_write(str(path), ["b"], ["k"])
    assert error.startswith(f"cannot rename {path}.tmp.") and error.endswith(f"to {path}: Is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.json", "cache.json.lock"]


def test_two_processes_writing_one_file_keep_each_others_buckets(tmp_path):
    # Each process rewrites its whole map after every new bucket, as the tuner does; without the merge under
    # the lock the file ends with one process's buckets, and with a shared temporary name it can end garbled.
    path = tmp_path / "shared.json"
    writes = 60
    code = ("import sys, torch, fp8ext\n"
            "path, tag = sys.argv[1], sys.argv[2]\n"
            "mine = {}\n"
            f"for i in range({writes}):\n"
            "    mine[f'{tag}-{i}'] = f'kernel-{tag}'\n"
            "    err = torch.ops.fp8ext._autotune_cache_write(path, list(mine), list(mine.values()))\n"
            "    assert err == '', err\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), tag]) for tag in ("p", "q")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    entries = read_cache(path)
    assert entries == {f"{tag}-{i}": f"kernel-{tag}" for tag in ("p", "q") for i in range(writes)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json", "shared.json.lock"]


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
    # M rounded up to the family's tile boundary (16 up to 128), the exact N and K, and the device and software
    assert "|m<=48|n=2736|k=1040|bf16|fast|" in bucket and "sm/cuda" in bucket and "/fp8ext" in bucket
    kernel = fp8ext.autotune_entries()[bucket]  # the kernel with the scheduler options it was timed with
    assert kernel.split("@")[0] in fp8ext.kernel_names()
    assert read_cache(path)[bucket] == kernel
    # the same bucket (M=33..48) is not tuned again, and runs the remembered kernel
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
