"""Step-size control of the JAX solvers (``petab_sciml.simulation.steps``): a PI
controller keeps the differentiated discretization (reverse mode, the default for most
published models) right on a mildly stiff model, where diffrax's I controller gave a
gradient 1,600x its own size off."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from petab_sciml.problem import load_problem  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = Path(os.environ.get("PETAB_BENCHMARK") or REPO.parent / "shared" / "petab_benchmark")
SCHWEN = BENCHMARK / "Schwen_PONE2014" / "Schwen_PONE2014.yaml"


def test_solvers_step_under_a_pi_controller():
    from petab_sciml.backends.jax.options import JaxOptions
    from petab_sciml.backends.jax.solvers import step_controller

    expected = {("dopri8", "reverse"): (0.4, 0.6), ("tsit5", "forward-ad"): (0.4, 0.6),
                ("kvaerno5", "reverse"): (0.0, 1.0), ("kvaerno5", "forward"): (0.0, 1.0),
                ("dopri8", "forward"): (0.0, 1.0), ("dopri8", "adjoint"): (0.0, 1.0)}
    for (solver, sensitivity), coefficients in expected.items():
        controller = step_controller(JaxOptions(solver=solver, sensitivity=sensitivity))
        assert (controller.pcoeff, controller.icoeff) == coefficients
    chosen = step_controller(JaxOptions(pi_coefficients=(0.0, 1.0)))
    assert (chosen.pcoeff, chosen.icoeff) == (0.0, 1.0)


@pytest.mark.slow
@pytest.mark.skipif(not SCHWEN.is_file(), reason="Schwen_PONE2014 not found: set "
                    "PETAB_BENCHMARK or place the collection at ../shared/petab_benchmark")
def test_default_gradient_of_mildly_stiff_schwen_matches_finite_differences():
    """Schwen_PONE2014 at the defaults: ``dopri8`` (no fallback), reverse mode (30
    parameters x 12 experiments).  Its gradient matches forward sensitivities (their
    error is controlled with the states') over every entry, and central differences of
    the objective on its three largest entries."""
    problem = load_problem(SCHWEN, backend="jax")
    default = problem.simulator(cache=False)
    ev = default.evaluate(grad=True)
    assert ev.ok, ev.reason
    assert default.executor.options.solver == "dopri8"
    assert default.executor.sensitivity == "reverse"
    g = np.asarray(ev.grad["mech"], dtype=float)

    forward = problem.simulator(sensitivity="forward", cache=False).evaluate(grad=True)
    g_forward = np.asarray(forward.grad["mech"], dtype=float)
    scale = np.max(np.abs(g_forward))
    # with diffrax's I controller this was 1.6e3 (d value / d ka1: -7.5e5 against 265)
    assert np.max(np.abs(g - g_forward)) <= 1e-4 * scale

    params = default.parameters()
    x = np.asarray(params["mech"], dtype=float)

    def value(i, step):
        shifted = x.copy()
        shifted[i] += step
        return default.evaluate({**params, "mech": shifted}, grad=False).value

    for i in np.argsort(-np.abs(g_forward))[:3]:
        h = 1e-4 * max(abs(x[i]), 1e-3)
        up, down = value(i, h), value(i, -h)
        if np.isfinite(up) and np.isfinite(down):
            fd = (up - down) / (2 * h)
        else:
            # a nominal value on its bound (scaleElisa_nExpID1 = 0.1): the prior is
            # -inf beyond it, so differentiate one-sided inwards, to second order
            side = 1.0 if np.isfinite(up) else -1.0
            f0, f1, f2 = ev.value, value(i, side * h), value(i, 2 * side * h)
            fd = side * (-3 * f0 + 4 * f1 - f2) / (2 * h)
        assert abs(g[i] - fd) <= 1e-3 * scale, (i, g[i], fd)
