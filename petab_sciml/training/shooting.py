"""Multiple shooting: each experiment's time span split into windows, each window after
the first starting from estimated states tied to the window before by a continuity
penalty (draft PEtab SciML training strategies, "Multiple shooting").

Identifiers are the draft's: experiment ``WINDOW{i}_EXPERIMENT_{expId}`` (windows
numbered from 1), its initial-state condition ``..._IC``, parameters
``..._PARAMETER_{stateId}``, penalty observables ``..._PENALTY_{stateId}`` measured as 0
(noise 1) at the window's start in window i-1's experiment, and one non-estimated
``MS_PENALTY_SQRT`` = sqrt(penalty).

Where the draft's reference code loses information, this does not (docs/training_strategies.md):

* window 1 is the experiment itself up to the window's end: every period, the
  pre-equilibration and periods before the first measurement included;
* a later window starts with every assignment in effect at its start: the values that
  earlier conditions (the pre-equilibration's too) gave to parameters, compartments and
  network inputs are set again in its ``_IC`` condition, beside the estimated states;
* window states are bounded by their kind: species and compartments cannot be negative
  ([0, state_bound]), other states (parameters with rate rules) lie in
  [-state_bound, state_bound].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from petab_sciml.expressions import free_symbol_names, parse
from petab_sciml.problem.tables import experiment_periods

from .partition import Window
from .source import Rows, SourceProblem, StrategyError, number, parse_time

PENALTY_PARAMETER = "MS_PENALTY_SQRT"
DEFAULT_EXPERIMENT = "default"
"""The id given to measurements without an experiment (they start at time 0)."""


def window_experiment(i: int, experiment: str) -> str:
    return f"WINDOW{i}_EXPERIMENT_{experiment}"


def window_parameter(i: int, experiment: str, state: str) -> str:
    return f"{window_experiment(i, experiment)}_PARAMETER_{state}"


def shooting_tables(source: SourceProblem, windows: Sequence[Window], *, penalty: float,
                    log_penalty: bool = False, initial_value: float = 1.0,
                    state_bound: float = 1e8) -> dict[str, Rows]:
    """The multiple-shooting problem's tables for ``windows`` (ascending, each starting
    at or before the end of the one before; :func:`~.partition.shooting_windows`).

    ``penalty``: the continuity weight lambda (the penalty observables are scaled by
    sqrt(lambda)); ``log_penalty``: compare ``log(abs(state))`` instead of the state;
    ``initial_value``: the nominal value of every window state parameter."""
    if not penalty > 0 or not math.isfinite(penalty):
        raise StrategyError(f"the continuity penalty must be a positive number, got {penalty}")
    if any(math.isinf(t) for t in source.measurement_times):
        raise StrategyError("multiple shooting cannot split measurements at time inf "
                            "(steady states)")
    job = _Shooting(source, windows, log_penalty, initial_value, state_bound)
    job.run()
    params = job.tables["parameter"]
    params.add(**_parameter_cells(params, PENALTY_PARAMETER, math.sqrt(penalty),
                                  math.sqrt(penalty), math.sqrt(penalty), estimate=False))
    return job.tables


class _Shooting:
    def __init__(self, source: SourceProblem, windows: Sequence[Window], log_penalty: bool,
                 initial_value: float, state_bound: float):
        self.source = source
        self.windows = list(windows)
        self.log_penalty = log_penalty
        self.initial_value = float(initial_value)
        self.state_bound = float(state_bound)
        t = source.tables
        self.tables = {
            "measurement": Rows(list(t["measurement"].columns)),
            "experiment": Rows(list(t["experiment"].columns)),
            "condition": t["condition"].copy(),
            "observable": t["observable"].copy(),
            "parameter": t["parameter"].copy(),
        }
        self.conditions: dict[str, list[dict[str, str]]] = {}
        for row in t["condition"].rows:
            self.conditions.setdefault(row["conditionId"], []).append(row)
        self.periods = experiment_periods(
            (r["experimentId"], parse_time(r["time"]), r["conditionId"])
            for r in t["experiment"].rows)
        self.taken = source.ids()
        self.window_states: list[WindowState] = []
        self.default_added = False

    def new_id(self, name: str) -> str:
        if name in self.taken:
            raise StrategyError(f"the problem already uses the id {name!r}, which multiple "
                                "shooting needs for its own")
        self.taken.add(name)
        return name

    def run(self) -> None:
        by_experiment: dict[str, list[dict[str, str]]] = {}
        for row in self.source.tables["measurement"].rows:
            by_experiment.setdefault(row["experimentId"], []).append(row)
        if "" in by_experiment:
            if DEFAULT_EXPERIMENT in self.periods:
                raise StrategyError(f"measurements without an experiment, and an experiment "
                                    f"called {DEFAULT_EXPERIMENT!r}: give those measurements "
                                    "an experiment first")
            self.periods[DEFAULT_EXPERIMENT] = [(0.0, [])]
            self.default_added = True
            by_experiment[DEFAULT_EXPERIMENT] = by_experiment.pop("")
        for experiment, rows in by_experiment.items():
            self.experiment(experiment, rows)

    def experiment(self, experiment: str, rows: list[dict[str, str]]) -> None:
        last = max(parse_time(r["time"]) for r in rows)
        periods = self.periods.get(experiment, [(0.0, [])])
        for i, (t0, tf) in enumerate(self.windows, start=1):
            if i > 1 and last < t0:
                break
            eid = self.new_id(window_experiment(i, experiment))
            if i == 1:
                kept = [(time, ids) for time, ids in periods if time <= tf]
            else:
                kept = [(t0, [self.initial_condition(i, experiment, periods, t0)])]
                kept += [(time, ids) for time, ids in periods if t0 < time <= tf]
                self.penalties(i, experiment, t0)
            for time, ids in kept:
                self.tables["experiment"].add(experimentId=eid, time=number(time),
                                              conditionId=";".join(ids))
            for row in rows:
                if t0 <= parse_time(row["time"]) <= tf or (i == 1 and
                                                           parse_time(row["time"]) < t0):
                    self.tables["measurement"].add(**{**row, "experimentId": eid})

    def initial_condition(self, i: int, experiment: str,
                          periods: list[tuple[float, list[str]]], t0: float) -> str:
        """The ``_IC`` condition of window ``i``: the estimated states, and every other
        target's value in effect at ``t0``."""
        cid = self.new_id(f"{window_experiment(i, experiment)}_IC")
        states = set(self.source.state_ids)
        in_effect: dict[str, dict[str, str]] = {}
        for time, ids in periods:
            if time > t0:
                break
            for c in ids:
                for row in self.conditions.get(c, []):
                    if row["targetId"] not in states:
                        in_effect[row["targetId"]] = row
        conds = self.tables["condition"]
        for target, row in in_effect.items():
            used = free_symbol_names(parse(row["targetValue"]))
            if used & (states | {"time", "t"}):
                raise StrategyError(
                    f"condition {row['conditionId']!r} sets {target!r} to "
                    f"{row['targetValue']!r}, which depends on states or time: its value "
                    f"at the start of window {i} (t = {t0:g}) is not known", entry=target)
            conds.add(**{**row, "conditionId": cid})
        for state in self.source.state_ids:
            pid = self.new_id(window_parameter(i, experiment, state))
            original = "" if self.default_added and experiment == DEFAULT_EXPERIMENT \
                else experiment
            self.window_states.append(WindowState(pid, original, t0, state))
            conds.add(conditionId=cid, targetId=state, targetValue=pid)
            lower = -self.state_bound if self.source.state_kinds.get(state) == "parameter" \
                else 0.0
            params = self.tables["parameter"]
            params.add(**_parameter_cells(params, pid, self.initial_value, lower,
                                          self.state_bound, estimate=True))
        return cid

    def penalties(self, i: int, experiment: str, t0: float) -> None:
        previous = window_experiment(i - 1, experiment)
        for state in self.source.state_ids:
            pid = window_parameter(i, experiment, state)
            oid = self.new_id(f"{window_experiment(i, experiment)}_PENALTY_{state}")
            if self.log_penalty:
                formula = f"(log(abs({state})) - log(abs({pid}))) * {PENALTY_PARAMETER}"
            else:
                formula = f"({state} - {pid}) * {PENALTY_PARAMETER}"
            obs = self.tables["observable"]
            cells = {"observableId": oid, "observableFormula": formula, "noiseFormula": "1.0",
                     "noiseDistribution": "normal"}
            if "observableTransformation" in obs.columns:
                cells["observableTransformation"] = "lin"
            obs.add(**cells)
            self.tables["measurement"].add(observableId=oid, experimentId=previous,
                                           time=number(t0), measurement="0.0")


@dataclass(frozen=True)
class WindowState:
    """An estimated window initial state: parameter ``parameter`` is ``state`` at time
    ``t0`` of the source problem's experiment ``experiment`` ("" for measurements
    without an experiment)."""

    parameter: str
    experiment: str
    t0: float
    state: str


def window_states(source: SourceProblem, windows: Sequence[Window]) -> list[WindowState]:
    """The window initial states :func:`shooting_tables` estimates for ``windows``."""
    job = _Shooting(source, windows, False, 1.0, 1.0)
    job.run()
    return job.window_states


def _parameter_cells(table: Rows, pid: str, nominal: float, lower: float, upper: float, *,
                     estimate: bool) -> dict[str, str]:
    cells = {"parameterId": pid, "lowerBound": number(lower), "upperBound": number(upper),
             "nominalValue": number(nominal), "estimate": "true" if estimate else "false"}
    if "parameterScale" in table.columns:
        cells["parameterScale"] = "lin"
    return cells
