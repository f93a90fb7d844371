"""Stiff models with default settings (``petab_sciml/simulation/stiff_fallback.py``): both
backends retry a failed explicit solve with the implicit ``kvaerno5`` (JAX: diffrax's;
PyTorch: ``backends/torch/implicit.py``), say so in one warning, and get the right
answer; with the solver chosen (``solver=``, ``method=``), nothing is retried.

The model, A <-> B (rates ``k1 * A``, ``k2 * B``, A(0) = 1, B(0) = 0), has the analytic
solution A(t) = Aeq + (1 - Aeq) exp(-K t), K = k1 + k2, Aeq = k2 / K: the reference
here.  With K = 1.4e6 and measurements up to t = 10 an explicit solver needs millions of
steps (its step is bounded by its stability region); a measurement at t = 1e-6 checks
that the fast transient is resolved.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libsbml")

from tests.support.marks import slow_unless  # noqa: E402
from tests.support.problems.models import lv_sbml, write_one_observable_problem  # noqa: E402
from tests.support.suite import SUITE, requires_suite  # noqa: E402

# Each solver choice compiles (JAX) or steps a stiff model eagerly (PyTorch), 2-11 s.
BACKENDS = slow_unless(["jax", "torch"], fast=[])
CHOSEN = {"jax": {"solver": "dopri8"}, "torch": {"method": "dopri8"}}

pytestmark = pytest.mark.usefixtures("restore_x64")

TIMES = [0.0, 1e-6, 1.0, 10.0]
MEASURED = [0.7, 0.5, 0.45, 0.4]
SIGMA = 0.5


def write_problem(folder: Path, k1: float, k2: float) -> Path:
    sbml = lv_sbml("conversion", {"A": 1.0, "B": 0.0}, {"k1": k1, "k2": k2},
                   [("forward", ["A"], ["B"], "k1 * A"), ("back", ["B"], ["A"], "k2 * B")])
    return write_one_observable_problem(folder, sbml, "A", TIMES, MEASURED, SIGMA,
                                        {"k1": (0, 1e7, k1), "k2": (0, 1e7, k2)})


def analytic(k1: float, k2: float) -> tuple[np.ndarray, float, np.ndarray]:
    """Simulations, log-likelihood and its gradient with respect to (k1, k2)."""
    big_k = k1 + k2
    a_eq = k2 / big_k
    sims, grad, llh = [], np.zeros(2), 0.0
    for t, m in zip(TIMES, MEASURED, strict=True):
        decay = math.exp(-big_k * t)
        a = a_eq + (1 - a_eq) * decay
        da_dk1 = -k2 / big_k**2 * (1 - decay) - (1 - a_eq) * t * decay
        da_dk2 = k1 / big_k**2 * (1 - decay) - (1 - a_eq) * t * decay
        sims.append(a)
        llh += -0.5 * math.log(2 * math.pi * SIGMA**2) - (m - a) ** 2 / (2 * SIGMA**2)
        grad += (m - a) / SIGMA**2 * np.array([da_dk1, da_dk2])
    return np.array(sims), llh, grad


def _evaluate(path: Path, backend: str = "jax", **options):
    from petab_sciml.problem import load_problem

    pytest.importorskip(backend)
    if backend == "jax":
        options["cache"] = False
    sim = load_problem(path, backend=backend).simulator(**options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ev = sim.evaluate(grad=True)
    return sim, ev, [str(w.message) for w in caught if w.category is RuntimeWarning]


def _check_against_analytic(ev, k1: float, k2: float) -> None:
    sims, llh, dllh = analytic(k1, k2)
    assert ev.ok, ev.reason
    np.testing.assert_allclose(ev.simulations, sims, rtol=1e-6, atol=1e-9)
    assert ev.llh == pytest.approx(llh, rel=1e-6)   # the solves run to rtol 1e-8
    # value = -(llh + log-prior), the log-prior constant in (k1, k2)
    np.testing.assert_allclose(ev.grad_flat, -dllh, rtol=1e-4,
                               atol=1e-6 * np.abs(dllh).max())


@pytest.mark.parametrize("backend", BACKENDS)
def test_stiff_model_gets_the_right_answer_by_default(tmp_path, backend):
    sim, ev, caught = _evaluate(write_problem(tmp_path / "stiff", 8e5, 6e5), backend,
                                max_steps=3000)
    assert sim.executor.switched
    assert len(caught) == 1 and "implicit kvaerno5" in caught[0], caught
    _check_against_analytic(ev, 8e5, 6e5)
    assert sim.evaluate(grad=False).llh == ev.llh     # stays implicit, no new warning


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_chosen_solver_is_not_replaced(tmp_path, backend):
    sim, ev, caught = _evaluate(write_problem(tmp_path / "stiff", 8e5, 6e5), backend,
                                max_steps=3000, **CHOSEN[backend])
    assert not ev.ok and "max_steps" in ev.reason
    assert caught == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_stiff_model_stays_explicit(tmp_path, backend):
    sim, ev, caught = _evaluate(write_problem(tmp_path / "mild", 0.8, 0.6), backend)
    assert not sim.executor.switched and sim.executor.implicit is None
    assert caught == []
    _check_against_analytic(ev, 0.8, 0.6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_solver_is_chosen_at_the_first_call_only(tmp_path, backend):
    """A later call that fails (an optimizer wandering into stiff parameters) gives
    ``ok=False`` and keeps the explicit solver: the objective stays one function."""
    sim, ev, caught = _evaluate(write_problem(tmp_path / "mild", 0.8, 0.6), backend,
                                max_steps=3000)
    assert ev.ok and caught == []
    w = sim.plan.w0.copy()
    w[[sim.plan.mech_ids.index("k1"), sim.plan.mech_ids.index("k2")]] = [8e5, 6e5]
    with warnings.catch_warnings(record=True) as later:
        warnings.simplefilter("always")
        stiff = sim.evaluate(w, grad=False)
    assert not stiff.ok and "max_steps" in stiff.reason
    assert not sim.executor.switched and sim.executor.implicit is None
    assert [x for x in later if x.category is RuntimeWarning] == []


@requires_suite
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_implicit_solver_differentiates_a_network_in_the_right_hand_side(backend):
    """The implicit solvers on suite case 001 (a network in the Lotka-Volterra
    right-hand side) against the suite's references, gradient included.  JAX:
    kvaerno5's Newton iteration takes the right-hand side's Jacobian by jvp, so the
    network must be forward-differentiable inside reverse mode (which otherwise sums
    weight cotangents through a custom_vjp); PyTorch: back-propagation through its
    kvaerno5's steps and the stages' implicit derivative."""
    from petab_sciml.testcases import check_problem_case, evaluate_problem_case, load_problem_case

    pytest.importorskip(backend)
    case = load_problem_case(SUITE / "test_cases" / "sciml_problem_import" / "001")
    # PyTorch at 1e-10: at the default 1e-8 its kvaerno5 (the same steps as diffrax's
    # on a harmonic oscillator) lands 2.6e-6 from the reference simulations here and
    # the gradient 3.1 from it (relative 2e-4), over the suite's 0.1
    options = ({"solver": "kvaerno5", "cache": False} if backend == "jax"
               else {"method": "kvaerno5", "rtol": 1e-10, "atol": 1e-10})
    sim, ev = evaluate_problem_case(case, backend, **options)
    errors, tolerances, problems = check_problem_case(case, sim, ev)
    assert ev.ok and not problems, (ev.reason, problems)
    assert {"gradient", "simulations"} <= set(errors)
    for key, error in errors.items():
        assert error <= tolerances[key], (key, error, tolerances[key])
