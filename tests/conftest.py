"""Shared fixtures: where the official PEtab SciML suite lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


@pytest.fixture(scope="module")
def restore_x64():
    """The JAX executor switches on float64 for the whole process; a module that uses
    this fixture gives the flag back afterwards (float32 JAX code elsewhere, e.g.
    tests/test_equinox_file.py, is sensitive to it)."""
    import jax

    previous = bool(jax.config.jax_enable_x64)
    yield
    jax.config.update("jax_enable_x64", previous)


# The JAX backend gives JAX one CPU device per core when it is first used before JAX
# has computed (backends/jax/devices.py).  Which test first touches JAX depends on the
# order tests run in, so every test process makes that choice here, at its start: the
# backend's default, whatever the order.
try:
    import jax  # noqa: F401
except ImportError:
    pass
else:
    from petab_sciml.backends.jax.devices import use_cpu_cores_by_default

    use_cpu_cores_by_default()


# CI runs property-based tests with a fixed seed so a submission's result is reproducible;
# locally they explore new examples on every run.
if os.environ.get("CI"):
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True)
    settings.load_profile("ci")


# The official petab_sciml package in a throw-away environment (session fixture).
from tests.official_package import official_env  # noqa: E402, F401
