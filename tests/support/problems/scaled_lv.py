"""The bundled Lotka-Volterra UDE (``examples/lotka_volterra_ude``) scaled to many
experiments: used by ``benchmarks/bench_experiments.py`` and the batching tests.

Experiment ``e`` starts from its own initial condition (a condition per experiment sets
``prey`` and ``predator``), and its time grid differs too: every third experiment
measures at 1, 2, ..., 10, the others at a shifted or shorter grid, so padded and masked
time grids are exercised.  Measurements are the true model's values (scipy) plus seeded
noise.  Deterministic.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lotka_volterra_ude"
TRUE = {"alpha": 1.3, "beta": 0.9, "gamma": 0.8, "delta": 1.8}
NOISE_SD = 0.05


def initial_condition(e: int) -> tuple[float, float]:
    """(prey, predator) at t = 0 of experiment ``e``."""
    rng = np.random.default_rng(1000 + e)
    return float(rng.uniform(0.3, 1.5)), float(rng.uniform(2.0, 5.0))


def time_grid(e: int) -> np.ndarray:
    """Measurement times of experiment ``e``."""
    if e % 3 == 0:
        return np.linspace(1.0, 10.0, 10)
    if e % 3 == 1:
        return np.linspace(0.5, 9.5, 10)
    return np.linspace(1.0, 6.0, 6)


def true_states(x0: tuple[float, float], times: np.ndarray) -> np.ndarray:
    from scipy.integrate import solve_ivp

    a, b, g, d = TRUE["alpha"], TRUE["beta"], TRUE["gamma"], TRUE["delta"]

    def rhs(t, x):
        prey, pred = x
        return [a * prey - b * prey * pred, g * prey * pred - d * pred]

    sol = solve_ivp(rhs, (0.0, float(times[-1])), list(x0), t_eval=times, rtol=1e-6,
                    atol=1e-8)
    return sol.y.T


def write_scaled_lv(folder: Path, n_experiments: int, seed: int = 0,
                    n_two_period: int = 0) -> Path:
    """Write the scaled problem into ``folder``; returns the problem YAML's path.

    ``n_two_period`` more experiments have a second period from t = 4 on that resets
    ``prey`` to 1 (a different structure: solved as a batch of their own)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("lv.xml", "net1.yaml", "net1_ps.hdf5", "hybridization.tsv", "mapping.tsv",
                 "observables.tsv", "parameters.tsv"):
        shutil.copy(EXAMPLE / name, folder / name)
    rng = np.random.default_rng(seed)
    exps = ["experimentId\ttime\tconditionId"]
    conds = ["conditionId\ttargetId\ttargetValue"]
    meas = ["observableId\texperimentId\tmeasurement\ttime"]
    for e in range(n_experiments):
        x0 = initial_condition(e)
        times = time_grid(e)
        exps.append(f"e{e}\t0\tc{e}")
        conds.append(f"c{e}\tprey\t{x0[0]!r}")
        conds.append(f"c{e}\tpredator\t{x0[1]!r}")
        states = true_states(x0, times)
        for k, obs in enumerate(("prey_obs", "predator_obs")):
            for t, value in zip(times, states[:, k]):
                noisy = float(value + rng.normal(0, NOISE_SD))
                meas.append(f"{obs}\te{e}\t{noisy!r}\t{float(t)!r}")
    conds.append("reset\tprey\t1.0")
    for e in range(n_experiments, n_experiments + n_two_period):
        x0 = initial_condition(e)
        exps.append(f"e{e}\t0\tc{e}")
        exps.append(f"e{e}\t4\treset")
        conds.append(f"c{e}\tprey\t{x0[0]!r}")
        conds.append(f"c{e}\tpredator\t{x0[1]!r}")
        for obs in ("prey_obs", "predator_obs"):
            for t in time_grid(e):
                meas.append(f"{obs}\te{e}\t{float(rng.uniform(0.5, 4.0))!r}\t{float(t)!r}")
    (folder / "experiments.tsv").write_text("\n".join(exps) + "\n")
    (folder / "conditions.tsv").write_text("\n".join(conds) + "\n")
    (folder / "measurements.tsv").write_text("\n".join(meas) + "\n")
    text = (EXAMPLE / "problem.yaml").read_text()
    text = text.replace('experiment_files: ["experiments.tsv"]',
                        'experiment_files: ["experiments.tsv"]\n'
                        'condition_files: ["conditions.tsv"]')
    (folder / "problem.yaml").write_text(text)
    return folder / "problem.yaml"
