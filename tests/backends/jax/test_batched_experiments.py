"""Experiments solved as one batched solve (``vmap``) agree with the unbatched path
(``batch_experiments=False``: one solve after another, ``lax.map``) to 1e-10 in float64:
on the official suite's problem cases and on the bundled Lotka-Volterra UDE scaled to
many experiments (differing initial conditions and time grids, and a group of
experiments with a second period, solved as a batch of their own)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simulation.test_official_suite import CASES, _id
from tests.support.suite import requires_suite

pytest.importorskip("libsbml")
pytest.importorskip("jax")
pytest.importorskip("diffrax")


pytestmark = pytest.mark.usefixtures("restore_x64")

TOL = 1e-10

# Suite case 038 (a ReLU network inside the right-hand side) included: there the adaptive
# step sequence turns on the last bit (the kinks make the controller reject most steps,
# ~1,000 attempts, so a last-bit difference flips some accept / reject decisions).  Both
# paths agree because small Linear layers (ops.ordered_linear) and diffrax's stage sums
# (stage_sums.diffeqsolve) are computed with elementwise operations in a fixed order,
# which XLA compiles the same way for one experiment and under vmap; with XLA's own
# products the two paths differed by 4.7e-9 (value) at rtol = atol = 1e-8
# (benchmarks/investigations/batched_vs_unbatched_038.py).


def _close(a, b) -> float:
    """Largest difference, relative to max(1, |value|)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def _agree(batched, unbatched) -> None:
    assert batched.ok and unbatched.ok
    assert _close(batched.value, unbatched.value) <= TOL
    assert _close(batched.simulations, unbatched.simulations) <= TOL
    assert _close(batched.grad_flat, unbatched.grad_flat) <= TOL


@requires_suite
@pytest.mark.parametrize("case_path", CASES, ids=_id)
@pytest.mark.slow
def test_suite_case_batched_equals_unbatched(case_path):
    from petab_sciml.problem import load_problem
    from petab_sciml.testcases import evaluate_problem_case, load_problem_case

    case = load_problem_case(case_path)
    # the gradient method the default picks (not evaluated: only the choice is needed)
    sensitivity = load_problem(case.problem, backend="jax").simulator(
        cache=False).executor.sensitivity
    # batch_experiments=True: one vmap even where the default solves small batches of
    # reverse mode one after another
    bsim, batched = evaluate_problem_case(case, "jax", batch_experiments=True,
                                          sensitivity=sensitivity)
    assert bsim.executor.batched
    _, unbatched = evaluate_problem_case(case, "jax", batch_experiments=False,
                                         sensitivity=sensitivity)
    _agree(batched, unbatched)


# forward sensitivities with batched experiments: suite case 003 above (two experiments)
@pytest.mark.parametrize("sensitivity, n, n_two", [("auto", 12, 3)])
@pytest.mark.slow
def test_scaled_lotka_volterra_batched_equals_unbatched(tmp_path, sensitivity, n, n_two):
    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    problem = load_problem(write_scaled_lv(tmp_path, n, n_two_period=n_two), backend="jax")
    batched = problem.simulator(sensitivity=sensitivity, cache=False)
    ex = batched.executor
    # the same gradient method on both paths ("auto" alone would pick forward
    # sensitivities for experiments solved one at a time)
    unbatched = problem.simulator(sensitivity=ex.sensitivity, cache=False,
                                  batch_experiments=False)
    # experiments of one structure go into one batch; the two-period ones into another
    assert sorted(len(exps) for _, exps, _ in ex.batches) == sorted([n, n_two])
    if sensitivity == "auto":
        assert ex.sensitivity == "reverse"   # many experiments batched: reverse mode
    w = problem.simulator().plan.w0.copy()
    w[:3] = [1.25, 0.85, 1.75]   # away from the nominal values, near the data
    _agree(batched.evaluate(w), unbatched.evaluate(w))


def test_symbol_inputs_read_as_the_compiled_formulas():
    """Network inputs that are plain symbols are read with one slice or gather
    (``_symbol_picker``), with the values the compiled input formulas give, also under
    ``vmap``; anything else (an expression, symbols of two groups) keeps the formulas."""
    import functools

    import jax
    import jax.numpy as jnp
    import sympy

    from petab_sciml.backends.jax.networks import symbol_picker as _symbol_picker
    from petab_sciml.expressions import compile_expressions

    groups = [("x1", "x2", "x3", "x4"), ("k1", "k2"), ("net1_out",)]
    rng = np.random.default_rng(0)
    arrays = [jnp.asarray(rng.normal(size=(7, len(g)))) for g in groups]
    for names in (["x1", "x2", "x3", "x4"], ["x2", "x3"], ["x3", "x1", "x3"], ["k2"],
                  ["net1_out"]):
        exprs = [sympy.Symbol(n) for n in names]
        picker = _symbol_picker(exprs, groups)
        assert picker is not None, names
        formulas = compile_expressions(exprs, groups, backend="jax", broadcast=False)
        expected = np.asarray(jax.vmap(functools.partial(formulas, 0.0))(*arrays))
        got = np.asarray(jax.vmap(functools.partial(picker, 0.0))(*arrays))
        np.testing.assert_array_equal(got, expected, err_msg=str(names))
        np.testing.assert_array_equal(np.asarray(picker(0.0, *(a[0] for a in arrays))),
                                      expected[0])
    x1, k1 = sympy.Symbol("x1"), sympy.Symbol("k1")
    assert _symbol_picker([x1, k1], groups) is None        # two groups
    assert _symbol_picker([x1, 2 * x1], groups) is None    # an expression
    assert _symbol_picker([sympy.Symbol("time")], groups) is None
    assert _symbol_picker([], groups) is None


def test_batched_reverse_mode_compiler_options():
    """Reverse and adjoint modes of 1k-300k-parameter problems solved in batches use
    YNNPACK's products only; one experiment at a time, forward sensitivities, larger
    networks and small problems keep their options."""
    from petab_sciml.backends.jax import xla_options as js

    large = js.supported_compiler_options(js.LARGE_COMPILER_OPTIONS)
    batched = js.supported_compiler_options(js.BATCHED_COMPILER_OPTIONS) or large
    for mode in ("reverse", "adjoint"):
        assert js.compiler_options(9_990, mode, 10) == batched
        assert js.compiler_options(9_990, mode, 1) == large
        assert js.compiler_options(4_200_000, mode, 10) == large
    assert js.compiler_options(9_990, "forward", 10) == js.supported_compiler_options(
        {**js.COMPILER_OPTIONS, **js.LARGE_COMPILER_OPTIONS})
    assert js.compiler_options(54, "reverse", 100) == js.supported_compiler_options()


def test_step_growth_limit_per_solver():
    """``dopri8`` grows its steps at most 6x per step (DOP853's default), other solvers
    by diffrax's 10x; an explicit ``factormax`` is kept."""
    from petab_sciml.backends.jax.options import JaxOptions
    from petab_sciml.backends.jax.solvers import step_controller

    assert step_controller(JaxOptions()).factormax == 6.0
    assert step_controller(JaxOptions(solver="tsit5")).factormax == 10.0
    assert step_controller(JaxOptions(factormax=3.0)).factormax == 3.0
    controller = step_controller(JaxOptions(rtol=1e-6, atol=1e-9))
    assert (controller.rtol, controller.atol) == (1e-6, 1e-9)


@pytest.mark.slow
def test_adjoint_sensitivities_batched_and_unbatched(tmp_path):
    """``sensitivity="adjoint"`` (diffrax's BacksolveAdjoint, which takes no
    ``SaveAt(subs=...)``: the end state is saved as the last time point) runs batched and
    unbatched: the same values as each other and as reverse mode (the same forward
    solve), gradients to the continuous adjoint's accuracy."""
    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    problem = load_problem(write_scaled_lv(tmp_path, 6, n_two_period=2), backend="jax")
    w = problem.simulator().plan.w0.copy()
    w[:3] = [1.25, 0.85, 1.75]
    # reverse mode steps under a PI controller by default, the adjoint under the I
    # controller (simulation.steps.I_COEFFICIENTS): the same forward solve needs the same
    i_controller = {"pi_coefficients": (0.0, 1.0)}
    runs = {(mode, batched): problem.simulator(sensitivity=mode, cache=False,
                                               batch_experiments=batched,
                                               **i_controller).evaluate(w)
            for mode, batched in (("adjoint", True), ("adjoint", False), ("reverse", True))}
    adjoint, unbatched = runs["adjoint", True], runs["adjoint", False]
    assert all(ev.ok for ev in runs.values())
    assert _close(adjoint.value, unbatched.value) <= TOL
    assert _close(adjoint.simulations, unbatched.simulations) <= TOL
    assert _close(adjoint.grad_flat, unbatched.grad_flat) <= 1e-9
    reverse = runs["reverse", True]
    assert _close(adjoint.value, reverse.value) <= TOL
    assert _close(adjoint.grad_flat, reverse.grad_flat) <= 1e-5
