"""Objective + gradient of the shared official SciML problem cases, the toolkit's JAX
backend beside AMICI's JAX backend (``diffrax.Dopri8``, the same controller as ours),
as one Markdown table: per case minimum wall time of each, AMICI's over ours (more
than 1: we are faster), and with ``--first-call`` import + load + first gradient of
both in fresh processes.

    python benchmarks/bench_amici.py [--cases 001 010 036] [--reps 10] [--first-call]
        [--ours-python .venv-jax312/bin/python] [--amici-python /tmp/amici-venv/bin/python]
        [--json OUT]

It drives ``../shared/tools/amici_side_by_side.py`` (the calls of the two sides
interleaved, so both see the same machine load); that script's docstring says how to
set up AMICI's environment (Python 3.12, ``amici[jax]==1.1.0``, ``petab``,
``petab_sciml==0.0.3``; keep it outside the repository).  Both environments should
have the same JAX version: the table's header names each side's JAX and diffrax, and a
mismatch is printed as a warning.  Without ``--amici-python`` only our side is timed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIDE_BY_SIDE = REPO.parent / "shared" / "tools" / "amici_side_by_side.py"
SUITE = REPO.parent / "shared" / "petab_sciml_testsuite" / "test_cases" / \
    "sciml_problem_import"
WHERE = {
    "before the ODE": ("002", "004", "007", "008", "009", "014", "032"),
    "one network in the right-hand side": ("001", "016", "019", "023", "026", "029",
                                           "035"),
    "two networks in the right-hand side": ("010",),
    "right-hand-side network, array input": ("036",),
    "the same, condition-specific arrays": ("038",),
    "network parameters in the condition table": ("003",),
}
CASES = tuple(c for cases in WHERE.values() for c in cases)


def where(case: str) -> str:
    """Where the case's network is (the issue's grouping of the suite cases)."""
    return next((w for w, cases in WHERE.items() if case in cases), "other")


def versions(python: str) -> str:
    """``jax X, diffrax Y, Python Z`` of the environment of ``python``."""
    code = ("import sys, jax, diffrax; print(f'jax {jax.__version__}, diffrax "
            "{diffrax.__version__}, Python {sys.version.split()[0]}')")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def run_side_by_side(args: argparse.Namespace, out_json: Path) -> dict:
    contenders = "ours_jax,amici_dopri8" if args.amici_python else "ours_jax"
    cmd = [sys.executable, str(SIDE_BY_SIDE), "--cases", *args.cases, "--reps",
           str(args.reps), "--ours-python", args.ours_python, "--suite", str(SUITE),
           "--contenders", contenders, "--json", str(out_json)]
    # without AMICI, its first calls (which the script always runs) fail at the import
    cmd += ["--amici-python", args.amici_python or args.ours_python]
    if args.first_call:
        cmd.append("--first-call")
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(out_json.read_text())


def first_call_s(case: dict, name: str, run: bool = True) -> str:
    first = case.get("first_call", {}).get(name)
    if not first or not run:
        return "-"
    if first["detail"].startswith("FAILED"):
        return "failed"
    return f"{first['wall_s']:.1f} s"


def table(report: dict, amici_run: bool) -> list[str]:
    rows = ["| case | where the network is | ours | AMICI Dopri8 | ratio | first call "
            "ours (empty cache / filled) | first call AMICI (fresh / reused model) |",
            "|---|---|---|---|---|---|---|"]
    ratios = []
    for name, case in report["cases"].items():
        mins = case.get("min_s", {})
        ours, amici = mins.get("ours_jax"), mins.get("amici_dopri8")
        ratio = "-" if not (ours and amici) else f"**{amici / ours:.2f}x**"
        if ours and amici:
            ratios.append(amici / ours)
        amici_s = "not run"
        if amici_run:
            amici_s = f"{amici * 1e3:.2f} ms" if amici else "failed (see the log above)"
        ours_s = f"{ours * 1e3:.2f} ms" if ours else "-"
        rows.append(f"| {name} | {where(name)} | {ours_s} | {amici_s} | {ratio} | "
                    f"{first_call_s(case, 'ours_cold')} / {first_call_s(case, 'ours_cached')}"
                    f" | {first_call_s(case, 'amici_cold', amici_run)} / "
                    f"{first_call_s(case, 'amici_reuse', amici_run)} |")
    if ratios:
        ratios.sort()
        rows.append("")
        rows.append(f"ratio (AMICI / ours): min {ratios[0]:.2f}x, median "
                    f"{ratios[len(ratios) // 2]:.2f}x, max {ratios[-1]:.2f}x over "
                    f"{len(ratios)} cases")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ours-python", default=sys.executable)
    ap.add_argument("--amici-python", default=None)
    ap.add_argument("--first-call", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not SIDE_BY_SIDE.exists():
        raise SystemExit(f"{SIDE_BY_SIDE} not found (the shared tools folder)")
    ours_v = versions(args.ours_python)
    amici_v = versions(args.amici_python) if args.amici_python else "not run"
    out = args.json or Path(tempfile.mkdtemp()) / "side_by_side.json"
    report = run_side_by_side(args, out)
    print()
    print(f"ours: {ours_v}; AMICI: {amici_v}")
    if args.amici_python and ours_v.split(", Python")[0] != amici_v.split(", Python")[0]:
        print("WARNING: the two environments run different JAX / diffrax versions")
    print(f"load average: {report['loadavg_start']} (start), {report['loadavg_end']} (end)")
    print("\n".join(table(report, bool(args.amici_python))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
