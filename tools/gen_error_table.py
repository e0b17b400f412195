#!/usr/bin/env python3
"""Write docs/errors.md from tests/validation_cases.py: every input fp8ext.scaled_mm rejects, with its message.

    python tools/gen_error_table.py

tests/test_validation.py checks that each case raises exactly the listed message (eager, and traced by the fake
implementation, torch.compile and torch.export) and that this page is exactly what this script writes.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from validation_cases import CASES, K, M, N  # noqa: E402

HEADER = f"""# Errors raised by fp8ext.scaled_mm

Every argument is checked before anything is allocated or launched. A rejected call raises `RuntimeError`
whose first line names the argument, what was expected and what was given. The examples below use
M = {M}, N = {N}, K = {K}; each row is a test in `tests/test_validation.py` (generated from
`tests/validation_cases.py` by `tools/gen_error_table.py`). Rows marked GPU need tensors on a CUDA device.
Traced calls (`torch.compile`, `torch.export`, `FakeTensorMode`) raise the same messages while tracing: the fake
implementation runs the same C++ checks on the tensors' metadata.

| # | rejected input | message |
|---|---|---|
"""


def render() -> str:
    """The text of docs/errors.md."""
    rows = []
    for i, case in enumerate(CASES, 1):
        where = " (GPU)" if case.gpu_only else ""
        rows.append(f"| {i} | {case.what}{where} | `{case.message}` |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> int:
    text = render()
    (ROOT / "docs" / "errors.md").write_text(text)
    print(f"docs/errors.md: {text.count(chr(10) + '| ') - 1} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
