"""The demo's fit (4 starts, 1000 Adam steps) recovers the example's data-generating
parameters: the best start within 5% for alpha, beta and delta, and the network term
close to the true gamma = 0.8 over the data range (make_example.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")
pytest.importorskip("matplotlib")

from petab_sciml.fit import fit  # noqa: E402
from petab_sciml.problem import load_problem  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lotka_volterra_ude"
sys.path.insert(0, str(EXAMPLE))

from make_example import TRUE  # noqa: E402
from report import network_term_rms, plot_learned_term  # noqa: E402


@pytest.mark.slow
def test_best_start_recovers_the_example(tmp_path):
    result = fit(EXAMPLE / "problem.yaml", starts=4, steps=1000, lr=0.02, in_process=True,
                 out=tmp_path / "fit", progress=False)
    best = load_problem(result.files["best"], backend="jax")
    for pid, value in zip(best.plan.mech_ids, best.plan.w0[:3]):
        assert abs(value - TRUE[pid]) / TRUE[pid] < 0.05, (pid, value)
    # the best objective lies below the objective at the data-generating mechanistic
    # values with the network at the true constant gamma
    problem = load_problem(EXAMPLE / "problem.yaml", backend="jax")
    truth = problem.plan.pack({"mech": [TRUE[k] for k in ("alpha", "beta", "delta")],
                               "nets": {"net1": {"layer3": {
                                   "weight": np.zeros((1, 5)),
                                   "bias": np.log(np.expm1([TRUE["gamma"]]))}}}})
    assert result.best.value < problem.objective(truth) + 1.0
    assert network_term_rms(best) < 0.1
    # the learned-term plot with the truth: learned gamma, then learned - 0.8, on a
    # grid over the range the trajectories reach
    fig = plot_learned_term(tmp_path / "fit")
    learned, diff = (ax.collections[0].get_array() for ax in fig.axes
                     if ax.get_title().startswith("net1"))
    np.testing.assert_allclose(np.asarray(diff), np.asarray(learned) - TRUE["gamma"],
                               rtol=0, atol=1e-15)
    assert np.max(np.abs(np.asarray(diff))) < 0.2
    assert (tmp_path / "fit" / "plots" / "term_net1.png").stat().st_size > 1000
