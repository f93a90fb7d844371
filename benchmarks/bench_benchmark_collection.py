"""The PEtab benchmark collection's models (``../shared/petab_benchmark``, or
``$PETAB_BENCHMARK``): per model and backend, in a fresh process each, load time, first
call (objective, compile included), the log-likelihood at the nominal parameters against
``reference.yaml``, and the times of one objective and one objective + gradient after
warm-up, beside AMICI's own per-model budgets (``t_sim``, ``t_fwd``, ``t_adj`` of its
benchmark reference file, as ``reference.yaml`` quotes them).

    python benchmarks/bench_benchmark_collection.py [--models A B] [--backends jax torch]
        [--timeout 300] [--reps 3] [--option solver=kvaerno5 ...] [--json OUT]

Default options unless ``--option`` is given (what a user gets).  A model whose process
runs past ``--timeout`` seconds of wall time is reported as such.  Times are wall
seconds (one thread of torch; JAX as configured by default), minimum over ``--reps``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-3
"""Absolute llh tolerance of the acceptance (issue 32)."""

CHILD = textwrap.dedent("""
    import json, sys, time, warnings
    import numpy as np
    path, backend, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = json.loads(sys.argv[4])
    out = {}
    warns = []
    def note(message, *a, **k):
        warns.append(str(message).splitlines()[0][:160])
    warnings.showwarning = note
    if backend == "torch":
        import torch
        torch.set_num_threads(1)
    from petab_sciml.problem import load_problem
    t = time.perf_counter()
    problem = load_problem(path, backend=backend)
    sim = problem.simulator(**options)
    out["load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ev = sim.evaluate(grad=False)
    out["first_s"] = time.perf_counter() - t
    out["llh"] = float(ev.llh)
    out["ok"] = bool(ev.ok)
    out["reason"] = ev.reason
    out["solver"] = getattr(sim.executor.options, "solver", None) or \\
        getattr(sim.executor.options, "method", None)
    print(json.dumps(out), flush=True)
    if ev.ok:
        best = []
        for _ in range(reps):
            t = time.perf_counter(); sim.evaluate(grad=False)
            best.append(time.perf_counter() - t)
        out["objective_s"] = min(best)
        sim.evaluate(grad=True)
        best = []
        for _ in range(reps):
            t = time.perf_counter(); sim.evaluate(grad=True)
            best.append(time.perf_counter() - t)
        out["gradient_s"] = min(best)
    out["warnings"] = warns
    print(json.dumps(out), flush=True)
""")


def benchmark_root() -> Path:
    return Path(os.environ.get("PETAB_BENCHMARK") or REPO.parent / "shared" / "petab_benchmark")


def run_model(problem: Path, backend: str, options: dict, timeout: float, reps: int) -> dict:
    """One model in one backend, in a fresh process: the child's last JSON line (partial
    when it timed out after the first call), plus ``wall_s`` and ``error``."""
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(problem), backend, str(reps),
                               json.dumps(options)], capture_output=True, text=True,
                              timeout=timeout, env=env)
        stdout, error = done.stdout, (None if done.returncode == 0 else
                                      (done.stderr.strip().splitlines() or ["?"])[-1])
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        error = f"timed out after {timeout:.0f} s"
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    out["wall_s"] = time.monotonic() - start
    out["error"] = error
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--backends", nargs="*", default=["jax", "torch"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--option", action="append", default=[],
                        help="simulator option NAME=VALUE (numbers parsed)")
    parser.add_argument("--json", type=Path, help="write every result to this file")
    args = parser.parse_args()
    root = benchmark_root()
    reference = yaml.safe_load((root / "reference.yaml").read_text())
    models = args.models or sorted(reference)
    options = {}
    for item in args.option:
        key, value = item.split("=", 1)
        try:
            options[key] = float(value) if "." in value or "e" in value else int(value)
        except ValueError:
            options[key] = value
    print(f"# {root}, options {options or 'default'}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print("| model | backend | load s | first call s | llh - reference | ok | objective s "
          "| objective + gradient s | AMICI t_sim / t_fwd / t_adj s | note |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    results = []
    for model in models:
        problem = root / model / f"{model}.yaml"
        if not problem.exists():
            problem = root / model / "problem.yaml"
        ref = reference.get(model) or {}
        for backend in args.backends:
            r = run_model(problem, backend, options, args.timeout, args.reps)
            r.update(model=model, backend=backend)
            results.append(r)
            llh, want = r.get("llh"), ref.get("llh")
            diff = "-" if llh is None else ("no reference" if want is None
                                             else f"{llh - want:+.2g}")
            if llh is not None and want is not None and abs(llh - want) <= TOL:
                diff += " (match)"
            budgets = " / ".join(_fmt(ref.get(k)) for k in ("t_sim", "t_fwd", "t_adj"))
            note = r["error"] or r.get("reason") or ""
            if r.get("warnings"):
                note = (note + " " + "; ".join(sorted(set(r["warnings"])))[:200]).strip()
            print(f"| {model} | {backend} | {_fmt(r.get('load_s'))} | "
                  f"{_fmt(r.get('first_s'))} | {diff} | {r.get('ok', '-')} | "
                  f"{_fmt(r.get('objective_s'))} | {_fmt(r.get('gradient_s'))} | {budgets} | "
                  f"{note.replace('|', '/')[:240]} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
