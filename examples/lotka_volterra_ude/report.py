"""How well a fit of the bundled example recovered what generated its data.

    python examples/lotka_volterra_ude/report.py FIT_OUT

``FIT_OUT`` is the output folder of ``petab-sciml fit`` on this example.  Prints, for the
best start (``FIT_OUT/best/problem.yaml``): each mechanistic parameter against the value
the data were generated with (``make_example.TRUE``) and its relative error, and the RMS
error of the network term against the true ``gamma`` (0.8) over the data range: the
network evaluated at every measured (prey, predator) pair.  Writes
``FIT_OUT/plots/term_net1.png`` again, with the true gamma: the learned term over the
range the trajectories reach, and learned - true.  Exits 1 if a mechanistic parameter is
more than ``--tolerance`` (default 5%) off.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_example import TRUE  # noqa: E402


def network_term_rms(problem) -> float:
    """RMS of (network output - true gamma) over the measured (prey, predator) pairs."""
    plan = problem.plan
    m = plan.measurements
    prey = m.value[m.observable == plan.observable_ids.index("prey_obs")]
    predator = m.value[m.observable == plan.observable_ids.index("predator_obs")]
    backend = problem.backend
    net = backend.set_parameters(backend.build(problem.networks["net1"], dtype="float64"),
                                 problem.parameters["net1"].values)
    (gamma,) = backend.forward(net, [np.stack([prey, predator], axis=1)])
    return float(np.sqrt(np.mean((np.asarray(gamma).reshape(-1) - TRUE["gamma"]) ** 2)))


def plot_learned_term(out: Path):
    """``out/plots/term_net1.png`` of the best start with the true gamma; returns the
    figure."""
    from petab_sciml.fit import learned_terms, plots
    from petab_sciml.problem import load_problem

    problem = load_problem(out / "best" / "problem.yaml", backend="jax")
    terms = learned_terms(problem, problem.simulator(cache=False), problem.plan.w0)
    truth = {"net1_gamma": lambda points: np.full(len(points), TRUE["gamma"])}
    return plots.learned_terms(terms, out / "plots", truth=truth)["term_net1"]


def main() -> int:
    from petab_sciml.problem import load_problem

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="output folder of petab-sciml fit")
    parser.add_argument("--tolerance", type=float, default=0.05)
    args = parser.parse_args()
    problem = load_problem(args.out / "best" / "problem.yaml", backend="jax")
    plan = problem.plan
    worst = 0.0
    print("best start, against the values the data were generated with:")
    for pid, value in zip(plan.mech_ids, plan.w0[: plan.n_mech]):
        error = abs(value - TRUE[pid]) / TRUE[pid]
        worst = max(worst, error)
        print(f"  {pid:6s} {value:8.4f}  (true {TRUE[pid]:.2f}, {100 * error:.1f}% off)")
    rms = network_term_rms(problem)
    print(f"  network term gamma(prey, predator): RMS error {rms:.3f} over the data range "
          f"(true gamma {TRUE['gamma']})")
    plot_learned_term(args.out)
    print(f"  learned and true gamma: {args.out / 'plots' / 'term_net1.png'}")
    if worst > args.tolerance:
        print(f"a mechanistic parameter is {100 * worst:.1f}% off (more than "
              f"{100 * args.tolerance:g}%): more starts or steps are needed")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
