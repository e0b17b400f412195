"""The suites of `python -m fp8ext.bench`, by name.

A suite is a function of the parsed command line that measures and returns a JSON-able record: its "method" (how
it measured), "summary" (what the CLI prints and what a reader looks at first) and "rows", plus any field of its
own. The CLI puts the common header (suite_record(): commit, GPU, torch, CUDA, date, suite, host) in front,
prints the summary and writes the whole to --json.

    @register_suite("host", help="host time per eager call", options={"--calls": dict(type=int, default=5000)})
    def host(args) -> dict:
        ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class Suite:
    name: str
    run: Callable[[object], dict]
    help: str
    # The peer suites fall back to the CPU correctness demo without an sm_90 GPU; the others refuse.
    cpu_demo: bool = False
    plot: Optional[Callable[[list, str], bool]] = None  # writes a PNG; False where it cannot
    summary_title: str = ""
    options: dict = field(default_factory=dict)  # its own command-line options: flag -> argparse keywords
    defaults: dict = field(default_factory=dict)  # its defaults for the shared options left unset (rep_ms)
    # The shared options that choose rows and that it reads ("shapes", "split"); the CLI refuses the others for it,
    # rather than measure something other than what was asked.
    takes: tuple = ()


SUITES: dict[str, Suite] = {}


def register_suite(name: str, *, help: str, **kw) -> Callable:
    """Registers the decorated function as the suite `name` (keywords: the fields of Suite)."""
    def deco(fn):
        if name in SUITES:
            raise ValueError(f"fp8ext.bench: suite {name!r} is registered twice")
        SUITES[name] = Suite(name, fn, help, **kw)
        return fn
    return deco
