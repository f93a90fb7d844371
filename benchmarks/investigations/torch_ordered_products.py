"""What PyTorch's batch-invariant small products cost, and why smooth
right-hand sides do without them.

    python benchmarks/investigations/torch_ordered_products.py [--sizes 1 100 1000]
        [--repeats 3] [--problems lv five_state]

Objective + gradient, ``sensitivity="autograd"`` (experiments as one batched solve),
float64, default tolerances, of the bundled Lotka-Volterra UDE scaled to many
experiments (``tests/support/problems/scaled_lv.py``; network 2-5-5-1, every layer small) and
the 5-state problem (``tests/support/problems/five_state.py``; MLP 5-96-96-1, its first layer
small) with the networks' small Linear products as ``torch.nn.Linear`` computes them
(``ordered_products=False``, what these smooth problems get by default) and forced into
the batch-invariant order (``ordered_products=True``, ``backends/torch/ordered.py``,
what a kinked right-hand side gets).  Per size one process, both simulators built in it
and called in turn (order alternating); prints min / median ms and ordered / library.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def worker(problem: str, n: int, repeats: int) -> dict:
    warnings.filterwarnings("ignore")
    from benchmarks.bench_experiments import timed_together
    from petab_sciml.problem import load_problem

    folder = Path(tempfile.mkdtemp())
    if problem == "lv":
        from tests.support.problems.scaled_lv import write_scaled_lv
        yaml = write_scaled_lv(folder, n)
    else:
        from tests.support.problems.five_state import write_five_state
        yaml = write_five_state(folder, n)
    loaded = load_problem(yaml, backend="torch")
    sims = [loaded.simulator(sensitivity="autograd", ordered_products=flag)
            for flag in (False, True)]
    w = sims[0].plan.w0.copy()
    values = [sim.evaluate(w) for sim in sims]   # first calls
    assert sims[1].executor.ordered_products and not sims[0].executor.ordered_products
    times = timed_together([lambda s=s: s.evaluate(w) for s in sims], repeats)
    diff = abs(values[1].value - values[0].value) / max(1.0, abs(values[0].value))
    return {"problem": problem, "n": n, "library": times[0], "ordered": times[1],
            "value_diff": diff}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--problems", nargs="+", default=["lv", "five_state"],
                        choices=["lv", "five_state"])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        problem, n, repeats = args.worker
        print(json.dumps(worker(problem, int(n), int(repeats))))
        return
    print("| problem | experiments | torch.nn.Linear min / median ms | ordered min / median "
          "ms | ordered / library (min, median) | value rel diff |")
    print("| --- | --- | --- | --- | --- | --- |")
    for problem in args.problems:
        for n in args.sizes:
            out = subprocess.run([sys.executable, __file__, "--worker", problem, str(n),
                                  str(args.repeats)], capture_output=True, text=True,
                                 check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            (lm, lmed), (om, omed) = r["library"], r["ordered"]
            print(f"| {problem} | {n} | {lm:.1f} / {lmed:.1f} | {om:.1f} / {omed:.1f} | "
                  f"{om / lm:.2f}x, {omed / lmed:.2f}x | {r['value_diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
