"""Curriculum learning: stage problems whose measurement horizon grows stage by stage
(draft PEtab SciML training strategies, "Curriculum learning")."""

from __future__ import annotations

from collections.abc import Sequence

from .source import Rows, SourceProblem, parse_time


def curriculum_tables(source: SourceProblem, end: float | None) -> dict[str, Rows]:
    """The tables of the stage that ends at ``end`` (None: the whole problem).

    Measurements after ``end`` are dropped (time ``inf`` counts as after every finite
    end); experiments without a remaining measurement are dropped, and the periods of the
    others that start after ``end``; conditions no remaining period applies are dropped.
    Observables and parameters are kept whole, so every stage estimates the same
    parameters and values carry over by id."""
    tables = {kind: rows.copy() for kind, rows in source.tables.items()}
    if end is None:
        return tables
    meas = tables["measurement"]
    meas.rows = [r for r in meas.rows if parse_time(r["time"]) <= end]
    used = {r["experimentId"] for r in meas.rows}
    exps = tables["experiment"]
    exps.rows = [r for r in exps.rows
                 if r["experimentId"] in used and parse_time(r["time"]) <= end]
    applied = {c.strip() for r in exps.rows for c in r["conditionId"].split(";")}
    conds = tables["condition"]
    conds.rows = [r for r in conds.rows if r["conditionId"] in applied]
    return tables


def curriculum_stages(source: SourceProblem, ends: Sequence[float]
                      ) -> list[dict[str, Rows]]:
    """One table set per stage end (ascending); the last stage is the whole problem."""
    return [curriculum_tables(source, end) for end in ends[:-1]] + \
        [curriculum_tables(source, None)]
