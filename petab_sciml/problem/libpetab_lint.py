"""Optional second opinion: libpetab-python's PEtab v2 + SciML linter (``--libpetab``).

libpetab >= 0.10 (Python >= 3.12) reads PEtab SciML problems (``petab.v2.Problem``) and
lints them with its v2 and SciML validation tasks.  Its findings are added as ``LIBPETAB``
issues (warnings, tagged with libpetab's own level and task) beside ours: they never
decide validity, and nothing libpetab raises escapes.  libpetab's SciML support imports
names from ``petab_sciml``; in this environment they come from
:mod:`petab_sciml.official_api`.

It is off by default: libpetab's checks cost far more than ours on big tables
(``docs/validation.md``).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

MIN_VERSION = (0, 10)


def libpetab_version() -> tuple[int, ...] | None:
    """The installed libpetab version, or None when it is missing."""
    from importlib import metadata

    try:
        text = metadata.version("petab")
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def libpetab_findings(path: str | Path) -> list[tuple[str, str, str | None]]:
    """libpetab's findings on the problem at ``path``: ``(level, message, task)`` with
    level ``info``, ``warning``, ``error`` or ``critical``.  A problem libpetab cannot read
    is one ``critical`` finding.  Raises ``RuntimeError`` when libpetab >= 0.10 is not
    installed."""
    version = libpetab_version()
    if version is None or version < MIN_VERSION:
        found = "not installed" if version is None else ".".join(map(str, version))
        raise RuntimeError(f"libpetab >= {'.'.join(map(str, MIN_VERSION))} is needed (found: "
                           f"{found}); it requires Python >= 3.12")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import importlib

            v2 = importlib.import_module("petab.v2")
            problem = v2.Problem.from_yaml(str(path))
            results = problem.validate()
        except Exception as exc:  # libpetab raises anything on input it cannot read
            return [("critical", f"cannot read the problem: {type(exc).__name__}: "
                     f"{_one_line(str(exc))}", None)]
    return [(r.level.name.lower(), _one_line(r.message), getattr(r, "task", None))
            for r in results]


def lint_with_libpetab(report: Any) -> None:
    """Add libpetab's findings to ``report.issues`` as ``LIBPETAB`` warnings."""
    issues = report.context.issues if report.context is not None else report.issues
    start = time.perf_counter()
    try:
        findings = libpetab_findings(report.path)
    except RuntimeError as exc:
        issues.add("LIBPETAB", f"no second opinion: {exc}", severity=_info())
        return
    for level, message, task in findings:
        where = f" ({task})" if task else ""
        issues.add("LIBPETAB", f"[libpetab {level}{where}] {message}",
                   file=Path(report.path).name)
    seconds = time.perf_counter() - start
    issues.add("LIBPETAB", f"libpetab {'.'.join(map(str, libpetab_version()))} reported "
               f"{len(findings)} finding(s) in {seconds:.1f} s", severity=_info())


def _info() -> Any:
    from petab_sciml.problem.issues import Severity

    return Severity.INFO


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "; ".join(lines[:6]) + (" ..." if len(lines) > 6 else "")
