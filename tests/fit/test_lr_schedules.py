"""Learning-rate schedules (``petab_sciml.fit.task.SCHEDULES``) in both backends: the
rate of each step is the closed form, the same in optax and torch.optim, and a run
continued from saved optimizer state (a resumed fit) takes the same rates, bit for bit,
as one that never stopped."""

from __future__ import annotations

import math

import numpy as np
import pytest

STEPS, LR, DECAY = 12, 0.1, 0.8

pytestmark = pytest.mark.usefixtures("restore_x64")


def closed_form(schedule: str) -> np.ndarray:
    k = np.arange(STEPS)
    if schedule == "cosine":
        return LR * (1 + np.cos(math.pi * k / STEPS)) / 2
    if schedule == "exponential":
        return LR * DECAY ** k
    return np.full(STEPS, LR)


def _jax_rates(schedule: str, stop: int | None = None) -> np.ndarray:
    """SGD on ``p`` with gradient 1: each update is ``-rate``; with ``stop``, the state
    is copied (as a checkpoint round trip) after that many steps."""
    jax = pytest.importorskip("jax")
    pytest.importorskip("optax")
    import jax.numpy as jnp

    from petab_sciml.backends.jax.fit import optimizer

    jax.config.update("jax_enable_x64", True)    # float64 rates, as the fits use

    opt = optimizer("sgd", LR, schedule, STEPS, DECAY)
    params = jnp.zeros(())
    state = opt.init(params)
    rates = []
    for k in range(STEPS):
        if k == stop:
            state = jax.tree_util.tree_map(lambda x: jnp.asarray(np.asarray(x)), state)
        updates, state = opt.update(jnp.ones(()), state, params)
        rates.append(-float(updates))
    return np.array(rates)


def _torch_rates(schedule: str, stop: int | None = None) -> np.ndarray:
    """The rate each ``torch.optim.SGD`` step uses; with ``stop``, the optimizer is made
    afresh after that many steps and its state loaded, as a resumed fit does."""
    torch = pytest.importorskip("torch")
    from petab_sciml.backends.torch.checkpoint import _settings
    from petab_sciml.backends.torch.fit import _continue_schedule, optimizer, scheduler

    p = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = optimizer("sgd", [p], LR)
    sched = scheduler(opt, schedule, STEPS, DECAY)
    rates = []
    for k in range(STEPS):
        if k == stop:
            saved = opt.state_dict()
            opt = optimizer("sgd", [p], LR)
            sched = scheduler(opt, schedule, STEPS, DECAY)
            # what the checkpoint check compares: the settings, not the current rate
            assert _settings(saved["param_groups"]) == _settings(
                opt.state_dict()["param_groups"])
            opt.load_state_dict(saved)
            _continue_schedule(sched, opt, k)
        before = float(p.detach())
        p.grad = torch.ones((), dtype=torch.float64)
        opt.step()
        if sched is not None:
            sched.step()
        rates.append(before - float(p.detach()))
    return np.array(rates)


@pytest.mark.parametrize("schedule", ["constant", "cosine", "exponential"])
@pytest.mark.parametrize("rates", [_jax_rates, _torch_rates], ids=["jax", "torch"])
def test_rates_are_the_closed_form_and_survive_a_resume(rates, schedule):
    whole = rates(schedule)
    np.testing.assert_allclose(whole, closed_form(schedule), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(rates(schedule, stop=5), whole)


def test_exponential_needs_its_decay_and_only_it(tmp_path):
    from petab_sciml.fit import FitError, fit

    with pytest.raises(FitError, match="lr_decay"):
        fit("unused.yaml", schedule="exponential", out=tmp_path / "a")
    with pytest.raises(FitError, match="lr_decay"):
        fit("unused.yaml", schedule="cosine", lr_decay=0.9, out=tmp_path / "b")
    with pytest.raises(FitError, match="unknown schedule"):
        fit("unused.yaml", schedule="linear", out=tmp_path / "c")
