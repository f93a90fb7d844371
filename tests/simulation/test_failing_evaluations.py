"""Evaluations that cannot give a number fail with a reason, never ``value = nan`` with
``ok = True``, in both backends:

* a noise standard deviation that turns out <= 0 at run time (a parameter as the noise
  formula), for each supported noise model (normal and Laplace; lin, log, log10);
* noise values and log-scale measurements known before simulation: ``validate`` errors
  located at the table row;
* an ODE too stiff for the step budget (the explicit solvers chosen) and a
  measurement at t = 1e9: ``ok = False`` after ``max_steps`` steps, in both backends,
  under a wall-time guard that catches a hang (the CPU time ratio is
  ``benchmarks/bench_failing_solves.py``'s).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from petab_sciml.problem import load_problem, validate_problem
from tests.support.hostile import edit, make_problem
from tests.support.hostile_solves import long_horizon_problem, runtime_noise_problem, stiff_problem

REPO = Path(__file__).resolve().parents[2]
BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec(b) is None, reason=f"{b} is not installed"))
    for b in ("jax", "torch")]
HANG_SECONDS = 120.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.slow
def test_noise_sd_not_positive_at_run_time_fails_with_a_reason(backend, tmp_path):
    models = [("normal", "lin", "-0.1"), ("laplace", "lin", "0"),
              ("log-normal", "lin", "-0.1"), ("log-laplace", "lin", "0"),
              ("normal", "log10", "-0.1"), ("laplace", "log", "0")]
    for k, (noise, transform, sd) in enumerate(models):
        problem = runtime_noise_problem(tmp_path / str(k), sd, noise, transform)
        assert validate_problem(problem).ok   # only known at run time
        evaluation = load_problem(problem, backend=backend).simulator().evaluate(grad=False)
        where = (backend, noise, transform, sd)
        assert not evaluation.ok and evaluation.value == math.inf, where
        assert "noise standard deviation <= 0" in evaluation.reason, where
        # prey_obs is the first two data rows of the measurement table
        assert "rows 1, 2;" in evaluation.reason and f"first value {float(sd)!r}" \
            in evaluation.reason, (where, evaluation.reason)
    # the same problem with a positive sd evaluates
    problem = runtime_noise_problem(tmp_path / "positive", "0.05")
    evaluation = load_problem(problem, backend=backend).simulator().evaluate(grad=False)
    assert evaluation.ok and math.isfinite(evaluation.value) and evaluation.reason == ""


@pytest.mark.parametrize("table, old, new, code, row, column", [
    ("observables.tsv", "prey_obs\tprey\t0.05", "prey_obs\tprey\t0", "NOISE_VALUE_INVALID",
     2, "noiseFormula"),
    ("observables.tsv", "predator_obs\tpredator\t0.05", "predator_obs\tpredator\t-0.1",
     "NOISE_VALUE_INVALID", 3, "noiseFormula"),
    ("observables.tsv", "prey_obs\tprey\t0.05\tlin\tnormal",
     "prey_obs\tprey\t0.05\tlin\tlog-normal", "MEASUREMENT_VALUE_INVALID", 3, "measurement"),
    ("observables.tsv", "prey_obs\tprey\t0.05\tlin\tnormal",
     "prey_obs\tprey\t0.05\tlog10\tlaplace", "MEASUREMENT_VALUE_INVALID", 3, "measurement"),
])
def test_validate_locates_noise_and_log_scale_measurement_errors(tmp_path, table, old, new,
                                                                 code, row, column):
    problem = make_problem(tmp_path)
    edit(problem.parent / table, old, new)
    # a measurement <= 0 on row 3 (prey_obs), fine on the lin scale
    edit(problem.parent / "measurements.tsv", "prey_obs\texp1\t0.9\t2", "prey_obs\texp1\t0\t2")
    issues = validate_problem(problem).issues.errors
    assert [(i.code, i.file, i.row, i.column) for i in issues] == \
        [(code, table if code == "NOISE_VALUE_INVALID" else "measurements.tsv", row, column)]


def test_validate_locates_numeric_noise_parameters_not_positive(tmp_path):
    problem = make_problem(tmp_path)
    folder = problem.parent
    edit(folder / "observables.tsv", "prey_obs\tprey\t0.05",
         "prey_obs\tprey\tnoiseParameter1_prey_obs")
    text = (folder / "measurements.tsv").read_text().splitlines()
    rows = [text[0] + "\tnoiseParameters"] + [
        line + ("\t0.1" if line.startswith("prey") else "\t") for line in text[1:]]
    rows[2] = rows[2].replace("\t0.1", "\t-0.2")
    (folder / "measurements.tsv").write_text("\n".join(rows) + "\n")
    issues = validate_problem(problem).issues.errors
    assert [(i.code, i.file, i.row, i.column) for i in issues] == \
        [("NOISE_VALUE_INVALID", "measurements.tsv", 3, "noiseParameters")]
    assert "-0.2" in issues[0].message


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("build", [stiff_problem, long_horizon_problem],
                         ids=["stiff", "t_1e9"])
def test_failing_solves_end_with_ok_false_within_the_step_budget(backend, build, tmp_path):
    problem = build(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PETAB_SCIML_CACHE": "0"}
    done = subprocess.run([sys.executable, str(REPO / "tests" / "support" / "hostile_evaluate.py"),
                           str(problem), backend, "max_steps=3000",
                           # the defaults retry a failed solve with an implicit solver
                           {"jax": "solver=dopri8", "torch": "method=dopri8"}[backend]],
                          capture_output=True,
                          text=True, env=env, timeout=HANG_SECONDS)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "ok=False value=inf reason=an ODE solve failed (more than max_steps steps, a "
        "collapsed step size or a non-finite state)"), done.stdout
