"""The README quotes only warnings and errors that the code prints."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def literals():
    """Every string literal of the C++ and Python sources (C++ messages are built from several of them)."""
    found = []
    for path in [*ROOT.joinpath("csrc").rglob("*.cpp"), *ROOT.joinpath("csrc").rglob("*.cu"),
                 *ROOT.joinpath("python", "fp8ext").rglob("*.py")]:
        found += re.findall(r'"((?:[^"\\\n]|\\.)*)"', path.read_text())
    return found


def test_troubleshooting_quotes_what_the_code_prints():
    readme = ROOT.joinpath("README.md").read_text()
    section = readme[readme.index("## Troubleshooting"):]
    section = section[:section.index("\n## ", 1)]
    quoted = re.findall(r"- \*\*`([^`]+)`", section)
    assert len(quoted) >= 4
    sources = literals()
    for quote in quoted:
        # "..." stands for what the message fills in (a shape, a path, a name): each piece between must be
        # printed by one literal.
        for piece in filter(None, (p.strip(" '(") for p in quote.split("..."))):
            assert any(piece in lit for lit in sources), f"README quotes {quote!r}, but no source prints {piece!r}"
