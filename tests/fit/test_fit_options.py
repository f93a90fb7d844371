"""``fit`` options: the ODE solver and its tolerances from the command line, and start 0
at the problem's nominal values, in both backends."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optax")
pytest.importorskip("libsbml")

from click.testing import CliRunner  # noqa: E402

from petab_sciml.cli import main  # noqa: E402
from petab_sciml.fit import FitResult  # noqa: E402
from petab_sciml.fit.starts import draw_starts  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"
SOLVER = {"jax": ("solver", "tsit5"), "torch": ("method", "dopri5")}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_solver_tolerances_and_nominal_start_from_the_command_line(backend, tmp_path):
    pytest.importorskip(backend)
    key, solver = SOLVER[backend]
    out = tmp_path / "fit"
    run = CliRunner().invoke(main, [
        "fit", str(EXAMPLE), "--backend", backend, "--starts", "2", "--steps", "0",
        "--in-process", "--no-plots", "--json", "--out", str(out), "--solver", solver,
        "--rtol", "1e-6", "--atol", "1e-7", "--start-from-nominal"])
    assert run.exit_code == 0, run.output
    record = json.loads((out / "fit.json").read_text())
    assert json.loads(record["options"]) == {key: solver, "rtol": 1e-6, "atol": 1e-7}
    assert record["start_from_nominal"] is True
    result = FitResult.load(out / "results.h5")
    problem = load_problem(EXAMPLE, backend=backend)
    plan = problem.plan
    start0, start1 = sorted(result.starts, key=lambda r: r.start)
    # start 0 is the nominal values; start 1 the draw it would be without the option
    np.testing.assert_array_equal(start0.w, plan.w0)
    np.testing.assert_array_equal(start1.w, draw_starts(problem, 0, 2, None)[1])
    # the objective is the one of the solver and tolerances asked for
    options = {key: solver, "rtol": 1e-6, "atol": 1e-7}
    if backend == "jax":
        options["cache"] = False
    asked = problem.simulator(**options).evaluate(plan.w0, grad=False).value
    default = problem.simulator(**({"cache": False} if backend == "jax" else {})
                                ).evaluate(plan.w0, grad=False).value
    assert start0.value == pytest.approx(asked, rel=1e-12)
    assert asked != default
    # --json gives the best start's parameters by name, as problem.save writes them
    from tests.support.fit_outputs import saved_values

    summary = json.loads(run.stdout)
    best = min(result.starts, key=lambda r: r.value)
    saved = saved_values(problem.save(plan.unpack(best.w), tmp_path / "best"))
    assert set(summary["parameters"]) == set(saved)
    for name, value in saved.items():
        np.testing.assert_array_equal(np.asarray(summary["parameters"][name]), value)


def test_a_fit_recorded_before_the_options_resumes_as_one_without_them(tmp_path):
    """fit.json files from before the options (no ``start_from_nominal``, ``schedule``,
    ``lr_decay``, ``patience``, ``min_delta``) resume as fits without them, and are
    refused with them."""
    from petab_sciml.fit import FitError, _prepare_out

    settings = {"problem": str(EXAMPLE), "backend": "jax", "optimizer": "adam", "lr": 0.02,
                "steps": 5, "seed": 0, "starts": 2, "batch": 2, "options": "{}"}
    out = tmp_path / "fit"
    out.mkdir()
    (out / "fit.json").write_text(json.dumps(settings))
    now = {**settings, "start_from_nominal": False, "schedule": "constant", "lr_decay": None,
           "patience": 0, "min_delta": 0.0}
    assert _prepare_out(out, now, True, False) == out / "checkpoints"
    with pytest.raises(FitError, match="start_from_nominal"):
        _prepare_out(out, {**now, "start_from_nominal": True}, True, False)
    with pytest.raises(FitError, match="schedule"):
        _prepare_out(out, {**now, "schedule": "cosine"}, True, False)
    with pytest.raises(FitError, match="patience"):
        _prepare_out(out, {**now, "patience": 5}, True, False)


def test_plateaued_is_patience_steps_without_an_improvement():
    from petab_sciml.fit.task import plateaued

    trace = [10.0, 9.0, 8.95, 8.99, 9.5]
    assert not plateaued(trace, 0, 0.0)                 # off
    assert not plateaued(trace[:2], 2, 0.0)             # too few losses yet
    assert plateaued(trace, 2, 0.0)                     # 8.99, 9.5 not below 8.95
    assert not plateaued(trace, 3, 0.0)                 # 8.95 was below 9.0
    assert plateaued(trace, 3, 0.1)                     # ... but not by more than 0.1
    assert not plateaued(trace[:4] + [8.0], 2, 0.5)     # 8.0 < 8.95 - 0.5


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_patience_stops_each_start(backend, tmp_path):
    """With a min_delta no step can beat, every start stops after its first loss and
    ``patience`` more: it takes patience + 1 steps of the 20 asked for."""
    pytest.importorskip(backend)
    from petab_sciml.fit import fit

    result = fit(EXAMPLE, backend=backend, starts=2, steps=20, lr=0.02, in_process=True,
                 out=tmp_path / "fit", plots=False, progress=False, patience=2,
                 min_delta=1e12)
    for r in result.starts:
        assert r.steps == 3 and r.trace.size == 3 and r.stopped_at == 0
    loaded = FitResult.load(tmp_path / "fit" / "results.h5")
    assert [r.steps for r in loaded.starts] == [3, 3]
