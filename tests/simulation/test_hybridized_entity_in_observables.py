"""An observable that reads a model entity the hybridization table assigns a network
output to (``gamma = net1_gamma``) sees the network's output at the measurement point,
as the ODE does: the network runs at the measurement points too.  (It used to read 0:
the network was only marked to run at the measurement points when an observable named
its output directly.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libsbml")
torch = pytest.importorskip("torch")

from petab_sciml.problem import load_problem  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lotka_volterra_ude"


def _problem_observing_gamma(folder: Path) -> Path:
    shutil.copytree(EXAMPLE, folder)
    with open(folder / "observables.tsv", "a") as fh:
        fh.write("\ngamma_obs\tgamma\t1.0\tlin\tnormal\n")
    with open(folder / "measurements.tsv", "a") as fh:
        fh.write("".join(f"gamma_obs\tlv_experiment\t0.0\t{t}\n" for t in range(1, 11)))
    return folder / "problem.yaml"


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_observable_of_a_hybridized_parameter_is_the_network_output(tmp_path, backend):
    if backend == "jax":
        pytest.importorskip("jax")
    problem = load_problem(_problem_observing_gamma(tmp_path / "p"), backend=backend)
    options = {"cache": False} if backend == "jax" else {}
    sims = problem.simulator(**options).evaluate(grad=False).simulations
    prey, predator, gamma = sims[:10], sims[10:20], sims[20:]
    # the reference: the network itself (PyTorch, from the same files) at those states
    net = load_problem(tmp_path / "p" / "problem.yaml", backend="torch").models["net1"]
    with torch.no_grad():
        expected = net.double()(torch.tensor(np.stack([prey, predator], axis=1),
                                             dtype=torch.float64)).numpy()[:, 0]
    assert np.all(expected > 0.1)
    np.testing.assert_allclose(gamma, expected, rtol=1e-12)
