"""Shared test setup: GPU markers, and a fresh random seed per session (printed, reproducible on demand).

Tests marked `gpu` need an sm_90 GPU and a CUDA build of fp8ext; `multigpu` needs two GPUs. Elsewhere they are
skipped with the reason, and the CPU tests still run. Set FP8EXT_TEST_SEED to replay a session's inputs.
"""
import os
import random
import zlib

import pytest
import torch

import fp8ext

SEED = int(os.environ.get("FP8EXT_TEST_SEED", random.SystemRandom().randrange(2**31)))


def sm90_ready() -> bool:
    # The kernels the loaded library registered, not the build's JSON beside it: a library copied without that file
    # still has its kernels, and its GPU tests must run rather than skip.
    return (bool(fp8ext.kernel_names() or fp8ext.blockwise_kernel_names()) and torch.cuda.is_available()
            and torch.cuda.get_device_capability() == (9, 0))


def pytest_report_header(config):
    info = fp8ext.build_info()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    return [f"fp8ext {info['version']}: cuda build={info['cuda']}, kernels={len(info['registered_kernels'])}, "
            f"gpu={gpu}, torch={torch.__version__}, seed={SEED} (FP8EXT_TEST_SEED to replay)"]


def pytest_collection_modifyitems(config, items):
    gpu_ok = sm90_ready()
    multi_ok = gpu_ok and torch.cuda.device_count() >= 2
    skip_gpu = pytest.mark.skip(reason="needs an sm_90 GPU (H100/H200) and a CUDA build of fp8ext")
    skip_multi = pytest.mark.skip(reason="needs two sm_90 GPUs and a CUDA build of fp8ext")
    for item in items:
        if "multigpu" in item.keywords and not multi_ok:
            item.add_marker(skip_multi)
        elif "gpu" in item.keywords and not gpu_ok:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _seed(request):
    # Fresh per session, distinct per test, reproducible from the printed session seed.
    torch.manual_seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))
    yield


def pytest_terminal_summary(terminalreporter):
    # The README's command runs pytest with -q, which hides the header: the seed is repeated here so that a failing
    # run, in CI too, can be replayed.
    terminalreporter.write_line(f"fp8ext test seed: {SEED} (FP8EXT_TEST_SEED={SEED} replays this run's inputs)")
