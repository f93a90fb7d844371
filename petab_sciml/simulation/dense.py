"""A problem's simulation on a dense time grid, for plots: the same model, experiments
and parameters, with every observable of every experiment measured at evenly spaced
times as well as at its measurement times.

:func:`dense_plan` builds the plan of the problem's data with a synthetic measurement
table in place of the problem's: for each (experiment, observable) measured at finite
times, ``n`` times evenly spaced from the experiment's start (its first period after
any pre-equilibration) to its last finite measurement time, plus the measured times
themselves; each synthetic row copies the problem's first row of that pair (its
observable and noise parameter overrides), so the simulated values are those the
problem's own rows would give at those times.  Steady-state measurements (``inf``) are
left out.  The parameter vector ``w`` has the same layout as the problem's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from petab_sciml.simulation.plan import SimulationError, SimulationPlan

DENSE_POINTS = 500
"""Evenly spaced times per (experiment, observable)."""


def dense_plan(data: Any, plan: SimulationPlan, n: int = DENSE_POINTS,
               observables: Mapping[str, str] | None = None) -> SimulationPlan:
    """The plan of ``data`` (a loaded problem's ``problem.data``, whose plan is ``plan``)
    with dense measurement times; raises :class:`SimulationError` if its ``w`` would not
    have ``plan``'s layout.  ``observables``: more observables, ``{id: formula}`` (of
    states, parameters and time), simulated at each experiment's dense times too
    (e.g. a network's inputs along the trajectory)."""
    from petab_sciml.problem.tables import Row, Table
    from petab_sciml.simulation.builder import build_plan

    tables = data.context.tables.get("measurement", [])
    if not tables:
        raise SimulationError("the problem has no measurement table")
    rows = _dense_rows(plan, tables, n, observables or {})
    first = tables[0]
    dense_table = Table(kind="measurement", path=first.path, file=f"{first.file} (dense)",
                        columns=list(first.columns),
                        rows=[Row(line=i + 2, cells=cells) for i, cells in enumerate(rows)])
    context = copy.copy(data.context)
    context.tables = {**data.context.tables, "measurement": [dense_table]}
    if observables:
        context.tables["observable"] = [
            *data.context.tables.get("observable", []),
            _observable_table(data.context.tables.get("observable", []), observables)]
    dense = build_plan(dataclasses.replace(data, context=context))
    if dense.mech_ids != plan.mech_ids or dense.n_w != plan.n_w:
        raise SimulationError("the dense plan's parameters differ from the problem's "
                              f"({len(dense.mech_ids)} mechanistic, {dense.n_w} in all, "
                              f"against {len(plan.mech_ids)} and {plan.n_w})")
    return dense


def _observable_table(tables: list, observables: Mapping[str, str]) -> Any:
    """A table of the extra observables (noise 1, normal, no placeholders)."""
    from petab_sciml.problem.tables import Row, Table

    if not tables:
        raise SimulationError("the problem has no observable table")
    first = tables[0]
    blank = dict.fromkeys(first.columns, "")
    rows = [Row(line=i + 2, cells={**blank, "observableId": oid, "observableFormula": formula,
                                   "noiseFormula": "1",
                                   **({"noiseDistribution": "normal"}
                                      if "noiseDistribution" in blank else {}),
                                   **({"observableTransformation": "lin"}
                                      if "observableTransformation" in blank else {})})
            for i, (oid, formula) in enumerate(observables.items())]
    return Table(kind="observable", path=first.path, file="(extra observables)",
                 columns=list(first.columns), rows=rows)


def _dense_rows(plan: SimulationPlan, tables: list, n: int,
                observables: Mapping[str, str]) -> list[dict[str, str]]:
    templates: dict[tuple[str, str], dict[str, str]] = {}
    times: dict[tuple[str, str], list[float]] = {}
    for table in tables:
        for row in table.rows:
            time = float(row["time"].strip().lower())
            if not np.isfinite(time):
                continue
            key = (row["experimentId"], row["observableId"])
            templates.setdefault(key, dict(row.cells))
            times.setdefault(key, []).append(time)
    starts = {e.id: _start(e) for e in plan.experiments}
    rows: list[dict[str, str]] = []
    spans: dict[str, np.ndarray] = {}
    for key, template in templates.items():
        measured = np.asarray(times[key])
        lo = min(starts.get(key[0], measured.min()), measured.min())
        grid = np.union1d(np.linspace(lo, measured.max(), n), measured)
        spans[key[0]] = np.union1d(spans.get(key[0], grid), grid)
        for t in grid:
            rows.append({**template, "time": repr(float(t))})
    # the extra observables at all of each experiment's times, without overrides
    for (eid, _), template in templates.items():
        if eid not in spans:
            continue
        for extra in observables:
            blank = {**dict.fromkeys(template, ""), "experimentId": eid,
                     "observableId": extra, "measurement": "0"}
            rows += [{**blank, "time": repr(float(t))} for t in spans[eid]]
        del spans[eid]
    return rows


def _start(experiment: Any) -> float:
    """When an experiment's simulated time starts (after a pre-equilibration)."""
    for period in experiment.periods:
        if not period.pre_equilibration and np.isfinite(period.start):
            return float(period.start)
    return np.inf
