"""Stress of the block-scaled cluster kernels: many launches at a K that wraps the shared-memory pipeline many
times, each output bit for bit equal to the one-CTA kernel of the same tile and mainloop.

In a cluster only one thread of a consumer warpgroup releases a pipeline stage, so the other threads' loads of the
stage's scales are ordered before the producer refills it by a warpgroup barrier alone
(csrc/sm90/common/overlap_k_loop.cuh, "Releasing a stage in a cluster"). Without it a late load would read the next
K tile's scales: a wrong result with no error. A cluster changes which SM computes a tile, not the arithmetic, so
any difference from the one-CTA twin is such a defect. Fresh operands every batch; the mismatches are counted on the
device, with one host sync a batch.
"""
import re

import pytest
import torch

import fp8ext
from fp8ext.testing import random_blockwise_operands

LAUNCHES = 10_000  # per cluster kernel
BATCHES = 10  # fresh operands per batch
# K = 7168 is 56 K tiles, many times any pipeline's stages; 1024 x 2048 is 128 output tiles (about one wave), and
# the second shape's 512 tiles make each persistent CTA run several tiles through the same pipeline.
SHAPES = [(1024, 2048, 7168), (2048, 4096, 7168)]


def _cluster_kernels() -> list[str]:
    try:
        names = fp8ext.blockwise_kernel_names()
    except Exception:  # noqa: BLE001 - a CPU-only build has none; the test is skipped there anyway
        return []
    return [n for n in names if re.search(r"_c(\d)x(\d)_", n) and not re.search(r"_c1x1_", n)]


def _one_cta_twin(name: str) -> str:
    return re.sub(r"_c\dx\d_", "_c1x1_", name)


@pytest.mark.gpu
def test_the_build_has_cluster_kernels_with_one_cta_twins():
    names = _cluster_kernels()
    assert names, "no block-scaled cluster kernel in this build"
    for name in names:
        assert _one_cta_twin(name) in fp8ext.blockwise_kernel_names(), name


@pytest.mark.gpu
@pytest.mark.parametrize("name", _cluster_kernels() or ["<none built>"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_cluster_kernel_equals_its_one_cta_twin_over_many_launches(name, M, N, K):
    twin = _one_cta_twin(name)
    per_batch = LAUNCHES // len(SHAPES) // BATCHES
    launches = 0
    for batch in range(BATCHES):
        a, b, sa, sb = random_blockwise_operands(M, N, K, device="cuda")
        with fp8ext.force_kernel(twin):
            ref = fp8ext.scaled_mm(a, b, sa, sb)
        mismatched = torch.zeros((), dtype=torch.int64, device="cuda")
        with fp8ext.force_kernel(name):
            for _ in range(per_batch):
                out = fp8ext.scaled_mm(a, b, sa, sb)
                # Compare the bits: NaN != NaN would count a NaN both kernels wrote as a difference.
                mismatched += (out.view(torch.int16) != ref.view(torch.int16)).sum()
                launches += 1
        bad = int(mismatched)  # the batch's one host sync
        assert bad == 0, f"{name} {M}x{N}x{K}: {bad} elements differ from {twin} in batch {batch}"
    assert launches == per_batch * BATCHES
