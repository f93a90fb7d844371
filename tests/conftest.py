"""Shared fixtures (the helpers that test modules import live in ``tests/support/``)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def restore_x64():
    """The JAX executor switches on float64 for the whole process; a module that uses
    this fixture gives the flag back afterwards (float32 JAX code elsewhere, e.g.
    tests/formats/test_equinox_file.py, is sensitive to it)."""
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
from tests.support.official_package import official_env  # noqa: E402, F401
