"""Problems whose evaluation must fail with a reason, built from the hostile corpus's base
problem (:func:`tests.support.hostile.make_problem`): an ODE too stiff for the step budget, a
measurement at t = 1e9, and a noise standard deviation that only turns out <= 0 at run
time.  Used by ``tests/support/hostile.py``, ``tests/simulation/test_failing_evaluations.py`` and
``benchmarks/bench_failing_solves.py``.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.hostile import edit, make_problem

STIFF_DELTA = "1e6"
"""Predator death rate of the stiff problem: an explicit solver's step is limited to
about 3e-6 over t in [0, 2], far more steps than the default ``max_steps`` (100000)."""


def stiff_problem(root: Path) -> Path:
    problem = make_problem(root)
    edit(problem.parent / "parameters.tsv", "delta\tlin\t0.0\t15.0\t1.5\ttrue",
         f"delta\tlin\t0.0\t1e7\t{STIFF_DELTA}\ttrue")
    return problem


def long_horizon_problem(root: Path) -> Path:
    problem = make_problem(root)
    edit(problem.parent / "measurements.tsv", "prey_obs\texp1\t0.9\t2",
         "prey_obs\texp1\t0.9\t1e9")
    return problem


def runtime_noise_problem(root: Path, sd: str = "-0.1", noise: str = "normal",
                          transform: str = "lin") -> Path:
    """``noiseFormula`` of ``prey_obs`` is the estimated parameter ``sd`` (nominal ``sd``),
    with noise distribution ``noise`` and transformation ``transform``."""
    problem = make_problem(root)
    folder = problem.parent
    edit(folder / "observables.tsv", "prey_obs\tprey\t0.05\tlin\tnormal",
         f"prey_obs\tprey\tsd\t{transform}\t{noise}")
    with open(folder / "parameters.tsv", "a") as f:
        f.write(f"sd\tlin\t-1\t1\t{sd}\ttrue\n")
    return problem
