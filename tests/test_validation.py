"""Every bad input raises before anything runs, with the exact message of tests/validation_cases.py (which is
also the source of docs/errors.md)."""
from pathlib import Path

import pytest
import torch

import fp8ext
from validation_cases import CASES

DOCS = Path(__file__).resolve().parent.parent / "docs" / "errors.md"


def _raise_message(case, device):
    args, kwargs = case.build(device)
    with pytest.raises(RuntimeError) as info:
        fp8ext.scaled_mm(*args, **kwargs)
    return str(info.value).splitlines()[0]


@pytest.mark.parametrize("case", [c for c in CASES if not c.gpu_only], ids=lambda c: c.id)
def test_rejected_on_cpu(case):
    assert _raise_message(case, "cpu") == case.message


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rejected_on_gpu(case):
    torch.cuda.synchronize()
    assert _raise_message(case, "cuda") == case.message
    torch.cuda.synchronize()  # nothing was left half-launched


def test_error_table_lists_every_message():
    text = DOCS.read_text()
    missing = [c.id for c in CASES if c.message not in text]
    assert not missing, f"docs/errors.md is stale (run scripts/gen_error_table.py); missing: {missing}"


def test_case_ids_unique_and_count():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 40
