"""Experiments solved as one batched solve in PyTorch (issue 17): states of shape
``(n_experiments, n_states)``, networks applied to the batch, each experiment with its own
time grid and its own adaptive step sizes (``backends/torch/batched_ode.py:
make_batched_solve``).

* The batched solver against the exact solution of a linear ODE (values and gradients
  through the steps), and a batch against each of its rows solved alone (bitwise close).
* Forward sensitivities: batched and unbatched (``batch_experiments=False``) objectives
  agree to 1e-10 (float64) on the suite's multi-experiment problem cases and on the
  bundled Lotka-Volterra UDE scaled to several experiments (two structures).
* ``autograd`` (back-propagation through the batched steps) against forward
  sensitivities: to the solver tolerance (different gradient methods); against each
  experiment solved alone (a batch of one): 1e-10.  Torch batched
  against JAX: ``test_simulation_suite.py::test_backends_agree`` on cases 003 and 038.
* Suite case 038 (a ReLU network in the right-hand side): its small Linear products are
  computed in a batch-invariant order there (``backends/torch/ordered.py``; with
  ``torch.nn.Linear`` the kinks amplified BLAS's last bits to 1e-9 in the value and
  0.04 in the ``autograd`` gradient), so both sensitivities agree to 1e-10 too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.simulation.test_official_suite import CASES, _id
from tests.support.suite import requires_suite

torch = pytest.importorskip("torch")
pytest.importorskip("torchdiffeq")
pytest.importorskip("libsbml")

TOL = 1e-10
MULTI_EXPERIMENT_CASES = [p for p in CASES if p.parent.name == "sciml_problem_import"
                          and p.name in ("003", "038")]


def _close(a, b) -> float:
    """Largest difference, relative to max(1, |value|)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


# --------------------------------------------------------------------- the solver
def _decay(t, y, args):
    """dy/dt = -a y, one rate per row (batched: y (E, 2), a (E,))."""
    return -args[:, None] * y


SOLVERS = [  # (method, stacked stages, dense output)
    ("dopri5", False, False),   # forward sensitivities
    ("dopri5", True, False),
    ("dopri8", True, False),
    ("dopri8", True, True),     # autograd (TorchOptions' default method)
    ("dopri8", False, True),
]


@pytest.mark.parametrize("method, stacked_stages, dense", SOLVERS)
def test_batched_solver_matches_exact_solution_and_rows_alone(method, stacked_stages, dense):
    """Term-by-term stage sums (forward sensitivities) and stacked stages (autograd),
    outputs where steps land or from the dense output."""
    from petab_sciml.backends.torch.batched_ode import make_batched_solve
    from petab_sciml.backends.torch.ode import SolveOptions

    solve = make_batched_solve(_decay, SolveOptions(method, 1e-10, 1e-10),
                               stacked_stages=stacked_stages, dense_output=dense)
    dt = torch.float64
    rates = torch.tensor([0.3, 1.7, 0.9], dtype=dt, requires_grad=True)
    y0 = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 0.1]], dtype=dt)
    t0 = torch.tensor([0.0, 1.0, 0.5], dtype=dt)
    t1 = torch.tensor([4.0, 3.0, 6.0], dtype=dt)
    # own grids (one output at the start); the second row's shorter grid padded with
    # its end
    ts = torch.tensor([[1.0, 2.5, 4.0], [1.0, 3.0, 3.0], [0.7, 2.0, 5.0]], dtype=dt)
    ys, y1, ok, steps = solve(y0, t0, t1, ts, rates)
    assert bool(ok.all()) and bool((steps > 0).all())
    exact = y0[:, None, :] * torch.exp(-rates[:, None, None] * (ts - t0[:, None])[..., None])
    assert float((ys - exact).detach().abs().max()) < 1e-8
    assert float((y1 - y0 * torch.exp(-rates * (t1 - t0))[:, None]).detach().abs().max()) < 1e-8
    # gradient through the steps against d/da of the exact solution
    (g,) = torch.autograd.grad(ys.sum(), rates)
    g_exact = (-(ts - t0[:, None])[..., None] * exact).sum((1, 2))
    assert _close(g.detach(), g_exact.detach()) < 1e-7
    # each row alone: the same steps, the same numbers
    for i in range(3):
        r = rates[i: i + 1].detach()
        alone = solve(y0[i: i + 1], t0[i: i + 1], t1[i: i + 1], ts[i: i + 1], r)
        assert int(alone[3][0]) == int(steps[i])
        assert float((alone[0][0] - ys[i]).abs().max()) <= 1e-14
        assert float((alone[1][0] - y1[i]).abs().max()) <= 1e-14


@pytest.mark.parametrize("method, dense", [("dopri5", False), ("dopri8", True)])
def test_batched_solver_evaluating_moving_rows_only_changes_nothing(monkeypatch, method,
                                                                    dense):
    """``restrict``: once rows have finished, steps evaluate the others only; values,
    gradients and steps as when every row takes (zero-length) steps to the end."""
    from petab_sciml.backends.torch import batched_ode, ode

    monkeypatch.setattr(batched_ode, "COMPACT_ROWS", 1)
    dt = torch.float64
    rates = torch.linspace(0.2, 2.0, 6, dtype=dt).requires_grad_(True)
    y0 = torch.ones((6, 2), dtype=dt) * torch.arange(1, 7, dtype=dt)[:, None]
    t1 = torch.tensor([0.5, 1.0, 2.0, 4.0, 6.0, 8.0], dtype=dt)
    ts = torch.stack([t1 / 3, t1 / 2, t1], 1)
    results = []
    for restrict in (None, lambda args, rows: args[rows]):
        # 1e-11: outputs inside steps come from the dense output, whose error is
        # O(h^6) and above the tolerance (dopri8 at 1e-10: 1.0e-8 on states up to 6)
        solve = batched_ode.make_batched_solve(_decay, ode.SolveOptions(method, 1e-11, 1e-11),
                                       stacked_stages=True, restrict=restrict,
                                       dense_output=dense)
        ys, y1, ok, steps = solve(y0, torch.zeros(6, dtype=dt), t1, ts, rates)
        assert bool(ok.all())
        (g,) = torch.autograd.grad(ys.sum() + y1.sum(), rates)
        results.append((ys.detach(), y1.detach(), steps, g))
    (ys_a, y1_a, n_a, g_a), (ys_b, y1_b, n_b, g_b) = results
    assert len(set(n_a.tolist())) > 2   # rows finish at different iterations
    assert torch.equal(n_a, n_b)
    assert float((ys_a - ys_b).abs().max()) <= 1e-15
    assert float((y1_a - y1_b).abs().max()) <= 1e-15
    assert float((g_a - g_b).abs().max()) <= 1e-13
    exact = y0[:, None, :] * torch.exp(-rates.detach()[:, None, None] * ts[..., None])
    assert float((ys_b - exact).abs().max()) < 1e-8


def _one_step_dense_error(h: float, theta: float) -> float:
    """Error of dopri8's dense output at ``t0 + theta h`` after one step of length ``h``
    of ``y' = A y`` (a damped rotation) against the matrix exponential."""
    from petab_sciml.backends.torch import tableau

    dt = torch.float64
    tab = tableau.tableau("dopri8")
    A = torch.tensor([[-0.2, 1.0], [-1.0, -0.2]], dtype=dt)
    y0 = torch.tensor([1.0, 0.5], dtype=dt)
    ks = [A @ y0]
    for row in tab.a:   # the stages from the Butcher tableau
        yi = y0 + h * sum(a * k for a, k in zip(row, ks))
        ks.append(A @ yi)
    got = tableau.dense_output_at(torch.tensor(tab.dense, dtype=dt), y0[None],
                           torch.stack(ks)[:, None], torch.tensor([theta], dtype=dt),
                           torch.tensor([h], dtype=dt))[0]
    return float((got - torch.linalg.matrix_exp(A * theta * h) @ y0).abs().max())


def test_dense_output_order_and_end_point():
    """dopri8's interpolant: halving the step divides its error inside the step by
    about 2^6 or more (local error O(h^6): a 5th-order interpolant, measured; diffrax's
    Dopri8 uses the same one), and at theta = 1 it is the step's solution (the stage
    weights' polynomials sum to ``b``)."""
    from petab_sciml.backends.torch.tableau import tableau

    tab = tableau("dopri8")
    at_one = np.asarray(tab.dense).sum(1)
    assert np.max(np.abs(at_one - np.asarray(tab.b[: len(at_one)]))) < 1e-11
    for theta in (0.3, 0.5, 0.8):
        errors = [_one_step_dense_error(h, theta) for h in (0.8, 0.4, 0.2)]
        assert errors[0] / errors[1] > 45 and errors[1] / errors[2] > 45, errors


def test_dense_output_needs_a_method_that_has_one():
    from petab_sciml.backends.torch.batched_ode import make_batched_solve
    from petab_sciml.backends.torch.ode import SolveOptions

    with pytest.raises(ValueError, match="dopri5 has no dense output"):
        make_batched_solve(_decay, SolveOptions("dopri5"), dense_output=True)


def test_batched_solver_row_failure_stays_in_its_row():
    """A row exceeding ``max_steps`` fails alone; the others finish."""
    from petab_sciml.backends.torch.batched_ode import make_batched_solve
    from petab_sciml.backends.torch.ode import SolveOptions

    solve = make_batched_solve(_decay, SolveOptions("dopri5", 1e-10, 1e-10, max_steps=40))
    dt = torch.float64
    rates = torch.tensor([0.1, 80.0], dtype=dt)   # the stiff row needs many more steps
    y0 = torch.ones((2, 2), dtype=dt)
    ts = torch.tensor([[1.0], [1.0]], dtype=dt)
    ys, _, ok, steps = solve(y0, torch.zeros(2, dtype=dt), torch.ones(2, dtype=dt), ts, rates)
    assert ok.tolist() == [True, False]
    assert int(steps[1]) == 40
    assert abs(float(ys[0, 0, 0]) - math.exp(-0.1)) < 1e-9


# --------------------------------------------------------------------- problems
def _agree(batched, unbatched, tol=TOL) -> None:
    assert batched.ok and unbatched.ok
    assert _close(batched.value, unbatched.value) <= tol
    assert _close(batched.simulations, unbatched.simulations) <= tol
    assert _close(batched.grad_flat, unbatched.grad_flat) <= tol


@requires_suite
@pytest.mark.parametrize("case_path", MULTI_EXPERIMENT_CASES, ids=_id)
@pytest.mark.slow
def test_suite_case_batched_equals_unbatched_torch(case_path):
    from petab_sciml.testcases import evaluate_problem_case, load_problem_case

    case = load_problem_case(case_path)
    # eager solves (compile=False): the batching under test is the eager executor's,
    # and the shared evaluation of the suite tests may have compiled by now
    sim, batched = evaluate_problem_case(case, "torch", compile=False)
    # the suite's multi-experiment cases: both experiments in one batch
    assert [len(exps) for _, exps in sim.executor.batches] == [2]
    usim, unbatched = evaluate_problem_case(case, "torch", batch_experiments=False,
                                            compile=False)
    assert usim.executor.batches == []
    _agree(batched, unbatched)


@requires_suite
@pytest.mark.slow
def test_suite_case_038_autograd_batched_equals_each_experiment_alone():
    """Back-propagation through the steps on the ReLU right-hand side: both experiments
    in one batch against each solved alone (a batch of one) to 1e-10."""
    from petab_sciml.testcases import evaluate_problem_case, load_problem_case

    case = load_problem_case(next(p for p in MULTI_EXPERIMENT_CASES if p.name == "038"))
    sim, batched = evaluate_problem_case(case, "torch", sensitivity="autograd")
    assert [len(exps) for _, exps in sim.executor.batches] == [2]
    assert sim.executor.ordered_products
    usim, alone = evaluate_problem_case(case, "torch", sensitivity="autograd",
                                        batch_experiments=False)
    assert [len(exps) for _, exps in usim.executor.batches] == [1, 1]
    _agree(batched, alone)


@pytest.fixture(scope="module")
def scaled_lv(tmp_path_factory):
    from tests.support.problems.scaled_lv import write_scaled_lv

    folder = tmp_path_factory.mktemp("scaled_lv_torch")
    return folder, write_scaled_lv(folder, 4, n_two_period=2)


def _w(problem):
    w = problem.simulator().plan.w0.copy()
    w[:3] = [1.25, 0.85, 1.75]   # away from the nominal values, near the data
    return w


@pytest.mark.slow
def test_scaled_lotka_volterra_batched_equals_unbatched_torch(scaled_lv, monkeypatch):
    from petab_sciml.backends.torch import batching
    from petab_sciml.problem import load_problem

    problem = load_problem(scaled_lv[1], backend="torch")
    batched = problem.simulator()
    # one batch per structure: one-period and two-period experiments
    assert sorted(len(exps) for _, exps in batched.executor.batches) == [2, 4]
    unbatched = problem.simulator(batch_experiments=False)
    w = _w(problem)
    reference = unbatched.evaluate(w)
    _agree(batched.evaluate(w), reference)
    # forward sensitivities of at most two experiments per batch: the four one-period
    # experiments split in two
    n_x, n_p = 2, batched.executor.n_p
    monkeypatch.setattr(batching, "FORWARD_BATCH_ENTRIES", 2 * n_x * (1 + n_x + n_p))
    split = problem.simulator(sensitivity="forward")   # a new simulator (not the cached one)
    assert sorted(len(exps) for _, exps in split.executor.batches) == [2, 2, 2]
    _agree(split.evaluate(w), reference)


def test_five_state_autograd_batched_equals_unbatched_torch(tmp_path):
    """Issue 17 on the 5-state problem (a 5-96-96-1 network in the right-hand side):
    back-propagation through one batched solve against each experiment solved alone,
    to 1e-10.  With torchdiffeq's step growth of up to 10x per step they were 9e-8
    apart (growth factors from error estimates at rounding level;
    ``petab_sciml.simulation.steps``)."""
    from petab_sciml.problem import load_problem
    from petab_sciml.simulation.steps import max_step_growth
    from tests.support.problems.five_state import write_five_state

    assert max_step_growth("dopri8") == 6.0 and max_step_growth("dopri5") == 10.0
    problem = load_problem(write_five_state(tmp_path, 6), backend="torch")
    batched = problem.simulator(sensitivity="autograd")
    unbatched = problem.simulator(sensitivity="autograd", batch_experiments=False)
    _agree(batched.evaluate(), unbatched.evaluate())


@pytest.mark.slow
def test_scaled_lotka_volterra_autograd_through_batched_steps(scaled_lv):
    """Back-propagation through the batched steps (``sensitivity="autograd"``) against
    forward sensitivities: to the solver tolerance (rtol = atol = 1e-8; error control on
    the states only there, on the sensitivities too here).  Torch batched against JAX:
    ``tests/simulation/test_official_suite.py::test_backends_agree`` on the suite's two
    multi-experiment cases (003, 038), both solved as one batch in torch."""
    from petab_sciml.problem import load_problem

    problem = load_problem(scaled_lv[1], backend="torch")
    w = _w(problem)
    forward = problem.simulator().evaluate(w)
    auto = problem.simulator(sensitivity="autograd")
    assert sorted(len(exps) for _, exps in auto.executor.batches) == [2, 4]
    by_steps = auto.evaluate(w)
    assert by_steps.ok and forward.ok
    assert _close(by_steps.value, forward.value) <= 1e-6
    assert _close(by_steps.simulations, forward.simulations) <= 1e-6
    assert _close(by_steps.grad_flat, forward.grad_flat) <= 1e-4
    # batch_experiments=False: each experiment alone through the same solver (a batch
    # of one): the batched results to 1e-10
    alone = problem.simulator(sensitivity="autograd", batch_experiments=False)
    assert [len(exps) for _, exps in alone.executor.batches] == [1] * 6
    _agree(by_steps, alone.evaluate(w))


@pytest.mark.slow
def test_unrolled_and_looped_stages_take_the_same_steps():
    """``unroll_stages`` (compiled solves, issue 11): the while_loop solve with its stages
    unrolled or looped, run eagerly (no compilation: the same traced code), against the
    exact solution and each other."""
    from petab_sciml.backends.torch.ode import SolveOptions, make_solve

    def field(t, y, rate):
        return -rate * y

    dt = torch.float64
    y0 = torch.tensor([1.0, -2.0], dtype=dt)
    rate = torch.tensor(0.7, dtype=dt)
    ts = torch.tensor([0.5, 1.0, 2.5], dtype=dt)
    results = []
    for unroll in (False, True):
        solve = make_solve(field, SolveOptions("dopri5", 1e-9, 1e-9), loop="while_loop",
                           unroll_stages=unroll)
        ys, y1, ok, steps = solve(y0, torch.tensor(0.0, dtype=dt),
                                  torch.tensor(3.0, dtype=dt), ts, rate)
        assert bool(ok)
        exact = y0 * torch.exp(-rate * ts)[:, None]
        assert float((ys - exact).abs().max()) < 1e-8
        results.append((ys, int(steps)))
    assert results[0][1] == results[1][1]
    assert float((results[0][0] - results[1][0]).abs().max()) <= 1e-14


# --------------------------------------------------------------------- autograd fast paths
def test_polynomial_formulas_against_the_compiled_ones():
    """The vectorized polynomial right-hand side (``sensitivity="autograd"`` batched
    solves) against the generated formula code: values and gradients; formulas that are
    no polynomials (or read time) are refused."""
    from petab_sciml.backends.torch.polynomial import PolynomialFormula
    from petab_sciml.expressions import compile_expressions

    groups = [["x1", "x2"], ["k1", "k2", "k3"], ["o1"]]
    exprs = ["k1*x1 - k2*x1*x2 + 3", "x2**2*k3 - 0.5*o1*x1**3", "o1 + x1 - 2*k2", "1.5"]
    fast = PolynomialFormula.build(exprs, groups)
    assert fast is not None and fast.selection is None
    slow = compile_expressions(exprs, groups, backend="torch", broadcast=False)
    gen = torch.Generator().manual_seed(3)
    args = [torch.randn((4, len(g)), generator=gen, dtype=torch.float64, requires_grad=True)
            for g in groups]
    t = torch.zeros(4, dtype=torch.float64)
    got, ref = fast(t, *args), slow(t, *args)
    assert got.shape == ref.shape == (4, 4)
    assert float((got - ref).abs().max()) <= 1e-13
    ct = torch.randn((4, 4), generator=gen, dtype=torch.float64)
    g_got = torch.autograd.grad((got * ct).sum(), args)
    g_ref = torch.autograd.grad((ref * ct).sum(), args)
    for a, b in zip(g_got, g_ref):
        assert float((a - b).abs().max()) <= 1e-13
    # the constants (group 1) fixed for a solve: their factors folded into per-row
    # coefficients once; the same values and gradients
    bound = fast.bind({0, 2}, [None, args[1], None])
    got = bound(t, *args)
    assert float((got - ref).abs().max()) <= 1e-13
    for a, b in zip(torch.autograd.grad((got * ct).sum(), args), g_ref):
        assert float((a - b).abs().max()) <= 1e-13
    linear = PolynomialFormula.build(["k1*x1 + o1", "k2*x2 - k3*x1"], groups)
    bound = linear.bind({0, 2}, [None, args[1], None])
    ref = compile_expressions(["k1*x1 + o1", "k2*x2 - k3*x1"], groups, backend="torch",
                              broadcast=False)(t, *args)
    assert float((bound(t, *args) - ref).abs().max()) <= 1e-14
    # a network's inputs taken from the states: a pick, the states themselves in order
    assert PolynomialFormula.build(["x1", "x2"], groups).selection == (0, None)
    pick = PolynomialFormula.build(["k3", "k1"], groups)
    assert pick.selection == (1, [2, 0])
    assert torch.equal(pick(t, *args), args[1][:, [2, 0]])
    for other in (["exp(x1)"], ["k1*x1/(k2 + x1)"], ["time*x1"], ["x1**0.5"]):
        assert PolynomialFormula.build(other, groups) is None
    # a coefficient table too large for the dense weighted sum: the generated code; a
    # pick of as many columns is no sum
    wide = [[f"a{i}" for i in range(70)], ["b"]]
    assert PolynomialFormula.build([f"a{i}*b" for i in range(70)], wide) is None
    assert PolynomialFormula.build(wide[0], wide).selection == (0, None)


@pytest.mark.slow
def test_network_probe_falls_back_to_vmap(scaled_lv, monkeypatch):
    """A right-hand-side network is called once on the whole batch only where that gives
    what ``vmap`` over the rows gives: a (simulated) network that mixes rows fails the
    probe and goes through ``vmap``, with the same results."""
    from petab_sciml.backends.torch.networks import Networks
    from petab_sciml.problem import load_problem

    problem = load_problem(scaled_lv[1], backend="torch")
    w = _w(problem)
    auto = problem.simulator(sensitivity="autograd")
    direct = auto.evaluate(w)
    assert auto.executor.networks.transparent == {j: True for j in auto.executor.rhs_nets}
    original = Networks.direct

    def mixing(self, j, params, arrays):
        forward = original(self, j, params, arrays)
        return lambda values: forward(values) + values[:, :1].sum()   # mixes the rows

    monkeypatch.setattr(Networks, "direct", mixing)
    fallback = load_problem(scaled_lv[1], backend="torch").simulator(sensitivity="autograd")
    vmapped = fallback.evaluate(w)
    assert fallback.executor.networks.transparent == {j: False for j in auto.executor.rhs_nets}
    assert _close(vmapped.value, direct.value) <= 1e-12
    assert _close(vmapped.grad_flat, direct.grad_flat) <= 1e-12
