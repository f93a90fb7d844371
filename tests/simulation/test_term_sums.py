"""Right-hand sides compiled as sums of terms (``petab_sciml/simulation/term_sums.py``):
values and derivatives against sympy's own evaluation of the formulas, the mass-action
part vectorized, and whole problems against the official suite's references."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from petab_sciml.simulation.term_sums import compile_term_sum, decompose
from tests.support.suite import SUITE, requires_suite

STATES = ["x", "y", "z"]
PARAMETERS = ["k1", "k2", "V", "K"]
FORMULAS = [
    "(k1*x*y - k2*z) / V",                       # reversible mass action in a compartment
    "2*k1*x**2 - k2*y**3*z + 1.5",               # powers and a constant
    "k2*x/(K + y) - sin(time)*z",                # Michaelis-Menten, a time input
    "(x + y)**3*k1 - piecewise(k2, x > 0.5, 0)",  # expanded power, piecewise of a state
    "k1",                                        # no state at all
    "0",
    "(x + k1)*(y + k2)*(z + V)*(x + K)",         # product of sums left unexpanded
    "exp(-k1*time)*(x - y) + x**5",              # degree above the monomial limit
]
SYMBOLS = sympy.symbols(" ".join(["time", *STATES, *PARAMETERS]))


def _reference(formulas, t, x, p):
    """sympy's own numeric evaluation (lambdify), row by row."""
    from petab_sciml.expressions import parse

    out = np.zeros((x.shape[0], len(formulas)))
    for j, f in enumerate(formulas):
        fn = sympy.lambdify(SYMBOLS, parse(f).subs(sympy.Symbol("time"), SYMBOLS[0]),
                            "numpy")
        for i in range(x.shape[0]):
            out[i, j] = float(fn(t, *x[i], *p[i]))
    return out


def _x64():
    """JAX in float64, as the simulation backend runs it."""
    from petab_sciml.backends.jax.model import check_dtype

    check_dtype("float64")


def _points(n=6, seed=3):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.1, 1.5, (n, len(STATES))), rng.uniform(0.5, 2.0, (n, len(PARAMETERS)))


@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_values_equal_sympy(backend):
    if backend != "numpy":
        pytest.importorskip(backend)
    x, p = _points()
    t = 0.7
    f = compile_term_sum(FORMULAS, [STATES, PARAMETERS], backend=backend)
    if backend == "torch":
        import torch

        got = f(torch.tensor(t, dtype=torch.float64), torch.tensor(x), torch.tensor(p)).numpy()
    elif backend == "jax":
        _x64()
        got = np.asarray(f(t, x, p))
    else:
        got = f(t, x, p)
    assert got.shape == (x.shape[0], len(FORMULAS))
    np.testing.assert_allclose(got, _reference(FORMULAS, t, x, p), rtol=1e-13, atol=1e-13)


@pytest.mark.slow
def test_gradients_equal_sympy_derivatives():
    """Reverse mode through the gathers and the row sums (PyTorch autograd and
    ``jax.grad``) equals sympy's derivative of each formula by each state."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    x, p = _points(n=1)
    t = 0.3
    from petab_sciml.expressions import parse

    expected = np.array([[float(sympy.lambdify(SYMBOLS, sympy.diff(parse(f), sympy.Symbol(s)))(
        t, *x[0], *p[0])) for s in STATES] for f in FORMULAS])
    # the piecewise's derivative is 0 away from its switch (x = 0.5 is not a point here)
    assert abs(x[0, 0] - 0.5) > 1e-3
    ft = compile_term_sum(FORMULAS, [STATES, PARAMETERS], backend="torch")
    rows = []
    for r in range(len(FORMULAS)):
        xt = torch.tensor(x, requires_grad=True)
        ft(torch.tensor(t, dtype=torch.float64), xt, torch.tensor(p))[0, r].backward()
        rows.append(xt.grad[0].numpy())
    np.testing.assert_allclose(np.array(rows), expected, rtol=1e-12, atol=1e-12)
    fj = compile_term_sum(FORMULAS, [STATES, PARAMETERS], backend="jax")
    _x64()
    jac = jax.jacrev(lambda xx: fj(t, xx, p[0]))(x[0])
    np.testing.assert_allclose(np.asarray(jac), expected, rtol=1e-12, atol=1e-12)


def test_mass_action_is_vectorized():
    """A sum of fluxes divided by a compartment is expanded: every coefficient is free
    of states and every flux's monomial is a gather (the decomposition, not the
    fallback of one whole formula per coefficient, which would be straight-line code
    again)."""
    fluxes = " + ".join(f"k{i % 3 + 1}*x{i}*x{i + 1}" for i in range(100))
    states = [f"x{i}" for i in range(101)]
    table = decompose([f"({fluxes}) / V", f"-({fluxes}) / V"], states)
    state_symbols = set(map(sympy.Symbol, states))
    assert all(not (c.free_symbols & state_symbols) for c in table.coefficients)
    assert table.monomials.shape == (100, 2)
    assert len(table.rows) == 200
    assert set(np.abs(table.scales)) == {1.0}


def _suite_case(name):
    from petab_sciml.testcases import load_problem_case

    return load_problem_case(SUITE / "test_cases" / "sciml_problem_import" / name)


@pytest.mark.slow
@requires_suite
@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("case", ["001", "010"])
def test_suite_cases_as_term_sums_meet_their_references(case, backend):
    """Case 001 (a network before the ODE) and 010 (a network in the right-hand side)
    with their right-hand sides as term sums give the suite's llh, simulations and
    gradient at the case's tolerances."""
    pytest.importorskip(backend)
    from petab_sciml.testcases import check_problem_case, evaluate_problem_case

    problem_case = _suite_case(case)
    options = {"cache": False} if backend == "jax" else {}
    sim, ev = evaluate_problem_case(problem_case, backend, term_sums=True, **options)
    assert getattr(sim.executor, "fns", None) is None or \
        hasattr(sim.executor.fns.rhs, "table")
    errors, tolerances, problems = check_problem_case(problem_case, sim, ev)
    assert not problems, problems
    for key, error in errors.items():
        assert error <= tolerances[key], (key, error, tolerances[key])
