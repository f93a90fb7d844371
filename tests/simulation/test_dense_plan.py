"""A problem's simulation on a dense time grid (``petab_sciml.simulation.dense``): every
(experiment, observable) at evenly spaced times and at its measurement times, equal to
the problem's own simulation there, with the same parameter layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("libsbml")

from petab_sciml.problem import load_problem  # noqa: E402
from petab_sciml.simulation.dense import dense_plan  # noqa: E402
from petab_sciml.simulation.objective import Simulator  # noqa: E402
from tests.support.suite import suite_root  # noqa: E402

pytestmark = pytest.mark.usefixtures("restore_x64")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"


def _problems():
    yield pytest.param(EXAMPLE, id="example")
    root = suite_root()
    case = None if root is None else (
        root / "test_cases" / "sciml_problem_import" / "038" / "petab" / "problem.yaml")
    yield pytest.param(case, id="038-two-experiments",
                       marks=pytest.mark.skipif(case is None or not case.exists(),
                                                reason="official suite not found"))


@pytest.mark.slow
@pytest.mark.parametrize("path", list(_problems()))
def test_dense_simulation_meets_the_problem_at_its_measurements(path):
    problem = load_problem(path, backend="jax")
    plan = problem.plan
    grid = dense_plan(problem.data, plan, n=200)
    assert grid.mech_ids == plan.mech_ids and grid.n_w == plan.n_w
    w = plan.w0
    ref = problem.simulator(cache=False).evaluate(w, grad=False)
    got = Simulator(grid, "jax", cache=False).evaluate(w, grad=False)
    assert ref.ok and got.ok
    m, d = plan.measurements, grid.measurements
    ids = [e.id for e in plan.experiments]
    dense_ids = [e.id for e in grid.experiments]
    pairs = {(int(e), int(o)) for e, o in zip(m.experiment, m.observable)
             if np.isfinite(m.time[(m.experiment == e) & (m.observable == o)]).any()}
    for e, o in pairs:
        mine = (m.experiment == e) & (m.observable == o) & np.isfinite(m.time)
        dense = (d.experiment == dense_ids.index(ids[e])) & (d.observable == o)
        times = d.time[dense]
        # 200 evenly spaced times from the experiment's start, plus the measured ones
        start = plan.experiments[e].t0
        assert times.min() == min(start, m.time[mine].min())
        assert times.max() == m.time[mine].max()
        assert np.unique(times).size >= 200 and set(m.time[mine]) <= set(times)
        for i in np.flatnonzero(mine):
            j = np.flatnonzero(dense & (d.time == m.time[i]))[0]
            np.testing.assert_allclose(got.simulations[j], ref.simulations[i], rtol=1e-9,
                                       atol=1e-12)
