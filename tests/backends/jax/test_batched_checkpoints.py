"""Reverse mode's checkpoints for batched experiments (``BATCHED_CHECKPOINTS``): only
what is recomputed changes, never a bit of the results."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("libsbml")
pytest.importorskip("jax")
pytest.importorskip("diffrax")

pytestmark = pytest.mark.usefixtures("restore_x64")


@pytest.mark.slow
def test_batched_default_checkpoints_change_no_bit(tmp_path):
    from petab_sciml.backends.jax.options import BATCHED_CHECKPOINTS
    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    problem = load_problem(write_scaled_lv(tmp_path, 8), backend="jax")
    batched = problem.simulator(cache=False, sensitivity="reverse")
    assert batched.executor.checkpoints == BATCHED_CHECKPOINTS
    unbatched = problem.simulator(cache=False, sensitivity="reverse",
                                  batch_experiments=False)
    assert unbatched.executor.checkpoints is None        # diffrax's default
    chosen = problem.simulator(cache=False, sensitivity="reverse", checkpoints=447)
    assert chosen.executor.checkpoints == 447           # an explicit value is kept
    # fewer checkpoints than steps: steps are recomputed, results are not changed
    few = problem.simulator(cache=False, sensitivity="reverse", checkpoints=3)
    reference = chosen.evaluate()
    for sim in (batched, few):
        got = sim.evaluate()
        assert got.value == reference.value
        assert np.array_equal(got.simulations, reference.simulations)
        assert np.array_equal(got.grad_flat, reference.grad_flat)
