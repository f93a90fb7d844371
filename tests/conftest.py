"""Shared fixtures (the helpers that test modules import live in ``tests/support/``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# One JAX persistent compilation cache per test run, empty at its start, shared by the
# xdist workers and the subprocesses the tests start (they inherit the environment):
# tests that solve the same problem with the same options (the suite cases in several
# modules, the scaled Lotka-Volterra problems) compile it once per run, not once per
# test.  Set before JAX is imported, which reads the variables then.  A run that sets
# JAX_COMPILATION_CACHE_DIR itself keeps its own.
_RUN_XLA_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    _RUN_XLA_CACHE = Path(tempfile.gettempdir()) / f"petab_sciml_tests_xla_{_run}"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_RUN_XLA_CACHE)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.2"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


# Each pytest-xdist worker computes on one thread when the workers already fill the
# cores: XLA's and OpenMP's thread pools, sized for the whole machine in every worker,
# would otherwise compete with the other workers' (9% of a simulation module's time on
# 2 cores, measured side by side).  A user's own settings are kept; the children that
# tests start inherit these, as their benign twins do.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
if _WORKERS >= max(_CORES or 1, 2):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = " ".join(
            [os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false",
             "intra_op_parallelism_threads=1"]).strip()


def pytest_unconfigure(config):
    """The run's compilation cache goes when the process that made it ends (the xdist
    controller, whose folder its workers inherited, or a run without workers)."""
    if _RUN_XLA_CACHE is not None and not hasattr(config, "workerinput"):
        shutil.rmtree(_RUN_XLA_CACHE, ignore_errors=True)


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

# The longest test modules first (seconds of one full run on 2 cores, 2026-12-06): each
# pytest-xdist worker takes whole modules (``--dist loadfile``), and xdist's default
# order (most tests first) left modules of a few long tests, such as the fit's Dask and
# signal tests, to the end, where one worker ran them while the other had finished.
# Longest first shortens that tail.  The list only orders: a stale one costs time, never
# a result.  The Makefile passes ``--no-loadscope-reorder`` so that xdist keeps it.
LONGEST_MODULES_FIRST = (
    "tests/simulation/test_native_model.py",                # 216 s
    "tests/backends/jax/test_batched_experiments.py",       # 171 s
    "tests/fit/test_fit_dask_and_resume.py",                # 161 s
    "tests/problem/test_petab_v2_problems.py",              # 152 s
    "tests/security/test_hostile_inputs.py",                # 149 s
    "tests/backends/jax/test_networks.py",                  # 127 s
    "tests/simulation/test_official_suite.py",              # 122 s
    "tests/backends/jax/test_experiment_devices.py",        # 117 s
    "tests/simulation/test_steady_state.py",                # 114 s
    "tests/fit/test_fit_stop_signals.py",                   # 87 s
    "tests/security/test_fit_checkpoints.py",               # 72 s
    "tests/backends/torch/test_batched_experiments.py",     # 58 s
    "tests/cli/test_test_cases_gradients.py",               # 68 s
)


def pytest_collection_modifyitems(config, items):
    rank = {module: i for i, module in enumerate(LONGEST_MODULES_FIRST)}
    last = len(LONGEST_MODULES_FIRST)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], last))   # stable
