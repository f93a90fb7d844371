"""Older drafts of the PEtab SciML problem layout: recognising them.

The official documentation examples and early test cases were written against drafts of
PEtab v2 that differ from the current format in a few places:

* the problem YAML holds a ``problems:`` list with one entry of file lists, and the
  parameter table is named by ``parameter_file`` at the top level;
* measurements name their condition in ``simulationConditionId`` (and
  ``preequilibrationConditionId``) instead of an experiment in ``experimentId``;
* the condition table has one column per target (``conditionId, prey, predator``) instead
  of ``conditionId, targetId, targetValue`` rows;
* the extension states no ``version`` (named with the others when one of them is found;
  on its own it is ``EXT_VERSION_MISSING``).

The validator reports all of them as **one** ``LEGACY_LAYOUT`` error, listed before every
other issue (the others often follow from it), and reads the YAML's file lists from their
old places so that the remaining checks still see the tables.  ``petab-sciml upgrade``
(:mod:`petab_sciml.problem.upgrade`) rewrites such a problem in the current format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from petab_sciml.problem.context import ProblemContext

OLD_MEASUREMENT_COLUMNS = ("simulationConditionId", "preequilibrationConditionId")
CONDITION_NAME_COLUMNS = ("conditionId", "conditionName")
"""Columns of a per-target (wide) condition table that are not targets."""


@dataclass(frozen=True)
class LegacyConstruct:
    """One construct of an older draft: what it is and where (file, YAML path)."""

    what: str
    file: str
    path: str | None = None

    def __str__(self) -> str:
        return f"{self.what} in {self.file}"


def yaml_constructs(raw: dict[str, Any], file: str) -> list[LegacyConstruct]:
    """Older-draft constructs of the problem YAML ``raw`` (its parsed top level)."""
    found = []
    if "problems" in raw:
        found.append(LegacyConstruct("a `problems:` list", file, "problems"))
    if "parameter_file" in raw:
        found.append(LegacyConstruct("`parameter_file`", file, "parameter_file"))
    return found


def current_view(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the file lists of an older draft where the current format has them:
    the first entry of ``problems:`` at the top level, ``parameter_file`` as
    ``parameter_files``.  Keys already at the top level win; nothing is validated here."""
    view = dict(raw)
    problems = view.pop("problems", None)
    if isinstance(problems, list) and problems and isinstance(problems[0], dict):
        for key, value in problems[0].items():
            view.setdefault(key, value)
    old = view.pop("parameter_file", None)
    if old is not None and "parameter_files" not in view:
        view["parameter_files"] = old if isinstance(old, list) else [old]
    return view


def is_wide_condition_table(columns: list[str]) -> bool:
    """A condition table with one column per target (an older draft, and PEtab v1),
    also with no target column at all (conditions that change nothing: the official
    documentation examples' ``conditionId``-only tables)."""
    return ("targetId" not in columns and "targetValue" not in columns
            and "conditionId" in columns)


def table_constructs(ctx: ProblemContext) -> list[LegacyConstruct]:
    """Older-draft constructs of the tables read into ``ctx``."""
    found = []
    for table in ctx.tables.get("measurement", []):
        old = [c for c in OLD_MEASUREMENT_COLUMNS if c in table.columns]
        if old:
            found.append(LegacyConstruct(" and ".join(f"`{c}`" for c in old), table.file))
    for table in ctx.tables.get("condition", []):
        if is_wide_condition_table(table.columns):
            found.append(LegacyConstruct("one column per condition target", table.file))
    return found


def report_legacy(ctx: ProblemContext) -> None:
    """Add one ``LEGACY_LAYOUT`` error naming every older-draft construct found."""
    cfg = ctx.config
    found = list(getattr(cfg, "legacy", []) or []) + table_constructs(ctx)
    if not found:
        return
    name = cfg.path.name
    # The older drafts predate the extension's `version`: name its absence here, with the
    # other constructs `upgrade` rewrites, instead of as an error of its own.
    version = [i for i in ctx.issues if i.code == "EXT_VERSION_MISSING"]
    for issue in version:
        ctx.issues.remove(issue)
        found.append(LegacyConstruct("no extension `version`", name, issue.path))
    ctx.issues.add(
        "LEGACY_LAYOUT",
        f"this problem is in an older draft of the PEtab SciML format "
        f"({'; '.join(map(str, found))}); the issues below may follow from it. Rewrite it "
        f"in the current format with: petab-sciml upgrade {cfg.path} NEW_FOLDER/",
        file=name)
