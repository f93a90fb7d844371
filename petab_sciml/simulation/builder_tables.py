"""Plan-building steps that read the PEtab tables: condition changes, experiment periods,
observables and measurements (see :class:`~petab_sciml.simulation.builder.PlanBuilder`).

Each step reads the builder's state and returns what it found; it raises
:class:`~petab_sciml.simulation.plan.SimulationError` (through ``builder.fail``) naming
the table row it cannot simulate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy

from petab_sciml.simulation.plan import (
    DISTRIBUTIONS,
    TRANSFORMS,
    ExperimentPlan,
    MeasurementPlan,
    PeriodPlan,
)

if TYPE_CHECKING:
    from petab_sciml.simulation.builder import PlanBuilder

ConditionChanges = dict[str, list[tuple[str, int, int]]]
"""conditionId -> [(kind, index, change index)]: ``kind`` ``"x"`` (a state, ``index``
into the states) or ``"theta"`` (``index`` into ``theta``); ``change index`` into the
change formulas."""

RawPeriods = dict[str, list[tuple[float, list[str]]]]
"""experimentId -> [(start time, condition ids)], sorted by start time."""

MeasurementRecord = tuple[str, float, str, float, Any, str]
"""(experimentId, time, observableId, measured value, table row, where) of one row."""


# --------------------------------------------------------------------------- conditions
def condition_changes(b: PlanBuilder) -> tuple[tuple[sympy.Expr, ...], ConditionChanges]:
    """The condition table: every change formula, and where each condition puts them."""
    states = {s: i for i, s in enumerate(b.state_ids)}
    changes: ConditionChanges = {}
    exprs: list[sympy.Expr] = []
    for table, row in b.rows("condition"):
        cid, tid, value = row["conditionId"], row["targetId"], row["targetValue"]
        where = f"{table.file}:{row.line}"
        target = b.aliases.get(tid, tid)
        if value == "":
            continue
        expr = b.parse(value, f"condition {cid}: {tid}")
        if target in states:
            kind, index = "x", states[target]
        elif target in b.theta_index:
            kind, index = "theta", b.theta_index[target]
        elif target in b.model.rules:
            b.fail(f"condition target {tid!r} is defined by an assignment rule or "
                   "the hybridization table and cannot be changed", entry=where)
        else:
            b.fail(f"condition target {tid!r} is not a state, parameter, compartment "
                   "or network input", entry=where)
        changes.setdefault(cid, []).append((kind, index, len(exprs)))
        exprs.append(expr)
    return tuple(exprs), changes


def experiment_periods(b: PlanBuilder) -> RawPeriods:
    """The experiment table: each experiment's periods (rows of one start time merged)."""
    from petab_sciml.problem.tables import experiment_periods as merged

    rows = []
    for table, row in b.rows("experiment"):
        eid = row["experimentId"]
        text = row["time"].strip().lower()
        time = float(text) if text else 0.0
        if time == math.inf:
            b.fail(f"experiment {eid!r}: a period cannot start at time inf (use "
                   "-inf for pre-equilibration)", entry=f"{table.file}:{row.line}")
        rows.append((eid, time, row["conditionId"]))
    return merged(rows)


# --------------------------------------------------------------------------- observables
@dataclass
class ObservableTable:
    """The observable table as formulas: placeholders renamed ``__op<k>`` /
    ``__np<k>`` (k-th placeholder of the row; noise formulas may use both kinds), noise
    formulas with the observable's own id replaced by its formula."""

    ids: tuple[str, ...]
    obs_exprs: tuple[sympy.Expr, ...]
    noise_exprs: tuple[sympy.Expr, ...]
    obs_placeholders: list[list[str]]
    noise_placeholders: list[list[str]]
    codes: list[tuple[int, int]]
    """(index into TRANSFORMS, index into DISTRIBUTIONS) per observable."""

    @property
    def n_obs_par(self) -> int:
        return max((len(p) for p in self.obs_placeholders), default=0)

    @property
    def n_noise_par(self) -> int:
        return max((len(p) for p in self.noise_placeholders), default=0)


def observable_table(b: PlanBuilder) -> ObservableTable:
    ids: list[str] = []
    obs_exprs: list[sympy.Expr] = []
    noise_exprs: list[sympy.Expr] = []
    obs_placeholders: list[list[str]] = []
    noise_placeholders: list[list[str]] = []
    codes: list[tuple[int, int]] = []
    for table, row in b.rows("observable"):
        oid = row["observableId"]
        where = f"{table.file}:{row.line}"
        formula = b.parse(row["observableFormula"], f"observable {oid}")
        noise_text = row["noiseFormula"] or "1"
        noise = b.parse(noise_text, f"observable {oid} noiseFormula")
        op = _placeholders(row["observablePlaceholders"], formula + noise,
                           "observableParameter", oid)
        np_ = _placeholders(row["noisePlaceholders"], noise, "noiseParameter", oid)
        op_names = {sympy.Symbol(n): sympy.Symbol(f"__op{k}") for k, n in enumerate(op)}
        formula = formula.xreplace(op_names)
        # a noise formula may use the observable's placeholders as well as its own
        noise = noise.xreplace({**op_names, **{sympy.Symbol(n): sympy.Symbol(f"__np{k}")
                                               for k, n in enumerate(np_)}})
        # a noise formula may refer to the observable itself
        noise = noise.xreplace({sympy.Symbol(oid): formula})
        codes.append(_noise_model(row, where, b))
        ids.append(oid)
        obs_exprs.append(formula)
        noise_exprs.append(noise)
        obs_placeholders.append(op)
        noise_placeholders.append(np_)
    return ObservableTable(tuple(ids), tuple(obs_exprs), tuple(noise_exprs),
                           obs_placeholders, noise_placeholders, codes)


def _placeholders(column: str, expr: sympy.Expr, prefix: str, oid: str) -> list[str]:
    """The placeholder ids of a row: the column's list, else the formula's symbols named
    ``<prefix><k>_<observableId>`` in order of ``k``."""
    if column.strip():
        return [p.strip() for p in column.split(";") if p.strip()]
    pattern = re.compile(rf"^{prefix}(\d+)_{re.escape(oid)}$")
    found = []
    for s in expr.free_symbols:
        m = pattern.match(s.name)
        if m:
            found.append((int(m.group(1)), s.name))
    return [name for _, name in sorted(found)]


def _noise_model(row: Any, where: str, b: PlanBuilder) -> tuple[int, int]:
    """(transform code, distribution code) of an observable row; ``log-normal`` and the
    like become a ``log``/``log10`` transform with a normal or Laplace distribution."""
    transform = (row["observableTransformation"] or "lin").strip().lower()
    dist = (row["noiseDistribution"] or "normal").strip().lower()
    if dist in ("log-normal", "lognormal", "log-laplace", "loglaplace"):
        if transform not in ("lin", "log"):
            b.fail(f"noiseDistribution {dist!r} with observableTransformation "
                   f"{transform!r}", entry=where)
        transform, dist = "log", dist.replace("log-", "").replace("log", "")
    if dist in ("log10-normal", "log10-laplace"):
        transform, dist = "log10", dist.split("-")[1]
    if transform not in TRANSFORMS:
        b.fail(f"observableTransformation {transform!r} is not supported (known: "
               f"{', '.join(TRANSFORMS)})", entry=where)
    if dist not in DISTRIBUTIONS:
        b.fail(f"noiseDistribution {dist!r} is not supported (known: normal, laplace, "
               "log-normal, log-laplace)", entry=where)
    return TRANSFORMS.index(transform), DISTRIBUTIONS.index(dist)


# --------------------------------------------------------------------------- experiments
def measurement_records(b: PlanBuilder) -> tuple[list[MeasurementRecord],
                                                 list[dict[str, str]]]:
    """The measurement table's rows as records, and as plain ``{column: text}`` dicts."""
    obs_index = {o: i for i, o in enumerate(b.observables.ids)}
    rows: list[dict[str, str]] = []
    records: list[MeasurementRecord] = []
    for table, row in b.rows("measurement"):
        where = f"{table.file}:{row.line}"
        oid = row["observableId"]
        if oid not in obs_index:
            b.fail(f"unknown observable {oid!r}", entry=where)
        time = float(row["time"].strip().lower())
        if time == -math.inf:
            b.fail("a measurement at time -inf", entry=where)
        eid = row["experimentId"]
        records.append((eid, time, oid, float(row["measurement"]), row, where))
        rows.append(dict(row.cells))
    return records, rows


def experiment_plans(b: PlanBuilder, records: list[MeasurementRecord]
                     ) -> tuple[list[ExperimentPlan], dict[str, int], list[tuple[str, ...]]]:
    """The experiments that have measurements (order of first appearance), their index
    by id, and the initial-condition groups (sorted first-period condition ids)."""
    order: list[str] = []
    for eid, *_ in records:
        if eid not in order:
            order.append(eid)
    experiments: list[ExperimentPlan] = []
    exp_index: dict[str, int] = {}
    groups: list[tuple[str, ...]] = []
    group_index: dict[tuple[str, ...], int] = {}
    for eid in order:
        raw = b.periods_raw.get(eid)
        if raw is None:
            if eid and b.ctx.tables.get("experiment"):
                b.fail(f"experiment {eid!r} is not in the experiment table",
                       entry="measurements")
            raw = [(0.0, [])]
        times = [t for e, t, *_ in records if e == eid]
        periods = _period_plans(b, eid, raw, times)
        key = tuple(sorted(raw[0][1]))
        if key not in group_index:
            group_index[key] = len(groups)
            groups.append(key)
        exp_index[eid] = len(experiments)
        experiments.append(ExperimentPlan(eid, group_index[key], periods))
    return experiments, exp_index, groups


def _period_plans(b: PlanBuilder, eid: str, raw: list[tuple[float, list[str]]],
                  times: list[float]) -> list[PeriodPlan]:
    """The periods of experiment ``eid`` (``raw`` from the experiment table) with its
    measurement ``times``: a pre-equilibration period (start ``-inf``) runs to steady
    state from the next period's start (or 0; a lone one with measurements at finite
    times is followed by a period from 0)."""
    t_end = max(times)
    pre_eq = raw[0][0] == -math.inf
    if pre_eq and len(raw) == 1 and any(math.isfinite(t) for t in times):
        # only a pre-equilibration: the simulation goes on from its steady state at
        # t = 0, without a condition (as the PEtab v2 test suite's case 0023 reads it)
        raw = [*raw, (0.0, [])]
    if len(raw) > 2 and raw[1][0] == -math.inf:
        b.fail(f"experiment {eid!r} has several periods at time -inf", entry="experiments")
    first = raw[1][0] if pre_eq and len(raw) > 1 else 0.0 if pre_eq else raw[0][0]
    if min(times) < first and not (pre_eq and len(raw) == 1):
        b.fail(f"experiment {eid!r} has measurements before its first period "
               f"(t0 = {first})", entry="measurements")
    periods: list[PeriodPlan] = []
    for k, (start, conds) in enumerate(raw):
        end = raw[k + 1][0] if k + 1 < len(raw) else max(t_end, start)
        in_period = sorted({t for t in times
                            if start <= t and (t < end or k + 1 == len(raw))})
        pre = k == 0 and pre_eq
        if pre:
            start = first
            end = math.inf
            in_period = [math.inf] if len(raw) == 1 else []
        theta_changes, state_changes = [], []
        for cid in conds:
            for kind, index, chg in b.condition_changes.get(cid, []):
                (theta_changes if kind == "theta" else state_changes).append((index, chg))
        periods.append(PeriodPlan(float(start), float(end), tuple(conds), theta_changes,
                                  state_changes, np.array(in_period, np.float64),
                                  steady_state=end == math.inf, pre_equilibration=pre))
    return periods


def group_changes(experiments: list[ExperimentPlan], n_groups: int
                  ) -> tuple[list[list[tuple[int, int]]], np.ndarray]:
    """Per initial-condition group: the first-period parameter changes and the start
    time (those of the group's first experiment)."""
    theta_changes: list[list[tuple[int, int]]] = []
    t0 = np.zeros(n_groups)
    for g in range(n_groups):
        first = next(e for e in experiments if e.group == g)
        theta_changes.append(list(first.periods[0].theta_changes))
        t0[g] = first.t0
    return theta_changes, t0


# --------------------------------------------------------------------------- measurements
def measurement_plan(b: PlanBuilder, records: list[MeasurementRecord],
                     rows: list[dict[str, str]], exp_index: dict[str, int]
                     ) -> MeasurementPlan:
    """The measurements (table order) as index arrays into the experiments' periods,
    the observables and ``theta``."""
    obs = b.observables
    obs_index = {o: i for i, o in enumerate(obs.ids)}
    m = len(records)
    K, L = obs.n_obs_par, obs.n_noise_par
    exp_a = np.zeros(m, np.int64)
    per_a = np.zeros(m, np.int64)
    tix_a = np.zeros(m, np.int64)
    time_a = np.zeros(m, np.float64)
    obs_a = np.zeros(m, np.int64)
    val_a = np.zeros(m, np.float64)
    tr_a = np.zeros(m, np.int64)
    di_a = np.zeros(m, np.int64)
    opt = np.full((m, K), -1, np.int64)
    opv = np.full((m, K), np.nan)
    npt = np.full((m, L), -1, np.int64)
    npv = np.full((m, L), np.nan)
    for i, (eid, time, oid, value, row, where) in enumerate(records):
        e = exp_index[eid]
        exp = b.experiments[e]
        k = _period_of(exp, time)
        exp_a[i], per_a[i] = e, k
        tix_a[i] = int(np.searchsorted(exp.periods[k].times, time))
        time_a[i], val_a[i] = time, value
        o = obs_index[oid]
        obs_a[i] = o
        tr_a[i], di_a[i] = obs.codes[o]
        _overrides(b, row["observableParameters"], obs.obs_placeholders[o], opt[i], opv[i],
                   "observableParameters", where)
        _overrides(b, row["noiseParameters"], obs.noise_placeholders[o], npt[i], npv[i],
                   "noiseParameters", where)
    return MeasurementPlan(exp_a, per_a, tix_a, time_a, obs_a, val_a, tr_a, di_a, opt, opv,
                           npt, npv, rows)


def _period_of(exp: ExperimentPlan, time: float) -> int:
    """The period of ``exp`` whose ``times`` hold a measurement at ``time``."""
    k = max(j for j, p in enumerate(exp.periods) if p.start <= time)
    if k + 1 < len(exp.periods) and time >= exp.periods[k + 1].start:
        k += 1
    if exp.periods[k].pre_equilibration and len(exp.periods) > 1:
        k = 1   # the pre-equilibration period starts where period 1 does
    return k


def _overrides(b: PlanBuilder, text: str, names: list[str], theta_out: np.ndarray,
               value_out: np.ndarray, column: str, where: str) -> None:
    """Write a row's placeholder values (``text``, ``;``-separated; one value applies to
    every placeholder) for placeholders ``names``: a number into ``value_out``, a
    parameter's theta index into ``theta_out``."""
    parts = [p.strip() for p in text.split(";")] if text.strip() else []
    if len(parts) == 1 and len(names) > 1:
        parts = parts * len(names)
    if len(parts) != len(names):
        b.fail(f"{column}: {len(parts)} value(s) for {len(names)} placeholder(s) "
               f"({', '.join(names) or 'none'})", entry=where)
    for k, part in enumerate(parts):
        try:
            value_out[k] = float(part)
            continue
        except ValueError:
            pass
        target = b.aliases.get(part, part)
        if target not in b.theta_index:
            b.fail(f"{column}: {part!r} is neither a number nor a parameter id", entry=where)
        theta_out[k] = b.theta_index[target]
