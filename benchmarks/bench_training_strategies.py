"""Plain training against the three training strategies on a problem where plain
training struggles: the bundled Lotka-Volterra UDE (gamma replaced by a network) with
measurements over about fourteen oscillation periods (t = 0.5 ... 60), from random
network weights.

    python benchmarks/bench_training_strategies.py [--backends jax torch] [--starts 5]
        [--steps 300] [--plot docs/training_strategies.png]

Per method and backend: the original problem's final objective of each start (median and
best), the error of the learned term (RMS of the network's gamma along the fitted
trajectory against the true 0.8, median over starts), the optimizer steps taken in all
stages, and the wall time.  Starts are seed 0's starts 0 .. K-1 (drawn on the original
problem; the same for every method of one backend).  "plain, as many steps" trains as
many steps as the 4-stage strategies take in all stages.  Strategies: curriculum (4 stages),
multiple shooting (8 windows, penalty 10), curriculum multiple shooting (4 stages,
penalty 10); each earlier stage gets --steps / stages steps, the last --steps.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lotka_volterra_ude"
TRUE = {"alpha": 1.3, "beta": 0.9, "gamma": 0.8, "delta": 1.8}
X0 = (0.44, 4.6)
TIMES = np.arange(0.5, 60.01, 0.5)
NOISE_SD = 0.05
METHODS = {
    "plain": None,
    "plain, as many steps": "long",
    "curriculum": {"stages": 4},
    "multiple-shooting": {"stages": 8, "penalty": 10.0},
    "curriculum-multiple-shooting": {"stages": 4, "penalty": 10.0},
}


def write_problem(folder: Path, probe: bool = False) -> Path:
    """The long-horizon problem; ``probe``: instead of the data, an observable of the
    network's gamma at every measurement time (the learned term, for its error)."""
    from scipy.integrate import solve_ivp

    folder.mkdir(parents=True)
    for name in ("lv.xml", "net1.yaml", "net1_ps.hdf5", "hybridization.tsv", "mapping.tsv",
                 "experiments.tsv", "parameters.tsv", "observables.tsv", "problem.yaml"):
        shutil.copy(EXAMPLE / name, folder / name)
    a, b, g, d = TRUE["alpha"], TRUE["beta"], TRUE["gamma"], TRUE["delta"]
    sol = solve_ivp(lambda t, x: [a * x[0] - b * x[0] * x[1], g * x[0] * x[1] - d * x[1]],
                    (0.0, TIMES[-1]), X0, t_eval=TIMES, rtol=1e-10, atol=1e-10)
    rng = np.random.default_rng(2026)
    rows = ["observableId\texperimentId\tmeasurement\ttime"]
    if probe:
        with open(folder / "observables.tsv", "a") as fh:
            fh.write("\ngamma_obs\tgamma\t1.0\tlin\tnormal\n")
        rows += [f"gamma_obs\tlv_experiment\t0.0\t{t:g}" for t in TIMES]
    else:
        for k, obs in enumerate(("prey_obs", "predator_obs")):
            rows += [f"{obs}\tlv_experiment\t{v + rng.normal(0, NOISE_SD):.10g}\t{t:g}"
                     for t, v in zip(TIMES, sol.y[k], strict=True)]
    (folder / "measurements.tsv").write_text("\n".join(rows) + "\n")
    return folder / "problem.yaml"


def run(method: str, backend: str, problem: Path, out: Path, starts: int, steps: int
        ) -> tuple[list[np.ndarray], list[float], int, float]:
    """(final parameters per start in the original layout, original objectives, steps in
    all stages, wall seconds)."""
    from petab_sciml.fit import fit
    from petab_sciml.fit.strategy import fit_strategy

    common = {"starts": starts, "seed": 0, "backend": backend, "out": out, "force": True,
              "plots": False, "progress": False, "in_process": True, "lr": 0.01}
    t = time.perf_counter()
    settings = METHODS[method]
    if settings in (None, "long"):
        # "long": as many steps as the 4-stage strategies take in all their stages
        steps = steps + 3 * (steps // 4) if settings == "long" else steps
        result = fit(str(problem), steps=steps, **common)
        ws = [r.w for r in sorted(result.starts, key=lambda r: r.start)]
        values = [r.value for r in sorted(result.starts, key=lambda r: r.start)]
        return ws, values, steps, time.perf_counter() - t
    n = settings["stages"]
    result = fit_strategy(problem, method, steps=steps, stage_steps=max(1, steps // n),
                          **settings, **common)
    total = sum(s.result.settings["steps"] for s in result.stages)
    return (result.original_w, list(result.stages[-1].original_values), total,
            time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["jax"])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    from petab_sciml.problem import load_problem

    tmp = Path(tempfile.mkdtemp(prefix="bench_strategies_"))
    problem = write_problem(tmp / "problem")
    probe = load_problem(write_problem(tmp / "probe", probe=True), backend="jax")
    probe_sim = probe.simulator(cache=False)
    table, curves = [], {}
    for backend in args.backends:
        for method in args.methods:
            ws, values, total, seconds = run(method, backend, problem,
                                             tmp / f"{backend}_{method}", args.starts,
                                             args.steps)
            errors = []
            for w in ws:
                ev = probe_sim.evaluate(w, grad=False)
                errors.append(float(np.sqrt(np.mean((ev.simulations - TRUE["gamma"]) ** 2)))
                              if ev.ok else float("inf"))
            curves[backend, method] = values
            table.append((method, backend, statistics.median(values), min(values),
                          statistics.median(errors), total, seconds))
            print(f"{backend} {method}: median {statistics.median(values):.4g}, best "
                  f"{min(values):.4g}, term error {statistics.median(errors):.3g}, "
                  f"{seconds:.0f} s", flush=True)
    print(f"\n{len(TIMES)} times x 2 observables, t = 0.5 ... 60, {args.starts} starts, "
          f"--steps {args.steps}\n")
    print("| method | backend | original objective, median | best | learned-term RMS "
          "error, median | steps (all stages) | wall s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for m, b, med, best, err, total, s in table:
        print(f"| {m} | {b} | {med:.4g} | {best:.4g} | {err:.3g} | {total} | {s:.0f} |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        for i, values in enumerate(curves.values()):
            ax.scatter([i] * len(values), values, s=18)
        ax.set_xticks(range(len(curves)), [f"{m}\n({b})" for b, m in curves], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("original objective after training")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
