"""Where the repository and the official PEtab SciML suite live, for every test module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def suite_root() -> Path | None:
    env = os.environ.get("PETAB_SCIML_TESTSUITE")
    if env:
        return Path(env)
    candidate = REPO.parent / "shared" / "petab_sciml_testsuite"
    return candidate if candidate.is_dir() else None


SUITE = suite_root()
requires_suite = pytest.mark.skipif(
    SUITE is None or not SUITE.is_dir(),
    reason="official PEtab SciML suite not found: set PETAB_SCIML_TESTSUITE or place it at "
    "../shared/petab_sciml_testsuite",
)


def ml_import_cases() -> list[Path]:
    if SUITE is None or not SUITE.is_dir():
        return []
    return sorted(p for p in (SUITE / "test_cases" / "ml_model_import").iterdir() if p.is_dir())


def all_suite_network_files() -> list[Path]:
    """Every network YAML of the suite (ML-import nets and problem nets)."""
    if SUITE is None or not SUITE.is_dir():
        return []
    files = sorted((SUITE / "test_cases").glob("ml_model_import/*/net.yaml"))
    files += sorted((SUITE / "test_cases").glob("*/*/petab/net*.yaml"))
    return files
