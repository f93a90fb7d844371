"""Every official suite problem case in both backends, saved and compared: a check that
a change leaves results unchanged (issue 18: 1e-12 relative, float64).

    python benchmarks/suite_results.py dump OUT.npz [--backends jax torch] [--cases 001 ...]
        [--scaled] [--variants]
    python benchmarks/suite_results.py compare BEFORE.npz AFTER.npz [--rtol 1e-12]

``dump`` evaluates each case of the suite's problem categories (``sciml_problem_import``,
``initialization``) at its nominal parameters with the default options and no cache:
negative log-posterior, log-likelihood, simulations and the gradient with respect to the
free parameters.  ``--scaled`` adds the bundled example, the benchmark-like problems
and the scaled problems (Lotka-Volterra at 10 experiments, two of them with two
periods; the 5-state problem at 6 experiments); ``--variants`` also evaluates each
problem with every sensitivity mode of the backend and with unbatched experiments.
``compare`` prints, per case and backend, the largest difference of
each quantity relative to that quantity's largest magnitude, and exits 1 if one exceeds
``--rtol``.

To compare against another commit, dump with that commit's package first in the path,
e.g. (the package is laid out by pyproject.toml's ``package-dir``)::

    git archive main | tar -x -C /tmp/base_src
    mkdir -p /tmp/base && cp -r /tmp/base_src/petab_sciml /tmp/base/ \\
        && cp -r /tmp/base_src/backends /tmp/base_src/formats /tmp/base/petab_sciml/
    PYTHONPATH=/tmp/base python benchmarks/suite_results.py dump before.npz
    python benchmarks/suite_results.py dump after.npz
    python benchmarks/suite_results.py compare before.npz after.npz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

FIELDS = ("value", "llh", "simulations", "grad")


VARIANTS = {
    "jax": [{"sensitivity": "forward"}, {"sensitivity": "reverse"},
            {"batch_experiments": False}],
    "torch": [{"sensitivity": "autograd"}, {"sensitivity": "adjoint"},
              {"batch_experiments": False}],
}
"""Options evaluated besides the defaults under ``--variants``."""


def scaled_problems(folder: Path) -> list[tuple[str, Path]]:
    """(name, problem YAML) of the problems beside the suite's: the bundled example, the
    benchmark-like problems and the scaled problems, written into ``folder``."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from tests.support.problems.five_state import write_five_state
    from tests.support.problems.scaled_lv import write_scaled_lv

    problems = [("example/lotka_volterra_ude",
                 root / "examples" / "lotka_volterra_ude" / "problem.yaml")]
    benchmark_like = root / "tests" / "support" / "problems" / "benchmark_like"
    for p in sorted(benchmark_like.glob("*/problem.yaml")):
        problems.append((f"benchmark_like/{p.parent.name}", p))
    problems.append(("scaled/lv_10", write_scaled_lv(folder / "lv", 8, n_two_period=2)))
    problems.append(("scaled/five_state_6", write_five_state(folder / "five", 6)))
    return problems


def _evaluate(problem, backend: str, options: dict) -> dict[str, np.ndarray]:
    if backend == "jax":
        options = {"cache": False, **options}
    ev = problem.simulator(**options).evaluate(grad=True)
    return {"value": np.asarray(ev.value, np.float64), "llh": np.asarray(ev.llh, np.float64),
            "simulations": np.asarray(ev.simulations, np.float64),
            "grad": np.asarray(ev.grad_flat, np.float64)}


def dump(out: Path, backends: list[str], only: list[str] | None = None,
         scaled: bool = False, variants: bool = False) -> None:
    import tempfile

    import petab_sciml
    from petab_sciml.problem import load_problem
    from petab_sciml.testcases import PROBLEM_CATEGORIES, default_suite, discover_problems

    suite = default_suite()
    if suite is None:
        raise SystemExit("official suite not found: set PETAB_SCIML_TESTSUITE")
    roots = [suite / "test_cases" / c for c in PROBLEM_CATEGORIES
             if (suite / "test_cases" / c).is_dir()]
    cases = [(f"{c.parent.name}/{c.name}", c / "petab" / "problem.yaml")
             for c in discover_problems(roots)
             if not only or c.name in only or f"{c.parent.name}/{c.name}" in only]
    tmp = tempfile.TemporaryDirectory()
    if scaled:
        cases += scaled_problems(Path(tmp.name))
    print(f"package: {Path(petab_sciml.__file__).parent}; {len(cases)} cases", flush=True)
    arrays: dict[str, np.ndarray] = {}
    for backend in backends:
        for case, yaml in cases:
            t = time.perf_counter()
            problem = load_problem(yaml, backend=backend)
            runs = [("", {})]
            if variants:
                runs += [("[" + ",".join(f"{k}={v}" for k, v in o.items()) + "]", o)
                         for o in VARIANTS[backend]]
            for suffix, options in runs:
                name = f"{backend}/{case}{suffix}"
                result = _evaluate(problem, backend, options)
                for field, value in result.items():
                    arrays[f"{name}/{field}"] = value
                print(f"  {name}: llh {result['llh']:.12g} "
                      f"({time.perf_counter() - t:.1f} s)", flush=True)
    np.savez(out, **arrays)
    tmp.cleanup()


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max(|a|, |b|) over the array (0 for equal arrays, inf where only one
    is finite)."""
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    same_nonfinite = (~np.isfinite(a)) & (~np.isfinite(b)) & ((a == b) | (np.isnan(a)
                                                                  & np.isnan(b)))
    if np.any(np.isfinite(a) != np.isfinite(b)) or np.any((~np.isfinite(a))
                                                          & ~same_nonfinite):
        return float("inf")
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0))
    diff = np.max(np.abs(a - b), initial=0.0)
    return 0.0 if diff == 0 else float(diff / scale)


def compare(before: Path, after: Path, rtol: float) -> int:
    a, b = np.load(before), np.load(after)
    cases = sorted({k.rsplit("/", 1)[0] for k in a.files}
                   | {k.rsplit("/", 1)[0] for k in b.files})
    worst = 0.0
    failed = []
    print(f"{'case':70} " + " ".join(f"{f:>12}" for f in FIELDS))
    for case in cases:
        row = []
        for field in FIELDS:
            key = f"{case}/{field}"
            if key not in a.files or key not in b.files:
                row.append(float("inf"))
                continue
            row.append(relative_difference(a[key], b[key]))
        worst = max(worst, *row)
        if max(row) > rtol:
            failed.append(case)
        print(f"{case:70} " + " ".join(f"{r:12.1e}" for r in row))
    print(f"{len(cases)} case/backend pairs; largest relative difference {worst:.2e} "
          f"(tolerance {rtol:g}); {len(failed)} above")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--backends", nargs="+", default=["jax", "torch"])
    d.add_argument("--cases", nargs="+", help="case names (001) or category/name")
    d.add_argument("--scaled", action="store_true",
                   help="add the example, benchmark-like and scaled problems")
    d.add_argument("--variants", action="store_true",
                   help="also every sensitivity mode and unbatched experiments")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--rtol", type=float, default=1e-12)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, args.backends, args.cases, args.scaled, args.variants)
    else:
        sys.exit(compare(args.before, args.after, args.rtol))


if __name__ == "__main__":
    main()
