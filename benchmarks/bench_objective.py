"""Objective + gradient: time per evaluation and first-call time, JAX and PyTorch, on
the suite's SciML problem-import cases 001 (network in the right-hand side), 002
(pre-initialization network) and 004 (network in an observable).

    python benchmarks/bench_objective.py [--cases 001 002 004] [--evals 30]
                                         [--backends jax torch] [--json]

Every measurement runs in a fresh subprocess:

* ``first call``: the first ``value_and_grad`` after loading, with every cache off
  (JAX: tracing + XLA compilation + the run; PyTorch: the run);
* ``first call, export``: the same with the cross-process cache on and empty (tracing,
  export to the cache, compilation);
* ``reloaded``: a new process loading the same problem with that cache filled (the
  exported computation is deserialized instead of traced, XLA's persistent compilation
  cache skips compilation);
* ``per eval``: median wall time of ``value_and_grad`` over ``--evals`` calls at
  perturbed parameters (after the first call);
* ``load``: ``load_problem`` (validation, SBML import, simulation plan) plus building the
  simulator, imports excluded.

When AMICI is importable, its JAX path runs on the same cases in the same run and the
ratios are printed against it; otherwise against reference figures of AMICI on this
kind of machine (``AMICI_REFERENCE``: 0.29-0.55 s per objective+gradient, 14-23 s first
call), marked as such.  CPU load from other processes inflates every figure; the CPU time of
the process is printed next to the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = ("001", "002", "004")
AMICI_REFERENCE = {"eval": (0.29, 0.55), "first": (14.0, 23.0)}


def suite_case(case: str) -> Path:
    sys.path.insert(0, str(REPO))
    from petab_sciml.testcases import suite_problem

    return suite_problem(case)


# ----------------------------------------------------------------------------- workers
def worker(case: str, backend: str, cache_dir: str | None, evals: int) -> dict:
    import numpy as np

    from petab_sciml.problem import load_problem

    path = suite_case(case)
    if backend == "jax":
        import diffrax  # noqa: F401 - imports are not part of the figures
        import jax  # noqa: F401
    else:
        import torch  # noqa: F401
        import torchdiffeq  # noqa: F401
    t0 = time.perf_counter()
    problem = load_problem(path, backend=backend)
    options = {}
    if backend == "jax":
        options = {"cache": cache_dir is not None, "cache_dir": cache_dir}
    sim = problem.simulator(**options)
    t1 = time.perf_counter()
    c1 = time.process_time()
    p = problem.parameters()
    first = sim.evaluate(p)
    t2 = time.perf_counter()
    c2 = time.process_time()
    rng = np.random.default_rng(0)
    times = []
    for _ in range(evals):
        q = problem.parameters()
        q["mech"] = q["mech"] * rng.uniform(0.99, 1.01, q["mech"].shape)
        t = time.perf_counter()
        sim.evaluate(q)
        times.append(time.perf_counter() - t)
    return {"case": case, "backend": backend, "load": t1 - t0, "first": t2 - t1,
            "first_cpu": c2 - c1, "eval": float(np.median(times)) if times else None,
            "eval_min": float(np.min(times)) if times else None, "llh": first.llh,
            "cache_events": list(sim.cache.events) if sim.cache is not None else [],
            "sensitivity": getattr(sim.executor, "sensitivity", None)}


def amici_worker(case: str, evals: int) -> dict:
    """AMICI's JAX path (best effort: AMICI's PEtab SciML import API)."""
    import numpy as np

    t0 = time.perf_counter()
    import equinox as eqx
    import petab.v2 as petab  # type: ignore[import-not-found]
    from amici.jax import JAXProblem, run_simulations  # type: ignore[import-not-found]
    from amici.petab.petab_import import import_petab_problem  # type: ignore

    petab_problem = petab.Problem.from_yaml(suite_case(case))
    model = import_petab_problem(petab_problem, jax=True)
    problem = JAXProblem(model, petab_problem)
    t1 = time.perf_counter()

    def objective(prob):
        llh, _ = run_simulations(prob)
        return -llh

    value_and_grad = eqx.filter_jit(eqx.filter_value_and_grad(objective))
    v, _ = value_and_grad(problem)
    t2 = time.perf_counter()
    times = []
    for _ in range(evals):
        t = time.perf_counter()
        v, g = value_and_grad(problem)
        v.block_until_ready()
        times.append(time.perf_counter() - t)
    return {"case": case, "backend": "amici-jax", "load": t1 - t0, "first": t2 - t1,
            "eval": float(np.median(times)), "llh": -float(v)}


def run_worker(args: list[str]) -> dict | None:
    cmd = [sys.executable, __file__, "--worker", *args]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        print(f"  {' '.join(args)}: failed: {tail[0]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--backends", nargs="*", default=["jax", "torch"])
    parser.add_argument("--evals", type=int, default=30)
    parser.add_argument("--torch-evals", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs="*")
    args = parser.parse_args()
    if args.worker is not None:
        kind, case, *rest = args.worker
        if kind == "amici":
            out = amici_worker(case, int(rest[0]))
        else:
            cache = None if rest[0] == "-" else rest[0]
            out = worker(case, kind, cache, int(rest[1]))
        print(json.dumps(out))
        return

    amici = _amici_available()
    rows = []
    for case in args.cases:
        for backend in args.backends:
            if backend == "jax":
                cold = run_worker(["jax", case, "-", str(args.evals)])
                with tempfile.TemporaryDirectory(prefix="petab_sciml_bench_") as tmp:
                    export = run_worker(["jax", case, tmp, "0"])
                    warm = run_worker(["jax", case, tmp, "0"])
                if cold:
                    cold["first_export"] = export["first"] if export else None
                    cold["reloaded"] = warm["first"] if warm else None
                    cold["reload_events"] = warm["cache_events"] if warm else None
                    rows.append(cold)
            else:
                row = run_worker(["torch", case, "-", str(args.torch_evals)])
                if row:
                    rows.append(row)
        if amici:
            row = run_worker(["amici", case, str(args.evals)])
            if row:
                rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    _print(rows, amici)


def _amici_available() -> bool:
    try:
        import amici  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def _print(rows: list[dict], amici: bool) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"objective + gradient, float64 (load average {load:.1f} on {os.cpu_count()} CPUs)")
    head = (f"{'case':5} {'backend':9} {'load s':>7} {'first call s':>13} {'(cpu s)':>8} "
            f"{'w/ export s':>11} {'reloaded s':>10} {'per eval ms':>11} {'llh':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        def f(key, scale=1.0, fmt="{:.2f}", r=r):
            v = r.get(key)
            return fmt.format(v * scale) if isinstance(v, float) else "-"
        print(f"{r['case']:5} {r['backend']:9} {f('load'):>7} {f('first'):>13} "
              f"{f('first_cpu'):>8} {f('first_export'):>11} {f('reloaded'):>10} "
              f"{f('eval', 1e3, '{:.1f}'):>11} {r['llh']:12.6f}")
    print()
    by_case: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["backend"]] = r
    if amici:
        print("ratios against AMICI's JAX path measured in this run (higher is better):")
    else:
        lo, hi = AMICI_REFERENCE["eval"]
        flo, fhi = AMICI_REFERENCE["first"]
        print("AMICI is not importable here: ratios use reference AMICI figures "
              f"({lo}-{hi} s per evaluation, {flo:.0f}-{fhi:.0f} s first call), not a "
              "measurement (higher is better):")
    for case, results in by_case.items():
        for backend in ("jax", "torch"):
            r = results.get(backend)
            if r is None or not r.get("eval"):
                continue
            if amici and "amici-jax" in results:
                a = results["amici-jax"]
                ev = f"{_ratio(a['eval'] / r['eval'])}x"
                first = f"{a['first'] / r['first']:.1f}x"
                reload = f"{a['first'] / r['reloaded']:.0f}x" if r.get("reloaded") else "-"
            else:
                ev = (f"{_ratio(AMICI_REFERENCE['eval'][0] / r['eval'])}-"
                      f"{_ratio(AMICI_REFERENCE['eval'][1] / r['eval'])}x")
                first = (f"{AMICI_REFERENCE['first'][0] / r['first']:.1f}-"
                         f"{AMICI_REFERENCE['first'][1] / r['first']:.1f}x")
                reload = (f"{AMICI_REFERENCE['first'][0] / r['reloaded']:.0f}x+"
                          if r.get("reloaded") else "-")
            print(f"  {case} {backend:6} per evaluation {ev:>9}   first call {first:>9}   "
                  f"reloaded first call {reload}")


def _ratio(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


if __name__ == "__main__":
    main()
