"""Right-hand sides that jump at a parameter-dependent time (``piecewise(0, time < tau,
a)``: a stimulus switched on at ``tau``), in both backends and every sensitivity mode,
against the analytic solution: values to the solver's tolerance, and the gradient with
respect to ``tau``, which comes only from the jump (``petab_sciml/simulation/jumps.py``).

The model: ``dX/dt = -d X + (a if time >= tau else 0)``, ``X(0) = x0``.  For ``t < tau``
``X = x0 exp(-d t)``; after it ``X = X(tau) exp(-d (t - tau)) + a / d (1 - exp(-d (t -
tau)))``.  The reference gradient is a central difference of that closed form.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy

pytest.importorskip("libsbml")

from petab_sciml.expressions import TIME  # noqa: E402
from petab_sciml.simulation.jumps import jump_time_exprs  # noqa: E402
from tests.support.marks import slow_unless  # noqa: E402
from tests.support.problems.models import lv_sbml, write_one_observable_problem  # noqa: E402

X0, A, D, TAU = 2.0, 3.0, 0.7, 1.3
TIMES = [0.5, 1.0, 1.25, 2.0, 3.5]   # none at tau: x(t) has a kink in tau there
MEASURED = [1.5, 1.1, 0.9, 2.0, 3.3]
SIGMA = 0.3
PARAMETERS = ("a", "d", "tau")


def write_problem(folder: Path, taus: dict[str, float] | None = None) -> Path:
    """The model's problem; ``taus``: the estimated jump-time parameters (default
    ``tau``)."""
    sbml = lv_sbml("stimulus", {"X": X0}, {"a": A, "d": D, "tau": TAU},
                   [("on", [], ["X"], "piecewise(0, time < tau, a)"),
                    ("decay", ["X"], [], "d * X")])
    taus = {"tau": TAU} if taus is None else taus
    return write_one_observable_problem(
        folder, sbml, "X", TIMES, MEASURED, SIGMA,
        {"a": (0, 10, A), "d": (0, 10, D), **{k: (0, 10, v) for k, v in taus.items()}})


def analytic_x(t: float, a: float, d: float, tau: float) -> float:
    if t < tau:
        return X0 * math.exp(-d * t)
    x_tau = X0 * math.exp(-d * tau)
    decay = math.exp(-d * (t - tau))
    return x_tau * decay + a / d * (1 - decay)


def analytic_value(p: np.ndarray) -> float:
    """The negative log-likelihood at ``p = (a, d, tau)``."""
    value = 0.0
    for t, m in zip(TIMES, MEASURED, strict=True):
        x = analytic_x(t, *p)
        value += 0.5 * math.log(2 * math.pi * SIGMA**2) + (m - x) ** 2 / (2 * SIGMA**2)
    return value


def analytic_gradient(p: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.empty(3)
    for i in range(3):
        e = np.zeros(3)
        e[i] = h
        out[i] = (analytic_value(p + e) - analytic_value(p - e)) / (2 * h)
    return out


def test_jump_times_are_found_in_any_relation_form():
    tau, k = sympy.symbols("tau k")
    x = sympy.Symbol("X")
    exprs = [sympy.Piecewise((0, TIME < tau), (k, True)),
             sympy.Piecewise((1, 2 * TIME - 4 >= k), (0, True)),        # time = (4 + k)/2
             sympy.Piecewise((1, (x > 1) & (TIME > 5)), (0, True)),      # state: only 5
             sympy.Piecewise((1, x < TIME), (0, True))]                  # a state event
    found = jump_time_exprs(exprs, ("tau", "k"))
    assert {sympy.simplify(f) for f in found} == {tau, k / 2 + 2, sympy.Integer(5)}
    assert jump_time_exprs([x * k], ("k",)) == ()


# JAX compiles each mode (2-4 s): its default mode stays in `make test-fast`.
MODES = slow_unless(
    [("jax", "forward"), ("jax", "reverse"), ("jax", "forward-ad"), ("jax", "adjoint"),
     ("torch", "forward"), ("torch", "autograd"), ("torch", "adjoint")],
    fast=[("jax", "forward"), ("torch", "forward"), ("torch", "autograd"), ("torch", "adjoint")])


@pytest.mark.parametrize(("backend", "sensitivity"), MODES)
def test_value_and_tau_gradient_match_the_analytic_solution(tmp_path, backend,
                                                            sensitivity):
    pytest.importorskip(backend)
    from petab_sciml.problem import load_problem

    problem = load_problem(write_problem(tmp_path / "p"), backend=backend)
    options = {"sensitivity": sensitivity}
    if backend == "torch":
        options["compile"] = False
    sim = problem.simulator(**options)
    p = np.array([A, D, TAU])
    order = [list(problem.plan.mech_ids).index(name) for name in PARAMETERS]
    ev = sim.evaluate(grad=True)
    assert ev.ok, ev.reason
    np.testing.assert_allclose(
        ev.simulations, [analytic_x(t, *p) for t in TIMES], rtol=1e-6, atol=1e-9)
    assert ev.value == pytest.approx(analytic_value(p), abs=1e-5)
    # without the jump's correction d value / d tau would be 0 (here about -40)
    reference = analytic_gradient(p)
    assert abs(reference[2]) > 1.0
    np.testing.assert_allclose(ev.grad_flat[order], reference, rtol=1e-4)


def write_two_experiments(folder: Path) -> Path:
    """The model in two experiments whose jump times are the parameters tau_1 and tau_2
    (set by their conditions); experiment 2's lies after its last measurement."""
    path = write_problem(folder, {"tau_1": 1.3, "tau_2": 5.0})
    (folder / "conditions.tsv").write_text(
        "conditionId\ttargetId\ttargetValue\nc1\ttau\ttau_1\nc2\ttau\ttau_2\n")
    (folder / "experiments.tsv").write_text(
        "experimentId\ttime\tconditionId\ne1\t0\tc1\ne2\t0\tc2\n")
    (folder / "measurements.tsv").write_text(
        "observableId\texperimentId\ttime\tmeasurement\n"
        + "".join(f"obs\t{e}\t{t}\t{m}\n" for e in ("e1", "e2")
                  for t, m in zip(TIMES, MEASURED, strict=True)))
    text = path.read_text().replace("condition_files: []", "condition_files: [conditions.tsv]")
    path.write_text(text.replace("experiment_files: []", "experiment_files: [experiments.tsv]"))
    return path


@pytest.mark.parametrize(("backend", "sensitivity"), slow_unless(
    [("jax", "forward"), ("jax", "reverse"), ("torch", "forward"), ("torch", "autograd")],
    fast=[("torch", "forward"), ("torch", "autograd")]))
def test_experiments_with_their_own_jump_times_batched(tmp_path, backend, sensitivity):
    """Two experiments solved as one batch (JAX ``vmap``, PyTorch's batched loop), each
    split at its own jump time; one of them lies past the last measurement (no jump in
    the period, a zero gradient)."""
    pytest.importorskip(backend)
    from petab_sciml.problem import load_problem

    problem = load_problem(write_two_experiments(tmp_path / "p"), backend=backend)
    options = {"sensitivity": sensitivity, "batch_experiments": True}
    if backend == "torch":
        options["compile"] = False
    ev = problem.simulator(**options).evaluate(grad=True)
    assert ev.ok, ev.reason
    ids = list(problem.plan.mech_ids)
    expected_sims, expected_grad = [], {}
    for tau_id, tau in (("tau_1", 1.3), ("tau_2", 5.0)):
        p = np.array([A, D, tau])
        expected_sims += [analytic_x(t, *p) for t in TIMES]
        expected_grad[tau_id] = analytic_gradient(p)[2]
    np.testing.assert_allclose(ev.simulations, expected_sims, rtol=1e-6, atol=1e-9)
    for tau_id, g in expected_grad.items():
        assert ev.grad_flat[ids.index(tau_id)] == pytest.approx(g, rel=1e-4, abs=1e-9)
    assert expected_grad["tau_2"] == 0.0
