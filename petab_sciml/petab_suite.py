"""Runner for the official PEtab test suite's cases (plain PEtab v2 problems).

A case folder ``NNNN/`` holds the problem ``_NNNN.yaml`` and ``_NNNN_solution.yaml`` with
the expected ``llh``, ``chi2`` and ``simulation_files`` (tables with a ``simulation``
column in measurement-table order) and their absolute tolerances ``tol_llh``,
``tol_chi2`` and ``tol_simulations``.  Each case is loaded and evaluated once at its
nominal parameters in each backend; a case passes when every reference it has matches
within its tolerance.  A case that cannot be loaded or evaluated fails with the reason
(for example ``events with a delay are not supported``).
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.errors import PetabSciMLError

SUITE_ENV = "PETAB_V2_SUITE"
"""Environment variable naming the PEtab v2 test suite folder."""
DEFAULT_TOLERANCE = 1e-3
LN10 = float(np.log(10.0))
_SOLUTION_RE = re.compile(r"^_(\d+)_solution\.yaml$")


def default_suite() -> Path | None:
    """``$PETAB_V2_SUITE``, else ``../shared/petab_v2_suite`` beside the repository or
    the working directory, if present."""
    env = os.environ.get(SUITE_ENV)
    if env:
        return Path(env)
    for base in (Path(__file__).resolve().parents[1], Path.cwd()):
        candidate = base.parent / "shared" / "petab_v2_suite"
        if candidate.is_dir():
            return candidate
    return None


@dataclass
class SuiteCase:
    """One PEtab test-suite case: its folder, problem file and parsed solution."""

    path: Path
    problem: Path
    solution: dict[str, Any]

    @property
    def name(self) -> str:
        return self.path.name

    def tol(self, key: str) -> float:
        return float(self.solution.get(key, DEFAULT_TOLERANCE))


@dataclass
class SuiteResult:
    """Outcome of one case on one backend: absolute error of each compared quantity
    (``llh``, ``chi2``, ``simulations``) and the tolerance it was held to."""

    case: str
    backend: str
    passed: bool
    llh: float | None = None
    errors: dict[str, float] = field(default_factory=dict)
    tolerances: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def is_suite_case(folder: Path) -> bool:
    """Whether ``folder`` holds a ``_NNNN_solution.yaml`` and its ``_NNNN.yaml``."""
    for f in folder.glob("_*_solution.yaml"):
        m = _SOLUTION_RE.match(f.name)
        if m and (folder / f"_{m.group(1)}.yaml").is_file():
            return True
    return False


def discover(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Case folders at or under ``paths``, sorted by path."""
    found: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise PetabSciMLError("no such file or folder", file=p)
        if p.is_dir() and is_suite_case(p):
            found.add(p)
            continue
        for sol in p.rglob("_*_solution.yaml"):
            if is_suite_case(sol.parent):
                found.add(sol.parent)
    return sorted(found)


def load_case(path: str | os.PathLike) -> SuiteCase:
    """Parse a case folder (raises :class:`PetabSciMLError` naming the file)."""
    import yaml

    from petab_sciml.safe_read import read_text

    folder = Path(path)
    for f in sorted(folder.glob("_*_solution.yaml")):
        m = _SOLUTION_RE.match(f.name)
        if m:
            try:
                solution = yaml.safe_load(read_text(f, what="a solution file")) or {}
            except yaml.YAMLError as exc:
                raise PetabSciMLError(f"not valid YAML: {exc}", file=f) from None
            if not isinstance(solution, dict):
                raise PetabSciMLError("expected a mapping", file=f)
            return SuiteCase(folder, folder / f"_{m.group(1)}.yaml", solution)
    raise PetabSciMLError("no _NNNN_solution.yaml", file=folder)


def _read_tsv(path: Path) -> list[dict[str, str]]:
    import csv
    import io

    from petab_sciml.safe_read import read_text

    text = read_text(path, what="a test case's table")
    return [dict(r) for r in csv.DictReader(io.StringIO(text, newline=""), delimiter="\t")]


def chi2_of(measured: np.ndarray, simulated: np.ndarray, sigma: np.ndarray,
            transform: np.ndarray) -> float:
    """Sum of squared weighted residuals, on each measurement's transformation
    (``transform`` 0 lin, 1 log, 2 log10), as the PEtab test suite defines chi2."""
    r = np.where(transform == 0, measured - simulated, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.log(measured) - np.log(simulated)
        r = np.where(transform == 1, logr, r)
        r = np.where(transform == 2, logr / LN10, r)
    return float(np.sum((r / sigma) ** 2))


def _simulation_error(case: SuiteCase, rows: list[dict[str, str]], simulated: np.ndarray
                      ) -> float:
    """Max abs difference of the simulations from the case's tables, rows matched by
    (observable, experiment, time) in order of appearance."""
    slots: dict[tuple, list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        slots[(m["observableId"], m.get("experimentId", "") or "", float(m["time"]))].append(i)
    worst = 0.0
    used = 0
    for fname in case.solution.get("simulation_files") or []:
        for j, r in enumerate(_read_tsv(case.path / fname)):
            key = (r["observableId"], r.get("experimentId", "") or "", float(r["time"]))
            if not slots.get(key):
                raise PetabSciMLError("simulation row matches no measurement",
                                      file=case.path / fname, entry=f"row {j + 2}")
            i = slots[key].pop(0)
            worst = max(worst, abs(float(r["simulation"]) - float(simulated[i])))
            used += 1
    if used != len(rows):
        raise PetabSciMLError(f"{used} reference simulations for {len(rows)} measurements",
                              file=case.path)
    return worst


def check(case: SuiteCase, sim: Any, ev: Any) -> tuple[dict, dict]:
    """Absolute errors and tolerances of llh, chi2 and simulations for one evaluation."""
    sol = case.solution
    errors: dict[str, float] = {}
    tols: dict[str, float] = {}
    plan = sim.plan.measurements
    if "llh" in sol:
        errors["llh"] = abs(float(ev.llh) - float(sol["llh"]))
        tols["llh"] = case.tol("tol_llh")
    if "chi2" in sol:
        chi2 = chi2_of(np.asarray(plan.value, float), np.asarray(ev.simulations, float),
                       np.asarray(ev.sigma, float), np.asarray(plan.transform))
        errors["chi2"] = abs(chi2 - float(sol["chi2"]))
        tols["chi2"] = case.tol("tol_chi2")
    if sol.get("simulation_files"):
        errors["simulations"] = _simulation_error(case, plan.rows, np.asarray(ev.simulations))
        tols["simulations"] = case.tol("tol_simulations")
    return errors, tols


def run_case(case: SuiteCase, backend: str, **options: Any) -> SuiteResult:
    """Load, evaluate and check one case in one backend; never raises."""
    from petab_sciml.problem import load_problem

    start = time.perf_counter()
    try:
        problem = load_problem(case.problem, backend=backend)
        sim = problem.simulator(**options)
        ev = sim.evaluate(grad=False)
        errors, tols = check(case, sim, ev)
        bad = [k for k in errors if not errors[k] <= tols[k]]
        reason = None if ev.ok else "the simulation failed"
        if bad and reason is None:
            reason = "; ".join(f"{k}: error {errors[k]:.2e} > {tols[k]:.0e}" for k in bad)
        return SuiteResult(case.name, backend, reason is None, float(ev.llh), errors, tols,
                           reason, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a case's failure is reported, not raised
        return SuiteResult(case.name, backend, False, error=f"{type(exc).__name__}: {exc}",
                           seconds=time.perf_counter() - start)


def run_all(paths: Sequence[Path], backends: Sequence[str], *,
            progress: Callable[[str], None] | None = None, **options: Any
            ) -> list[SuiteResult]:
    """Run every case folder in ``paths`` on every backend."""
    results: list[SuiteResult] = []
    for path in paths:
        if progress:
            progress(str(path))
        try:
            case = load_case(path)
        except PetabSciMLError as exc:
            results.extend(SuiteResult(Path(path).name, b, False, error=str(exc))
                           for b in backends)
            continue
        results.extend(run_case(case, b, **options) for b in backends)
    return results
