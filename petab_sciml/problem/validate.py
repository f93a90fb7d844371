"""``validate_problem``: every check, collected as issues; never raises for bad input.

Validation does not execute code from the problem: networks in formats whose loading runs
code (``NetworkFormat.runs_code``) are loaded only with ``trust_code=True``.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from petab_sciml.problem.checks import run_checks
from petab_sciml.problem.context import ProblemContext, load_context
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
                     libpetab: bool = False) -> ValidationReport:
    """Validate the problem at ``path`` (its YAML file).

    With ``read_values`` the network parameter values are read and resolved too (what the
    loader needs); plain validation only reads the array files' structure.  With
    ``libpetab`` (off by default), libpetab-python's PEtab v2 + SciML linter runs too and
    its findings are added as ``LIBPETAB`` warnings (a second opinion, never an error).
    """
    path = Path(path)
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
                     ("tables", _cross), ("libpetab", _libpetab if libpetab else None)):
        if fn is None:
            continue
        try:
            fn(report, read_values)
        except Exception as exc:
            _internal(issues, f"checking the {step}", exc)
    issues.sort(key=lambda i: (-int(i.severity), i.file or "", i.row or 0))
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
            issues=ctx.issues, table_file=table_file)


def _cross(report: ValidationReport, read_values: bool) -> None:
    if report.parameters is not None:
        run_checks(report.context, report.parameters)


def _libpetab(report: ValidationReport, read_values: bool) -> None:
    from petab_sciml.problem.libpetab_lint import lint_with_libpetab

    lint_with_libpetab(report)


def has_errors(issues: IssueList) -> bool:
    return any(i.severity == Severity.ERROR for i in issues)
