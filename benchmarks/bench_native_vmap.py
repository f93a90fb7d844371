"""Vmapped starts against one start, for the JAX simulation of this checkout and of an
earlier commit, measured in one process (issue 11 point 5: 16 starts <= 4x one).

    python benchmarks/bench_native_vmap.py [--case 001] [--starts 16] [--rounds 15]
                                           [--before 0d24b8d]

``--before``: a commit whose ``backends/jax/simulation.py`` is loaded next to the current
one (``git show``; default: none, current code only).  One start (``filter_value_and_grad
(loss)``) and the vmapped batch of each version are called in turn, ``rounds`` times;
prints minima, medians and the batch/one ratios of both.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODULE = "petab_sciml.backends.jax.simulation"


def load_old_simulation(commit: str):
    source = subprocess.run(["git", "show", f"{commit}:backends/jax/simulation.py"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "simulation_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(MODULE + "_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="001")
    parser.add_argument("--starts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--before", help="commit of the earlier simulation.py")
    args = parser.parse_args()

    import equinox as eqx
    import jax

    import petab_sciml.backends.jax.simulation as current
    from petab_sciml.backends.jax.problem import loss, stack
    from petab_sciml.problem import load_problem
    from petab_sciml.testcases import default_suite

    suite = default_suite()
    if suite is None:
        raise SystemExit("official suite not found: set PETAB_SCIML_TESTSUITE")
    problem = load_problem(suite / "test_cases" / "sciml_problem_import" / args.case / "petab"
                           / "problem.yaml", backend="jax")
    models = {"after": problem.model()}
    if args.before:
        sys.modules[MODULE] = load_old_simulation(args.before)
        try:
            models["before"] = problem.model()
        finally:
            sys.modules[MODULE] = current
    one = eqx.filter_jit(eqx.filter_value_and_grad(loss, has_aux=True))
    many = eqx.filter_jit(eqx.filter_vmap(eqx.filter_value_and_grad(loss, has_aux=True)))
    calls = {}
    for name, model in models.items():
        batch = stack([jax.tree_util.tree_map(lambda x, s=s: x * (1 + 1e-3 * s), model)
                       for s in range(args.starts)])
        calls[(name, "one")] = lambda m=model: jax.block_until_ready(one(m)[0][0])
        calls[(name, "many")] = lambda b=batch: jax.block_until_ready(many(b)[0][0])
    for call in calls.values():
        call()
    times = {key: [] for key in calls}
    for _ in range(args.rounds):
        for key, call in calls.items():
            t = time.perf_counter()
            call()
            times[key].append(time.perf_counter() - t)
    print(f"case {args.case}, {args.starts} starts, {args.rounds} rounds")
    for name in models:
        o, m = times[(name, "one")], times[(name, "many")]
        med_o, med_m = statistics.median(o), statistics.median(m)
        print(f"  {name:6s} one {min(o) * 1e3:7.2f} / {med_o * 1e3:7.2f} ms"
              f"  vmap {min(m) * 1e3:7.2f} / {med_m * 1e3:7.2f} ms (min / median)"
              f"  ratio {min(m) / min(o):.2f}x / {med_m / med_o:.2f}x")


if __name__ == "__main__":
    main()
