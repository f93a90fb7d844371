"""Batches of starts (``backends/jax/lanes.py``): the lanes' solve is traced once for all
calls of the same shapes, not once per period and again for the second trace JAX makes
of a batched ``custom_vjp``'s backward pass.  Tracing a reverse-mode solve takes seconds,
and the fit step traces it for every period of the plan."""

from __future__ import annotations

import pytest

pytest.importorskip("libsbml")
pytest.importorskip("jax")

pytestmark = pytest.mark.usefixtures("restore_x64")


@pytest.mark.slow
def test_two_period_batch_traces_the_lanes_gradient_once(tmp_path, monkeypatch):
    import equinox as eqx
    import jax

    import petab_sciml.backends.jax.forward_sensitivities as fs
    import petab_sciml.backends.jax.problem as jp
    from petab_sciml.problem import load_problem
    from tests.training.test_training_problems import _two_period_problem

    calls = {"cotangents": 0, "states": 0}
    cotangents, states = (fs._ForwardSensitivities.cotangents_of_lanes,
                          fs._ForwardSensitivities.states_of_lanes)

    def counted(name, method):
        def wrapper(self, *args):
            calls[name] += 1
            return method(self, *args)
        return wrapper

    monkeypatch.setattr(fs._ForwardSensitivities, "cotangents_of_lanes",
                        counted("cotangents", cotangents))
    monkeypatch.setattr(fs._ForwardSensitivities, "states_of_lanes",
                        counted("states", states))
    problem = load_problem(_two_period_problem(tmp_path / "p"), backend="jax")
    model = problem.model(sensitivity="forward")
    assert len(problem.plan.experiments[0].periods) == 2
    batch = jp.stack([model, model])
    grad = eqx.filter_vmap(eqx.filter_value_and_grad(jp.loss, has_aux=True))
    jax.eval_shape(grad, batch)       # a trace, no compile
    # both periods have the same shapes: one trace each of the lanes' states and gradient
    assert calls == {"cotangents": 1, "states": 1}
