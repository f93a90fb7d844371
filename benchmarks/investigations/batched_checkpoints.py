"""Reverse mode's checkpoints for batched experiments (``BATCHED_CHECKPOINTS``):
diffrax's default (447) against the batched default (64), called in turn in one
process per problem.

    python benchmarks/investigations/batched_checkpoints.py [--repeats 7]

Problems: the 5-state problem (5-96-96-1 network in the right-hand side) at 100 and
1,000 experiments, the Lotka-Volterra table (``tests/support/problems/scaled_lv.py``) at 1,000
experiments, and the same at ``rtol = atol = 1e-12``, where each experiment takes more
steps than there are checkpoints (checked: the solve fails with ``max_steps=64``), so
fewer checkpoints mean recomputed steps.  Objective + gradient, reverse mode, float64.
Prints min / median ms of both, their ratio, and whether the values and gradients are
the same bit for bit (they must be: checkpoints only decide what is recomputed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.bench_experiments import timed_together  # noqa: E402


def _problem(kind: str, n: int, folder: Path):
    from petab_sciml import load_problem
    from tests.support.problems.five_state import write_five_state
    from tests.support.problems.scaled_lv import write_scaled_lv

    write = write_five_state if kind == "5-state" else write_scaled_lv
    return load_problem(write(folder, n), backend="jax")


def measure(kind: str, n: int, repeats: int, **options) -> dict:
    from petab_sciml.backends.jax.options import BATCHED_CHECKPOINTS

    with tempfile.TemporaryDirectory() as tmp:
        problem = _problem(kind, n, Path(tmp))
        new = problem.simulator(cache=False, sensitivity="reverse", **options)
        old = problem.simulator(cache=False, sensitivity="reverse", checkpoints=447,
                                **options)
        assert new.executor.checkpoints == BATCHED_CHECKPOINTS
        a, b = new.evaluate(), old.evaluate()
        same = a.value == b.value and np.array_equal(a.grad_flat, b.grad_flat)
        more_steps = None
        if options:
            short = problem.simulator(cache=False, sensitivity="reverse", max_steps=64,
                                      **options)
            more_steps = not short.evaluate().ok
        (n_min, n_med), (o_min, o_med) = timed_together([new.evaluate, old.evaluate],
                                                        repeats)
    return {"new": (n_min, n_med), "old": (o_min, o_med), "same": same,
            "more_steps": more_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    cases = [("5-state", 100, {}), ("5-state", 1000, {}), ("Lotka-Volterra", 1000, {}),
             ("Lotka-Volterra", 1000, {"rtol": 1e-12, "atol": 1e-12})]
    print("| problem | experiments | tolerances | 64 checkpoints min / median ms | "
          "447 min / median ms | 64 / 447 (min) | same bits | > 64 steps |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, n, options in cases:
        out = measure(kind, n, args.repeats, **options)
        tol = "1e-12" if options else "1e-8"
        steps = "" if out["more_steps"] is None else str(out["more_steps"])
        print(f"| {kind} | {n} | {tol} | {out['new'][0]:.1f} / {out['new'][1]:.1f} | "
              f"{out['old'][0]:.1f} / {out['old'][1]:.1f} | "
              f"{out['new'][0] / out['old'][0]:.2f}x | {out['same']} | {steps} |",
              flush=True)


if __name__ == "__main__":
    main()
