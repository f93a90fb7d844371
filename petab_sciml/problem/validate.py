"""``validate_problem``: every check, collected as issues; never raises for bad input.

Validation does not execute code from the problem: networks in formats whose loading runs
code (``NetworkFormat.runs_code``) are loaded only with ``trust_code=True``.

What validation accepts, loading accepts: when every other check passes (and libsbml and
sympy are installed), the validator also imports the SBML model and builds the simulation
plan exactly as :func:`~petab_sciml.problem.load_problem` does, and reports what fails
there (``MODEL_INVALID``, ``MODEL_UNSUPPORTED``, ``SIMULATION_UNSUPPORTED``).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from petab_sciml.problem.checks import run_checks
from petab_sciml.problem.context import ProblemContext, load_context
from petab_sciml.problem.data import ProblemData
from petab_sciml.problem.issues import IssueList, Severity
from petab_sciml.problem.parameters import ParameterTables, read_parameters
from petab_sciml.problem.resolve import ResolvedNetwork, resolve_network


@dataclass
class ValidationReport:
    """The issues found, plus what was read (for ``info`` and the loader)."""

    path: Path
    issues: IssueList
    context: ProblemContext | None = None
    parameters: ParameterTables | None = None
    resolved: dict[str, ResolvedNetwork] = field(default_factory=dict)
    plan: Any = None
    """The simulation plan, when the problem is valid and libsbml and sympy are installed
    (initial values of network elements the backend initialises are zero in it; the
    loader builds its own after filling them in)."""
    plan_error: Exception | None = None
    """What building the plan raised (the loader raises it) and its issue."""
    plan_issue: Any = None

    @property
    def ok(self) -> bool:
        return not self.issues.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "problem": str(self.path),
            "valid": self.ok,
            "errors": len(self.issues.errors),
            "warnings": len(self.issues.warnings),
            "issues": [i.to_json() for i in self.issues],
        }


def validate_problem(path: str | Path, *, trust_code: bool = False, read_values: bool = False,
                     libpetab: bool = False, confine: bool = False) -> ValidationReport:
    """Validate the problem at ``path`` (its YAML file).

    With ``read_values`` the network parameter values are read and resolved too (what the
    loader needs); plain validation only reads the array files' structure.  With
    ``libpetab`` (off by default), libpetab-python's PEtab v2 + SciML linter runs too, once
    our own checks (the simulation plan included) found no error, and its findings are
    added as ``LIBPETAB`` warnings: a second opinion that never decides validity (its
    import and checks cost far more than ours; ``docs/validation.md``).

    With ``confine`` no file outside the problem YAML's folder is opened (symlinks
    resolved; :mod:`petab_sciml.confine`): each is an error ``FILE_OUTSIDE_CONFINED``.
    """
    path = Path(path)
    if confine:
        from petab_sciml.confine import confined

        with confined(path.parent):
            return validate_problem(path, trust_code=trust_code, read_values=read_values,
                                    libpetab=libpetab)
    issues = IssueList()
    report = ValidationReport(path, issues)
    try:
        ctx = load_context(path, trust_code=trust_code)
    except Exception as exc:  # pragma: no cover - last line of defence
        _internal(issues, "reading the problem", exc)
        return report
    report.context = ctx
    report.issues = issues = ctx.issues
    if ctx.config is None:
        return report
    for step, fn in (("parameter table", _parameters), ("network parameters", _resolve),
                     ("tables", _cross), ("simulation plan", _simulation),
                     ("libpetab", _libpetab if libpetab else None)):
        if fn is None:
            continue
        try:
            fn(report, read_values)
        except Exception as exc:
            _internal(issues, f"checking the {step}", exc)
    issues.sort_for_report()
    return report


def _internal(issues: IssueList, what: str, exc: BaseException) -> None:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    issues.add("INTERNAL_ERROR", f"unexpected {type(exc).__name__} while {what}{where}: {exc}")


def _parameters(report: ValidationReport, read_values: bool) -> None:
    report.parameters = read_parameters(report.context)


def _resolve(report: ValidationReport, read_values: bool) -> None:
    ctx = report.context
    params = report.parameters
    if params is None:
        return
    tables = ctx.tables.get("parameter")
    table_file = tables[0].file if tables else None
    for net_id, network in ctx.networks.items():
        rows = params.network_rows.get(net_id, [])
        report.resolved[net_id] = resolve_network(
            network, rows, ctx.arrays.parameters.get(net_id, {}), read_values=read_values,
            issues=ctx.issues, table_file=table_file,
            mismatched=ctx.arrays.mismatched.get(net_id, ()))


def _cross(report: ValidationReport, read_values: bool) -> None:
    if report.parameters is not None:
        run_checks(report.context, report.parameters)


def _libpetab(report: ValidationReport, read_values: bool) -> None:
    """The second opinion, on problems our own checks accept (on others it would only
    repeat what we found, at a far higher cost) and whose formulas libpetab's sympy can
    handle (not constants too large for exact arithmetic)."""
    from petab_sciml.problem.libpetab_lint import lint_with_libpetab

    ctx = report.context
    if report.issues.errors:
        reason = "our own checks found errors (it runs on problems they accept)"
    elif ctx.huge_formulas:
        reason = (f"{', '.join(sorted(ctx.huge_formulas))} hold(s) constants too large for "
                  f"exact arithmetic, on which libpetab's sympy could take hours")
    else:
        lint_with_libpetab(report)
        return
    report.issues.add("LIBPETAB", f"libpetab's second opinion was not run: {reason}",
                      severity=Severity.INFO)


def _simulation(report: ValidationReport, read_values: bool) -> None:
    """Import the model and build the simulation plan as loading does (only for a problem
    without errors so far: the plan builder expects one)."""
    ctx = report.context
    if report.issues.errors or report.parameters is None or ctx.unchecked_networks \
            or not ctx.config.model_files:
        return
    entry = next(iter(ctx.config.model_files.values()))
    if str(entry.get("language", "sbml")).lower() != "sbml":
        return
    try:
        import libsbml  # noqa: F401
        import sympy  # noqa: F401
    except ImportError:
        report.issues.add("SIMULATION_NOT_CHECKED", "libsbml or sympy is not installed, so "
                          "the SBML consistency checks and the simulation plan that loading "
                          "needs were not run (pip install 'petab-sciml-toolkit[sbml]')",
                          file=entry["location"])
        return
    from petab_sciml.errors import PetabSciMLError
    from petab_sciml.simulation.builder import build_plan

    data = ProblemData(ctx.config, ctx, report.resolved, report.parameters.plain)
    try:
        report.plan = build_plan(data)
    except PetabSciMLError as exc:
        report.plan_error = exc
        report.plan_issue = _plan_issue(report, exc, entry["location"])


def _plan_issue(report: ValidationReport, exc: Exception, model_file: str) -> Any:
    """The issue for what building the plan raised."""
    from petab_sciml.expressions import ExpressionError
    from petab_sciml.sbml import SbmlError, UnsupportedSbmlError

    if isinstance(exc, UnsupportedSbmlError):
        code, file = "MODEL_UNSUPPORTED", model_file
    elif isinstance(exc, SbmlError):
        code, file = "MODEL_INVALID", model_file
    elif isinstance(exc, ExpressionError):
        code, file = "FORMULA_INVALID", _relative(report, getattr(exc, "file", None))
    else:  # SimulationError and the like: loading would fail the same way
        code, file = "SIMULATION_UNSUPPORTED", _relative(report, getattr(exc, "file", None))
    return report.issues.add(code, _message(exc), file=file, path=getattr(exc, "entry", None))


def _message(exc: Exception) -> str:
    return getattr(exc, "message", None) or str(exc)


def _relative(report: ValidationReport, file: Any) -> str | None:
    if file is None:
        return None
    try:
        return str(Path(file).relative_to(report.path.parent))
    except ValueError:
        return str(file)

