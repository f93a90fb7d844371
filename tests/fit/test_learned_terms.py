"""The learned-term data and plot (``petab_sciml.fit.learned_terms``, ``plots.learned_terms``)
for networks with several input arguments and with three or more inputs.  (One argument
of two inputs, the bundled example, is checked in ``test_fit_dask_and_resume.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from tests.support.suite import SUITE, requires_suite  # noqa: E402


@requires_suite
@pytest.mark.slow
def test_network_with_two_input_arguments_is_a_heat_map_of_its_outputs():
    """Suite case 029: ``net5(x1, x2)`` with each input its own argument.  The term's
    values are the PyTorch network's at the grid points, each point split into the two
    arguments."""
    pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    from petab_sciml.backends.torch import BACKEND as TORCH
    from petab_sciml.fit import learned_terms, plots
    from petab_sciml.problem import load_problem

    problem = load_problem(SUITE / "test_cases" / "sciml_problem_import" / "029" / "petab"
                           / "problem.yaml", backend="jax")
    plan = problem.plan
    (term,) = learned_terms(problem, problem.simulator(cache=False), plan.w0)
    assert term["id"] == "net5" and term["kind"] == "map" and len(term["inputs"]) == 2
    net = next(n for n in plan.networks if n.id == "net5")
    model = TORCH.set_parameters(TORCH.build(net.network, dtype="float64"),
                                 plan.unpack(plan.w0)["nets"]["net5"])
    xs, ys = np.meshgrid(*term["axes"])
    with torch.no_grad():      # one point at a time: the network cats its inputs on dim 0
        want = [float(model(torch.tensor([x]), torch.tensor([y]))[0])
                for x, y in zip(xs.ravel(), ys.ravel(), strict=True)]
    (oid,) = term["outputs"]
    np.testing.assert_allclose(term["outputs"][oid].ravel(), want, rtol=1e-12)
    # the PyTorch backend's forward_each, which the term takes in a torch problem
    (each,) = TORCH.forward_each(model, [xs.ravel()[:, None], ys.ravel()[:, None]])
    np.testing.assert_allclose(each[:, 0], want, rtol=1e-12)
    for i in range(2):
        assert term["axes"][i][0] == term["seen"][:, i].min()
        assert term["axes"][i][-1] == term["seen"][:, i].max()
    fig = plots.learned_terms([term])["term_net5"]
    np.testing.assert_array_equal(np.asarray(fig.axes[0].collections[0].get_array()).ravel(),
                                  term["outputs"][oid].ravel())
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_three_or_more_inputs_are_swept_one_at_a_time_about_their_medians():
    from petab_sciml.fit import _term_grid

    rng = np.random.default_rng(3)
    seen = rng.normal(size=(50, 4)) * [1.0, 2.0, 3.0, 4.0]
    kind, axes, points = _term_grid(seen)
    assert kind == "sweeps" and len(axes) == 4 and points.shape == (400, 4)
    median = np.median(seen, axis=0)
    for i in range(4):
        sweep = points[i * 100:(i + 1) * 100]
        np.testing.assert_array_equal(sweep[:, i], axes[i])
        assert axes[i][0] == seen[:, i].min() and axes[i][-1] == seen[:, i].max()
        others = np.delete(sweep, i, axis=1)
        np.testing.assert_array_equal(others, np.broadcast_to(np.delete(median, i), others.shape))


def test_sweeps_plot_draws_each_output_against_each_input_with_the_truth():
    from petab_sciml.fit import _term_grid, plots

    rng = np.random.default_rng(4)
    seen = rng.uniform(0.0, 2.0, size=(30, 3))
    kind, axes, points = _term_grid(seen)
    learned = (points ** 2).sum(axis=1).reshape(3, 100)
    term = {"id": "net", "kind": kind, "inputs": ["a", "b", "c"], "seen": seen, "axes": axes,
            "points": points, "outputs": {"net_y": learned, "net_z": -learned}}
    fig = plots.learned_terms([term], truth={"net_y": lambda p: p.sum(axis=1)})["term_net"]
    assert len(fig.axes) == 6      # two outputs x three inputs
    for row, (oid, values) in enumerate(term["outputs"].items()):
        for i in range(3):
            ax = fig.axes[row * 3 + i]
            lines = ax.get_lines()
            np.testing.assert_array_equal(lines[0].get_xdata(), axes[i])
            np.testing.assert_array_equal(lines[0].get_ydata(), values[i])
            assert ax.get_xlabel() == "abc"[i]
            if oid == "net_y":       # the truth, dashed, on the same sweep
                np.testing.assert_allclose(lines[1].get_ydata(),
                                           points[i * 100:(i + 1) * 100].sum(axis=1))
    import matplotlib.pyplot as plt

    plt.close(fig)
