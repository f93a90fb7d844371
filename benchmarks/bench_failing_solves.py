"""CPU time of a failing solve in JAX and PyTorch: the stiff and the long-horizon problem
of ``tests/support/hostile_solves.py``, each evaluated once at its nominal values in a fresh
process (``tests/support/hostile_evaluate.py``: import, load, compile and solve), with the step
budget ``--max-steps`` (default: the backends' default ``max_steps``).

Prints per problem and backend: exit status, CPU seconds (user + system), the evaluation's
line, and PyTorch's CPU time over JAX's.

    python benchmarks/bench_failing_solves.py [--max-steps N] [--timeout S]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.hostile_solves import long_horizon_problem, stiff_problem  # noqa: E402

PROBLEMS = {"stiff": stiff_problem, "long horizon (t = 1e9)": long_horizon_problem}


def run(problem: Path, backend: str, options: list[str], timeout: float
        ) -> tuple[int, float, float, str]:
    """(exit status, CPU seconds, wall seconds, last output line) of one evaluation."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PETAB_SCIML_CACHE": "0"}
    try:
        script = REPO / "tests" / "support" / "hostile_evaluate.py"
        done = subprocess.run([sys.executable, str(script),
                               str(problem), backend, *options], capture_output=True,
                              text=True, timeout=timeout, env=env)
        code, text = done.returncode, (done.stdout.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        code, text = -1, f"still running after {timeout:.0f} s (killed)"
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, cpu, time.monotonic() - start, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, help="step budget of both backends")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    options = [f"max_steps={args.max_steps}"] if args.max_steps else []
    with tempfile.TemporaryDirectory() as scratch:
        for k, (name, build) in enumerate(PROBLEMS.items()):
            problem = build(Path(scratch) / str(k))
            cpu = {}
            for backend in ("jax", "torch"):
                code, cpu[backend], wall, text = run(problem, backend, options,
                                                     args.timeout)
                print(f"{name:24s} {backend:6s} exit {code:3d}  CPU {cpu[backend]:7.1f} s  "
                      f"wall {wall:7.1f} s  {text[:110]}", flush=True)
            print(f"{name:24s} PyTorch / JAX CPU time: {cpu['torch'] / cpu['jax']:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
