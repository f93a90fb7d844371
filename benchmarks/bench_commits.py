"""Objective + gradient time of two source trees side by side: a check that a change
costs no speed (the issue-30 refactor: within 5%).

    python benchmarks/bench_commits.py BEFORE_TREE [--cases 001 002 004] [--rounds 5]
        [--calls 30] [--backends jax torch] [--scaled]

``BEFORE_TREE`` is a folder holding the other commit's package laid out for import
(see ``suite_results.py``'s docstring: ``git archive`` and copy ``backends``/``formats``
into ``petab_sciml``).  Each round runs one fresh process per tree, in turn, per case
and backend (one thread; JAX without the disk cache; PyTorch with eager solves,
``compile=False``, the same path in both trees); a process times ``--calls``
``value_and_grad`` calls after a warm-up call and reports their minimum and median CPU
time.  The ratio printed is after / before of the median over rounds of each process's
minimum (the figure least touched by other load); over 1.05 fails the 5% target.
``--scaled`` adds the bundled example scaled to 10 and 30 experiments (the experiments
table) and suite case 001 with a 64-wide network (the width table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def problem_path(case: str, tmp: Path) -> Path:
    sys.path.insert(0, str(REPO))
    if case.startswith("lv"):
        from tests.support.problems.scaled_lv import write_scaled_lv

        folder = tmp / case
        if not (folder / "problem.yaml").exists():
            write_scaled_lv(folder, int(case[2:]))
        return folder / "problem.yaml"
    if case.startswith("wide"):
        from tests.support.problems.widened import write_widened_problem

        folder = tmp / case
        if not (folder / "problem.yaml").exists():
            write_widened_problem(int(case[4:]), folder, problem_path("001", tmp).parent)
        return folder / "problem.yaml"
    from petab_sciml.testcases import suite_problem

    return suite_problem(case)


def worker(path: str, backend: str, calls: int) -> dict:
    import numpy as np

    if backend == "torch":
        import torch

        torch.set_num_threads(1)
    from petab_sciml.problem import load_problem

    problem = load_problem(path, backend=backend)
    sim = problem.simulator(**({"cache": False} if backend == "jax" else {"compile": False}))
    w0 = problem.plan.w0
    sim.value_and_grad(w0)
    rng = np.random.default_rng(0)
    times = []
    for _ in range(calls):
        w = w0 * rng.uniform(0.999, 1.001, w0.shape)
        c = time.process_time()
        sim.value_and_grad(w)
        times.append(time.process_time() - c)
    import petab_sciml

    return {"min": min(times), "median": statistics.median(times),
            "package": str(Path(petab_sciml.__file__).parent)}


def run(tree: Path | None, path: Path, backend: str, calls: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                        " intra_op_parallelism_threads=1")
    env["PYTHONPATH"] = os.pathsep.join(
        ([str(tree)] if tree else []) + [str(REPO), env.get("PYTHONPATH", "")])
    code = (f"import json, sys; sys.path.insert(0, {str(tree or REPO)!r}); "
            f"sys.path.insert(1, {str(Path(__file__).parent)!r}); "
            f"from bench_commits import worker; "
            f"print(json.dumps(worker({str(path)!r}, {backend!r}, {calls})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"worker failed ({tree or 'this tree'}, {path}, {backend}):\n"
                         + done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("--cases", nargs="+", default=["001", "002", "004"])
    parser.add_argument("--backends", nargs="+", default=["jax", "torch"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--scaled", action="store_true")
    args = parser.parse_args()
    cases = list(args.cases) + (["lv10", "lv30", "wide64"] if args.scaled else [])
    tmp = Path(tempfile.mkdtemp(prefix="bench_commits_"))
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"before: {args.before}; after: {REPO}; load average {load}", flush=True)
    worst = 0.0
    for case in cases:
        path = problem_path(case, tmp)
        for backend in args.backends:
            before, after = [], []
            for _ in range(args.rounds):
                before.append(run(args.before, path, backend, args.calls)["min"])
                after.append(run(None, path, backend, args.calls)["min"])
            b, a = statistics.median(before), statistics.median(after)
            worst = max(worst, a / b)
            print(f"{case:7s} {backend:5s} before {b * 1e3:8.2f} ms  after {a * 1e3:8.2f} ms "
                  f"CPU  after/before {a / b:.3f}", flush=True)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"largest after/before {worst:.3f} (target <= 1.05); load average {load}")


if __name__ == "__main__":
    main()
