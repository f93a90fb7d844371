"""The bundled example problem (examples/lotka_volterra_ude) validates, loads in both
backends with the same objective, and a few Adam steps lower the objective."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from petab_sciml.problem import validate_problem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lotka_volterra_ude"


def test_example_validates_without_issues() -> None:
    report = validate_problem(EXAMPLE / "problem.yaml")
    assert not report.issues.errors, report.issues.errors
    assert not report.issues.warnings, report.issues.warnings


def test_example_objective_agrees_between_backends() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("diffrax")
    from petab_sciml import load_problem

    values = {}
    for backend in ("jax", "torch"):
        problem = load_problem(EXAMPLE / "problem.yaml", backend=backend)
        values[backend] = float(problem.objective(problem.parameters()))
    assert np.isfinite(values["jax"])
    assert values["torch"] == pytest.approx(values["jax"], rel=1e-6)


@pytest.mark.slow
def test_training_script_lowers_the_objective() -> None:
    pytest.importorskip("diffrax")
    result = subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--steps", "60"],
        capture_output=True, text=True, timeout=600, check=True)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("step")]
    first = float(lines[0].split()[-1])
    final = float(next(ln for ln in result.stdout.splitlines()
                       if ln.startswith("final objective")).split()[2].rstrip(";"))
    assert final < 0.1 * first
