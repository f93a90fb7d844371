"""Every file or folder path that the docs name in backticks exists in the tree.

A path here is a backticked word with a ``/`` in it (or a ``.py``/``.md`` file name)
that starts at the repository root (``petab_sciml/``, ``formats/``, ``backends/``,
``tests/``, ``benchmarks/``, ``docs/``, ``examples/``, ...).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def named_paths(text: str) -> set[str]:
    """Backticked repository paths in ``text`` (globs and placeholders left out)."""
    found = set()
    for word in re.findall(r"`([^`\s]+)`", text):
        word = word.rstrip(".,:;")
        if any(c in word for c in "*<>{}$") or word.startswith(("../", "~", "/")):
            continue
        head = word.split("/", 1)[0]
        if "/" in word and head in TOP:
            found.add(word.split("::")[0].split(":")[0])
    return found


def test_the_path_finder_finds_paths():
    assert named_paths("see `backends/jax/simulation.py` and `make test`, "
                       "`docs/*.md`") == {"backends/jax/simulation.py"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_path_exists(doc):
    missing = sorted(p for p in named_paths(doc.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_architecture_names_the_main_modules():
    named = named_paths((ROOT / "docs" / "architecture.md").read_text())
    assert {"petab_sciml/network.py", "petab_sciml/simulation/builder.py",
            "backends/jax/simulation.py", "backends/torch/simulation.py"} <= named


SOURCE_PATH = re.compile(r"\b(?:petab_sciml|formats|backends|benchmarks|tests|docs|examples"
                         r"|test_cases)/[A-Za-z0-9_/.-]+\.(?:py|md|yaml|toml|txt)")
SOURCES = sorted(f for top in ("petab_sciml", "formats", "backends", "benchmarks")
                 for f in (ROOT / top).rglob("*.py"))


def test_every_path_named_in_source_exists():
    missing = sorted(f"{f.relative_to(ROOT)}: {m}" for f in SOURCES
                     for m in SOURCE_PATH.findall(f.read_text()) if not (ROOT / m).exists())
    assert not missing, "source files name paths that do not exist:\n" + "\n".join(missing)
