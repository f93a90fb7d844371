"""What a new user waits for before the first result: imports, loading the bundled
example and its first objective + gradient, each in a fresh process.

    python benchmarks/bench_startup.py [--reps 3] [--problem PATH]

Rows (the median over ``--reps`` fresh processes, wall and CPU seconds of the whole
process, interpreter start included):

* ``python``: the interpreter alone (the baseline every row includes);
* ``import petab_sciml``: the core (numpy only);
* ``import + load``: ``load_problem(problem, backend="jax")`` (JAX, diffrax, sympy,
  libsbml imported; validation, SBML import, the simulation plan);
* ``first value_and_grad, empty cache``: the above plus the first objective + gradient
  with an empty cross-process cache (tracing, export, XLA compilation);
* ``first value_and_grad, filled cache``: the same in a new process after it, the
  compiled objective read from the cache;
* ``fit ...``: ``petab-sciml fit`` of 2 starts x 3 steps in this process (no plots) with
  the export cache off (``PETAB_SCIML_CACHE=0``), empty, and filled by the run before
  (the fit step read from it instead of traced: a resumed fit, a second fit, a Dask
  worker); then the same two with JAX's compilation cache on as well
  (``PETAB_SCIML_XLA_CACHE=1``), which also skips XLA's compilation.

The caches live in a temporary folder (``PETAB_SCIML_CACHE_DIR``, ``XDG_CACHE_HOME``),
so the figures are a fresh clone's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "lotka_volterra_ude" / "problem.yaml"

LOAD = ("from petab_sciml.problem import load_problem; "
        "p = load_problem({problem!r}, backend='jax')")
FIRST = LOAD + "; s = p.simulator(); s.value_and_grad(p.plan.w0)"
FIT = ("from petab_sciml.cli import main; main(['fit', {problem!r}, '--starts', '2', "
       "'--steps', '3', '--in-process', '--no-plots', '--out', {out!r}])")


def _fit_rows(problem: str, tmp: Path, env: dict[str, str]) -> list[tuple[str, str, dict]]:
    def fit(k: int) -> str:   # a new output folder each (fit refuses to overwrite one)
        return FIT.format(problem=problem, out=str(tmp / f"fit{k}"))

    xla = {**env, "PETAB_SCIML_XLA_CACHE": "1",
           "PETAB_SCIML_CACHE_DIR": str(tmp / "cache-xla")}
    return [("fit, cache off", fit(0), {**env, "PETAB_SCIML_CACHE": "0"}),
            ("fit, empty cache", fit(1), env), ("fit, filled cache", fit(2), env),
            ("fit, empty cache, XLA cache on", fit(3), xla),
            ("fit, filled cache, XLA cache on", fit(4), xla)]


def _run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``python -c code`` in a fresh process."""
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--problem", type=Path, default=EXAMPLE)
    args = parser.parse_args()
    problem = str(args.problem.resolve())
    rows: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PETAB_SCIML_CACHE_DIR": str(Path(tmp) / "cache"),
                   "XDG_CACHE_HOME": str(Path(tmp) / "xdg")}
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            for name, code in (("python", "pass"), ("import petab_sciml", "import petab_sciml"),
                               ("import + load", LOAD.format(problem=problem)),
                               ("first value_and_grad, empty cache",
                                FIRST.format(problem=problem)),
                               ("first value_and_grad, filled cache",
                                FIRST.format(problem=problem))):
                rows.setdefault(name, []).append(_run(code, env))
            for name, code, fit_env in _fit_rows(problem, Path(tmp), env):
                rows.setdefault(name, []).append(_run(code, fit_env))
    load = os.getloadavg()
    print(f"{args.problem.name}, {args.reps} fresh processes each, load average "
          f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")
    print(f"| {'step':36s} | wall s | CPU s |")
    print(f"| {'-' * 36} | ---: | ---: |")
    for name, values in rows.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"| {name:36s} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
