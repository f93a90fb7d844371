"""The cross-backend gradient check of ``test-cases run --backend all``: vector-Jacobian
products with seeded random cotangents, with respect to the parameters and the inputs.

The check it replaced compared ``d(sum of outputs)/d(parameters)``.  Behind a softmax that
gradient is zero, both backends return rounding noise, and a 1% error in one entry went
unnoticed: ``test_a_one_percent_error_behind_a_softmax_fails_the_check`` shows both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("jax")

from petab_sciml import testcases  # noqa: E402
from petab_sciml.plugins import get_backend  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TWO_OUTPUTS = REPO / "test_cases" / "093_two_output"   # tanh MLP, out2 behind a softmax


class _OneEntryOff:
    """A backend that delegates to ``inner`` but returns ``out2.bias``'s gradient entry
    0 one per cent off, in its vector-Jacobian products and its sum-of-outputs gradients."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @staticmethod
    def _off(arrays):
        arrays["out2"]["bias"] = arrays["out2"]["bias"].copy()
        arrays["out2"]["bias"][0] *= 1.01
        return arrays

    def vjp(self, *args, **kwargs):
        arrays, inputs = self.inner.vjp(*args, **kwargs)
        return self._off(arrays), inputs

    def gradients(self, *args, **kwargs):
        return self._off(self.inner.gradients(*args, **kwargs))


def _check(monkeypatch, off: bool) -> dict:
    if off:
        monkeypatch.setattr(testcases, "get_backend", lambda name: _OneEntryOff(
            get_backend(name)) if name == "jax" else get_backend(name))
    case = testcases.load_case(TWO_OUTPUTS)
    return testcases.cross_backend(case, ["torch", "jax"], dtype="float32", mode="eval")


def test_the_backends_agree_on_the_products(monkeypatch):
    cross = _check(monkeypatch, off=False)
    _, grad_tol = testcases.CROSS_TOLERANCES["float32"]
    assert cross["gradient_compared"]
    assert cross["gradient_max_rel_diff"] <= grad_tol
    norms = cross["gradient_norm"]
    assert norms["torch"] > 0.1 and norms["torch"] == pytest.approx(norms["jax"], rel=1e-5)


def test_a_one_percent_error_behind_a_softmax_fails_the_check(monkeypatch):
    cross = _check(monkeypatch, off=True)
    _, grad_tol = testcases.CROSS_TOLERANCES["float32"]
    assert cross["gradient_max_rel_diff"] > grad_tol       # caught
    # the old check, on the same two backends: the sum of the outputs' gradient, whose
    # out2 part is rounding noise (softmax outputs sum to one), so the error vanishes
    network = testcases.get_format("yaml").read(TWO_OUTPUTS / "net.yaml")
    case = testcases.load_case(TWO_OUTPUTS)
    inputs = testcases._inputs_of(case, 0)
    params = testcases.load_parameters(case.params[0], network)
    grads = []
    for name in ("torch", "jax"):
        backend = testcases.get_backend(name)
        model = backend.set_parameters(backend.build(network, dtype="float32"), params)
        grads.append(backend.gradients(model, inputs))
    scale = max(float(np.max(np.abs(g))) for arrays in grads[0].values()
                for g in arrays.values())
    old = max(float(np.max(np.abs(grads[0][k][a] - grads[1][k][a]))) / scale
              for k in grads[0] for a in grads[0][k])
    assert old <= grad_tol                                 # unnoticed before


def test_nothing_to_compare_when_the_products_are_noise(monkeypatch):
    """Cotangents of zero give a zero product: reported, neither pass nor fail."""
    monkeypatch.setattr(testcases, "random_cotangents",
                        lambda outputs: [np.zeros(np.shape(o)) for o in outputs])
    cross = _check(monkeypatch, off=False)
    assert not cross["gradient_compared"] and cross["gradient_max_rel_diff"] == 0.0
    assert cross["gradient_norm"] == {"torch": 0.0, "jax": 0.0}


def test_json_reports_each_backends_gradient_norm():
    from click.testing import CliRunner

    from petab_sciml.cli import main

    run = CliRunner().invoke(main, ["test-cases", "run", "--backend", "all", "--json",
                                    str(TWO_OUTPUTS)])
    assert run.exit_code == 0, run.output
    results = json.loads(run.stdout)["results"]
    assert {r["backend"] for r in results} == {"torch", "jax"}
    for r in results:
        assert r["gradient_norm"] > 0.1 and r["cross"]["gradient_compared"] is True


# ------------------------------------------------------------- against finite differences
def test_finite_differences_catch_the_one_percent_error(monkeypatch):
    """The independent reference: each backend's float64 product against central
    differences of its own outputs.  The same 1% error in one entry fails it."""
    case = testcases.load_case(TWO_OUTPUTS)
    for name in ("torch", "jax"):
        assert testcases.finite_difference_error(case, name) <= testcases.FD_TOLERANCE
    monkeypatch.setattr(testcases, "get_backend", lambda name: _OneEntryOff(
        get_backend(name)))
    assert testcases.finite_difference_error(case, "jax") > testcases.FD_TOLERANCE


def test_float64_run_reports_and_checks_finite_differences(monkeypatch):
    results = testcases.run_all([TWO_OUTPUTS], ["torch", "jax"], dtype="float64")
    assert all(r.passed and r.fd_rel_error <= testcases.FD_TOLERANCE for r in results)
    monkeypatch.setattr(testcases, "get_backend", lambda name: _OneEntryOff(
        get_backend(name)) if name == "jax" else get_backend(name))
    results = testcases.run_all([TWO_OUTPUTS], ["torch"], dtype="float64")
    assert results[0].passed
    results = testcases.run_all([TWO_OUTPUTS], ["jax"], dtype="float64")
    assert not results[0].passed and "finite differences" in results[0].error


@pytest.mark.slow
def test_every_bundled_and_official_network_case_meets_finite_differences():
    """README quotes the worst error (official ML-import case 043, 1.1e-7)."""
    from tests.support.suite import SUITE

    roots = [testcases.bundled_cases()]
    if SUITE is not None and (SUITE / "test_cases" / "ml_model_import").is_dir():
        roots.append(SUITE / "test_cases" / "ml_model_import")
    cases = testcases.discover(roots)
    assert len(cases) >= 120
    worst = {}
    for path in cases:
        case = testcases.load_case(path)
        for name in ("torch", "jax"):
            worst[f"{path.name} {name}"] = testcases.finite_difference_error(case, name)
    failing = {k: v for k, v in worst.items() if not v <= testcases.FD_TOLERANCE}
    assert not failing, failing
