"""Step-size controller of the JAX solves (``petab_sciml.simulation.steps``): diffrax's
I controller ``(pcoeff, icoeff) = (0, 1)`` everywhere against the default (the PI
controller ``(0.4, 0.6)`` for explicit solvers in reverse mode and forward-ad), per
problem and in a fresh process each.

For each controller: which solver the default simulator ends up with (the explicit
``dopri8``, or ``kvaerno5`` after the stiff fallback), the log-likelihood, the time of
one objective + gradient with default options, and the error of the gradient of
reverse mode (the default above ``FORWARD_MODE_MAX``) and of the default, each as its
largest deviation from a reference over the reference's largest entry.  The reference
is forward sensitivities (error-controlled) at ``rtol = atol = 1e-10`` with the solver
the default ended up with (reverse mode at ``1e-10`` where that is implicit), computed
in the same process with the same controller.

    python benchmarks/bench_step_control.py [--models A B ...] [--cases 036 038 ...]
        [--timeout 600] [--json OUT]

Models come from ``../shared/petab_benchmark`` (or ``$PETAB_BENCHMARK``), cases from the
official suite's ``sciml_problem_import`` (``$PETAB_SCIML_TESTSUITE``).  Times are wall
seconds, minimum of 3 after a warm-up call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTROLLERS = {"I": (0.0, 1.0), "default": None}
"""``I``: diffrax's I controller everywhere (this project's default until 2026-12-07);
``default``: ``steps.pi_coefficients`` (PI for explicit solvers whose discretization is
differentiated, I for forward sensitivities, the adjoint and implicit solvers)."""
MODELS = ("Schwen_PONE2014", "Borghans_BiophysChem1997", "Fiedler_BMCSystBiol2016",
          "Beer_MolBioSystems2014", "Crauste_CellSystems2017")
"""The models of the collection that dopri8 solves and that finish within minutes
(Lucarelli_CellSystems2018's reference alone takes more than 10)."""
CASES = ("001", "010", "036", "038")

CHILD = textwrap.dedent("""
    import json, sys, time, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    from petab_sciml.problem import load_problem
    path, coeffs = sys.argv[1], json.loads(sys.argv[2])
    control = {} if coeffs is None else {"pi_coefficients": tuple(coeffs)}
    problem = load_problem(path, backend="jax")
    sim = problem.simulator(cache=False, **control)
    ev = sim.evaluate(grad=True)
    solver = sim.executor.options.solver
    times = []
    for _ in range(3):
        t = time.perf_counter(); ev = sim.evaluate(grad=True)
        times.append(time.perf_counter() - t)
    rev = problem.simulator(solver=solver, sensitivity="reverse", cache=False,
                            **control).evaluate(grad=True)
    # forward sensitivities of an implicit solver run Newton on states x parameters
    # unknowns: there the reference differentiates the solve at 1e-10 instead
    reference = "forward" if solver.startswith("dopri") else "reverse"
    ref = problem.simulator(solver=solver, sensitivity=reference, rtol=1e-10, atol=1e-10,
                            cache=False, **control).evaluate(grad=True)
    g_ref = np.asarray(ref.grad_flat)
    def error(e):
        return float(np.max(np.abs(np.asarray(e.grad_flat) - g_ref)) / np.max(np.abs(g_ref)))
    print(json.dumps({"solver": solver, "ok": bool(ev.ok), "llh": float(ev.llh),
                      "value_and_grad_s": min(times), "default_error": error(ev),
                      "reverse_error": error(rev)}))
""")


def benchmark_root() -> Path:
    return Path(os.environ.get("PETAB_BENCHMARK") or REPO.parent / "shared" / "petab_benchmark")


def suite_root() -> Path:
    return Path(os.environ.get("PETAB_SCIML_TESTSUITE")
                or REPO.parent / "shared" / "petab_sciml_testsuite")


def problems(models: list[str], cases: list[str]) -> list[tuple[str, Path]]:
    out = [(m, benchmark_root() / m / f"{m}.yaml") for m in models]
    case_dir = suite_root() / "test_cases" / "sciml_problem_import"
    out += [(f"suite {c}", case_dir / c / "petab" / "problem.yaml") for c in cases]
    return out


def run_child(path: Path, coeffs: tuple[float, float], timeout: float) -> dict:
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(coeffs)],
                              capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    print("| problem | controller | solver | llh | objective + gradient (s) "
          "| default gradient error | reverse-mode gradient error |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, path in problems(args.models, args.cases):
        for label, coeffs in CONTROLLERS.items():
            r = run_child(path, coeffs, args.timeout)
            rows.append({"problem": name, "controller": label, **r})
            if "error" in r:
                print(f"| {name} | {label} | {r['error']} | | | | |", flush=True)
                continue
            print(f"| {name} | {label} | {r['solver']} | {r['llh']:.6f} "
                  f"| {r['value_and_grad_s']:.4f} | {r['default_error']:.2e} "
                  f"| {r['reverse_error']:.2e} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
