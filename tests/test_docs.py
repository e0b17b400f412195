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


def _manifest_counts():
    import json
    manifest = json.loads(ROOT.joinpath("python", "fp8ext", "kernel_manifest.json").read_text())
    counts = {}
    for family, key in (("row-wise", "kernels"), ("block-wise", "blockwise_kernels")):
        kernels = manifest[key]
        decode = sum(1 for k in kernels if k["schedule"] == "gemv")
        counts[family] = (len(kernels), len(kernels) - decode, decode)
    return counts


def test_kernel_counts_in_the_docs_match_the_manifest():
    # "The <family> family has <n> kernels: <c> CUTLASS kernels and <d> decode kernels." wherever the docs say it.
    counts = _manifest_counts()
    found = 0
    for path in [ROOT / "README.md", *ROOT.joinpath("docs").glob("*.md")]:
        for family, n, c, d in re.findall(r"The (row-wise|block-wise) family has (\d+) kernels: (\d+) CUTLASS kernels "
                                           r"and (\d+) decode kernels", path.read_text()):
            assert (int(n), int(c), int(d)) == counts[family], f"{path.name}: {family} counts {n}/{c}/{d}"
            found += 1
    assert found >= 2, "the docs no longer state the kernel counts in the checked form"


def test_paths_named_in_the_docs_exist():
    # Every file or folder of the tree that README.md or docs/ names, in backticks, is there (records too).
    missing = []
    for path in [ROOT / "README.md", *ROOT.joinpath("docs").glob("*.md")]:
        if path.name == "decisions.md":  # history: it names files that git keeps
            continue
        for name in re.findall(r"`((?:csrc|tools|tests|python|bench|docs)/[A-Za-z0-9_./*-]+)`", path.read_text()):
            name = name.rstrip(".")
            if "*" in name:
                if not list(ROOT.glob(name)):
                    missing.append((path.name, name))
            elif not ROOT.joinpath(name).exists():
                missing.append((path.name, name))
    assert not missing, missing


def test_records_the_docs_cite_are_kept():
    # A figure in the README or the docs comes with its record; the record must be in bench/ (decisions.md names
    # history, which git keeps).
    kept = {p.name for p in ROOT.joinpath("bench").rglob("*.json")}
    missing = []
    for path in [ROOT / "README.md", ROOT / "bench" / "results" / "INDEX.md", *ROOT.joinpath("docs").glob("*.md")]:
        if path.name == "decisions.md":
            continue
        missing += [(path.name, n) for n in re.findall(r"h[12]00-[A-Za-z0-9_.-]+?\.json", path.read_text()) if n not in kept]
    assert not missing, missing


def test_the_tree_keeps_its_limits():
    # bench/results keeps the latest record of each suite and what the docs cite, at most 40 besides INDEX.md (older
    # runs and probes are in git history); tools/ holds at most 12 maintainer tools; the README stays short.
    records = [p.name for p in ROOT.joinpath("bench", "results").iterdir() if p.name != "INDEX.md"]
    assert len(records) <= 40, f"bench/results holds {len(records)} records: keep the latest per suite and the cited"
    tools = [p.name for p in ROOT.joinpath("tools").iterdir() if p.is_file()]
    assert len(tools) <= 12, f"tools/ holds {len(tools)} files: {sorted(tools)}"
    assert len(ROOT.joinpath("README.md").read_text().splitlines()) <= 250
