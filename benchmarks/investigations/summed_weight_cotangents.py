"""Summed weight cotangents on the 5-state problem (target: 1,000 experiments at
most 200x one in JAX): ours with ``JaxOptions.summed_weight_cotangents`` on (the default)
and off (JAX's own derivative rules), called in turn in one process.

    python benchmarks/investigations/summed_weight_cotangents.py [--sizes 1 100 1000] [--repeats 5]

Objective + gradient (reverse mode), float64, ``dopri8``, ``rtol = atol = 1e-8``.
Prints min / median ms of both per size, their ratio, each one's time over its own
one-experiment time (the first size), and the largest relative difference of the
two gradients (the order of a sum: ~1e-16).
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


def measure(n: int, repeats: int) -> dict:
    from petab_sciml import load_problem
    from tests.support.problems.five_state import write_five_state

    with tempfile.TemporaryDirectory() as tmp:
        problem = load_problem(write_five_state(Path(tmp), n), backend="jax")
        summed = problem.simulator(cache=False)
        rules = problem.simulator(cache=False, summed_weight_cotangents=False)
        a, b = summed.evaluate(), rules.evaluate()
        ga, gb = a.grad_flat, b.grad_flat   # every parameter estimated
        diff = float(np.max(np.abs(ga - gb)) / np.max(np.abs(gb)))
        (s_min, s_med), (r_min, r_med) = timed_together([summed.evaluate, rules.evaluate],
                                                        repeats)
        return {"summed": (s_min, s_med), "rules": (r_min, r_med), "diff": diff,
                "mode": summed.executor.sensitivity}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| experiments | summed min / median ms | JAX rules min / median ms | "
          "summed / rules (min) | summed / one | rules / one | gradient rel diff |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    first = None
    for n in args.sizes:
        out = measure(n, args.repeats)
        if first is None:
            first = out
        s, r = out["summed"], out["rules"]
        print(f"| {n} | {s[0]:.1f} / {s[1]:.1f} | {r[0]:.1f} / {r[1]:.1f} | "
              f"{s[0] / r[0]:.2f}x | {s[0] / first['summed'][0]:.0f}x | "
              f"{r[0] / first['rules'][0]:.0f}x | {out['diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
