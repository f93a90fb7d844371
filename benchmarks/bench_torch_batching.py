"""PyTorch: experiments solved as one batched solve against one after another, on
the bundled Lotka-Volterra UDE scaled to many experiments
(``tests/support/problems/scaled_lv.py``, as ``bench_experiments.py`` for JAX).

    python benchmarks/bench_torch_batching.py [--sizes 1 10 100] [--repeats 3]
                                              [--sensitivity forward]

Per size, in one process: objective + gradient (numpy API, eager solves, float64,
``dopri8``, ``rtol = atol = 1e-8``) batched (default) and with
``batch_experiments=False``, called in turn (order alternating); min / median ms, batched /
one experiment, unbatched / batched, and the largest relative difference between the two
(value, simulations, gradient).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_experiments import timed_together  # noqa: E402


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))) if a.size else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sensitivity", default="forward", choices=["forward", "autograd"])
    args = parser.parse_args()

    import torch

    from petab_sciml.problem import load_problem
    from tests.support.problems.scaled_lv import write_scaled_lv

    torch.set_num_threads(1)
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            problem = load_problem(write_scaled_lv(Path(tmp), n), backend="torch")
            batched = problem.simulator(sensitivity=args.sensitivity)
            unbatched = problem.simulator(sensitivity=args.sensitivity,
                                          batch_experiments=False)
            eb, eu = batched.evaluate(), unbatched.evaluate()
            diff = max(_rel(eb.value, eu.value), _rel(eb.simulations, eu.simulations),
                       _rel(eb.grad_flat, eu.grad_flat))
            b, u = timed_together([batched.evaluate, unbatched.evaluate], args.repeats)
            rows.append((n, b, u, diff))
            print(f"{n} experiments: batched {b[0]:.0f} / {b[1]:.0f} ms, unbatched "
                  f"{u[0]:.0f} / {u[1]:.0f} ms, max rel diff {diff:.1e}", flush=True)
    one = next((r[1][0] for r in rows if r[0] == 1), None)
    print()
    print(f"| experiments | batched min / median ms | unbatched min / median ms | batched / one "
          f"experiment (min) | unbatched / batched (min) | rel diff ({args.sensitivity}) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, b, u, d in rows:
        ratio = f"{b[0] / one:.1f}x" if one else "-"
        print(f"| {n} | {b[0]:.0f} / {b[1]:.0f} | {u[0]:.0f} / {u[1]:.0f} | {ratio} | "
              f"{u[0] / b[0]:.1f}x | {d:.1e} |")


if __name__ == "__main__":
    main()
