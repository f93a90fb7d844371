"""The plan's data as numpy index arrays: the layout both executors read.

:func:`data_layout` turns a :class:`~petab_sciml.simulation.plan.SimulationPlan` into a
:class:`DataLayout`: measurements, where each one reads the solution, observable and
likelihood groups, prior groups, per-period output times and changes, experiments
stacked by number of periods, initial-condition groups and condition-change values.
Backends convert these arrays to their framework once per executor; nothing here
depends on a framework or on solver options.

Two layouts of the solution points are given, one per way of solving:

* **sequential** (period by period): the output times of every period of every
  experiment, concatenated in experiment order, then period order (``PeriodArrays``);
* **batched** (experiments of one number of periods solved together): per batch, an
  ``(E, P, N)`` block of output times (``ExperimentBatch``), the blocks concatenated in
  batch order, each in C order.

Shapes use ``M`` measurements, ``K`` / ``L`` observable / noise placeholders
(``plan.n_obs_par`` / ``plan.n_noise_par``), ``G`` initial-condition groups, ``C``
condition changes (``plan.change_exprs``).  Integer arrays are ``int64``, real arrays
``float64``.  ``theta0``, ``mech_theta_index`` and ``free_index`` are read from the plan
itself.  The arrays are shared, not copied, by whoever reads the layout: read them only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from petab_sciml.simulation.plan import DISTRIBUTIONS, TRANSFORMS, PeriodPlan, SimulationPlan

__all__ = ["DataLayout", "ExperimentBatch", "PeriodArrays", "data_layout"]


@dataclass(frozen=True)
class PeriodArrays:
    """One period of one experiment, for solving period by period.

    A steady-state period's finite output times are solved for up to ``end`` (the last
    finite time, else ``start``); its ``n_inf`` steady-state outputs are read where the
    solve then settles."""

    start: float
    end: float
    """Where the solve to the output times ends (the period's end, except as above)."""
    steady_state: bool
    n_times: int
    """Finite output times (the first ``n_times`` of ``save_times``)."""
    n_inf: int
    """Output times at ``inf`` (steady-state measurements), after the finite ones."""
    save_times: np.ndarray
    """``(n_out_max,)``: the finite output times (clipped to ``[start, end]``), then
    ``end`` as padding."""
    grid: np.ndarray
    """``(n_grid,)``: the sorted distinct times among ``start``, ``end`` and the finite
    output times."""
    grid_index: np.ndarray
    """``(n_times,)``: the index in ``grid`` of each finite output time."""
    theta_target: np.ndarray
    """``(n_changes,)``: theta index of each parameter change at the period start."""
    theta_source: np.ndarray
    """``(n_changes,)``: its index into the change values (``plan.change_exprs``)."""
    state_target: np.ndarray
    """``(n_state_changes,)``: state index of each state change at the period start."""
    state_source: np.ndarray


@dataclass(frozen=True)
class ExperimentBatch:
    """The experiments of one number of periods ``P``, stacked: ``E`` experiments,
    ``N`` output times per period (the most of any period, at least 1), padded."""

    n_periods: int
    experiments: np.ndarray
    """``(E,)``: index into ``plan.experiments``, ascending."""
    n_times: int
    """``N``."""
    group: np.ndarray
    """``(E,)``: initial-condition group of each experiment."""
    start: np.ndarray
    """``(E, P)``: period start times."""
    end: np.ndarray
    """``(E, P)``: period end times (``inf`` for steady-state periods)."""
    save_times: np.ndarray
    """``(E, P, N)``: output times, padded with the period's end; a steady-state
    (``inf``) output time is replaced by the period's last finite output time, else its
    start (see ``at_steady_state``)."""
    at_steady_state: np.ndarray
    """``(E, P, N)`` bool: the output is read at the steady state (its measurement time is
    ``inf``, or it pads a steady-state period)."""
    theta_target: np.ndarray
    """``(E, P, Kc)``: theta index of each parameter change at the period start, padded
    with ``len(plan.theta_ids)`` (one past the end: a dropped write); ``Kc >= 1``."""
    theta_source: np.ndarray
    """``(E, P, Kc)``: index into the change values (0 as padding)."""
    state_target: np.ndarray
    """``(E, P, Ks)``: state index of each state change, padded with
    ``len(plan.state_ids)``; ``Ks >= 1``."""
    state_source: np.ndarray
    """``(E, P, Ks)``: index into the change values (0 as padding)."""


@dataclass(frozen=True)
class DataLayout:
    """Everything the executors index with; see the module docstring for the notation."""

    # -- solution points
    n_out_max: int
    """The most output times of any period (at least 1)."""
    periods: tuple[tuple[PeriodArrays, ...], ...]
    """Per experiment (plan order), per period."""
    batches: tuple[ExperimentBatch, ...]
    """Experiments by number of periods, ascending."""
    # -- initial-condition groups
    group_t0: np.ndarray
    """``(G,)``: start time of each group."""
    group_theta_target: np.ndarray
    """``(G, Kg)``: theta index of each first-period parameter change, padded with
    ``len(plan.theta_ids)``; ``Kg`` the most changes of any group (may be 0)."""
    group_theta_source: np.ndarray
    """``(G, Kg)``: index into the change values (0 as padding)."""
    group_theta_count: np.ndarray
    """``(G,)``: the changes of each group (the unpadded part of each row)."""
    array_inputs: tuple[tuple[int, int, np.ndarray], ...]
    """(network index, input argument, ``(G, *shape)`` values) of every array input."""
    # -- measurements (table order)
    measurement_time: np.ndarray
    """``(M,)``."""
    measurement_value: np.ndarray
    """``(M,)``."""
    measurement_group: np.ndarray
    """``(M,)``: initial-condition group of the measurement's experiment."""
    measurement_point: np.ndarray
    """``(M,)``: the output the measurement reads, in the sequential layout."""
    measurement_period: np.ndarray
    """``(M,)``: its period (sequential: experiments' periods concatenated)."""
    measurement_point_batched: np.ndarray
    """``(M,)``: the output the measurement reads, in the batched layout."""
    measurement_period_batched: np.ndarray
    """``(M,)``: its period in the batched layout (per batch ``(E, P)`` in C order)."""
    obs_par_theta: np.ndarray
    """``(M, K)``: theta index of each observable-placeholder value (-1: a number)."""
    obs_par_value: np.ndarray
    """``(M, K)``: the number where ``obs_par_theta`` is -1 (NaN if unset)."""
    noise_par_theta: np.ndarray
    """``(M, L)``: as ``obs_par_theta``, for noise placeholders."""
    noise_par_value: np.ndarray
    """``(M, L)``."""
    # -- groups of measurements and parameters
    observable_rows: tuple[tuple[int, np.ndarray], ...]
    """(observable index, its measurements ascending) of every measured observable."""
    table_order: np.ndarray
    """``(M,)``: position of each measurement (table order) in the concatenation of the
    ``observable_rows``: values computed per observable, concatenated, then taken at
    ``table_order``, are in table order."""
    likelihood_groups: tuple[tuple[int, int, np.ndarray], ...]
    """(index into ``TRANSFORMS``, index into ``DISTRIBUTIONS``, measurements ascending)
    of every noise model in use, transform-major."""
    prior_index: tuple[np.ndarray, ...]
    """Per entry of ``plan.priors``: its indices into ``w``."""
    # -- condition changes
    change_constant: np.ndarray
    """``(C,)``: the value of each change that is a number (0 for formulas)."""
    change_is_formula: np.ndarray
    """``(C,)`` bool: the change is a formula (compiled on its own)."""
    change_formula_index: np.ndarray
    """``(C,)``: a formula change's index among the formula changes (0 for numbers)."""


def data_layout(plan: SimulationPlan) -> DataLayout:
    """The numpy layout of ``plan``'s data (see :class:`DataLayout`)."""
    n_out_max = max(1, max((len(p.times) for e in plan.experiments for p in e.periods),
                           default=0))
    periods = tuple(tuple(_period_arrays(p, n_out_max) for p in exp.periods)
                    for exp in plan.experiments)
    batches, batch_point, batch_period = _batches(plan)
    point, period = _sequential_points(plan)
    m = plan.measurements
    pairs = list(zip(m.experiment.tolist(), m.period.tolist(), m.time_index.tolist()))
    observable_rows, table_order = _observable_rows(plan)
    return DataLayout(
        n_out_max=n_out_max,
        periods=periods,
        batches=batches,
        **_group_arrays(plan),
        array_inputs=tuple((j, inp.arg, np.asarray(inp.data, np.float64))
                           for j, net in enumerate(plan.networks) for inp in net.inputs
                           if inp.kind == "array"),
        measurement_time=m.time.astype(np.float64),
        measurement_value=m.value.astype(np.float64),
        measurement_group=np.array([plan.experiments[e].group for e, _, _ in pairs],
                                   np.int64),
        measurement_point=np.array([point[(e, k)] + j for e, k, j in pairs], np.int64),
        measurement_period=np.array([period[(e, k)] for e, k, _ in pairs], np.int64),
        measurement_point_batched=np.array([batch_point[(e, k)] + j for e, k, j in pairs],
                                           np.int64),
        measurement_period_batched=np.array([batch_period[(e, k)] for e, k, _ in pairs],
                                            np.int64),
        obs_par_theta=m.obs_par_theta.astype(np.int64),
        obs_par_value=m.obs_par_value.astype(np.float64),
        noise_par_theta=m.noise_par_theta.astype(np.int64),
        noise_par_value=m.noise_par_value.astype(np.float64),
        observable_rows=observable_rows,
        table_order=table_order,
        likelihood_groups=_likelihood_groups(plan),
        prior_index=tuple(np.asarray(idx, np.int64) for _, idx, *_ in plan.priors),
        **_change_values(plan),
    )


# --------------------------------------------------------------------------- periods
def _period_arrays(p: PeriodPlan, n_out_max: int) -> PeriodArrays:
    times = np.asarray(p.times, np.float64)
    n_all = int(times.size)
    end = p.end
    if p.steady_state:
        times = times[np.isfinite(times)]
        end = float(times[-1]) if times.size else p.start
    save_times = np.full(n_out_max, end, np.float64)
    save_times[: times.size] = np.clip(times, p.start, end)
    grid = sorted({p.start, end, *times.tolist()})
    return PeriodArrays(
        start=float(p.start), end=float(end), steady_state=p.steady_state,
        n_times=int(times.size), n_inf=n_all - int(times.size), save_times=save_times,
        grid=np.array(grid), grid_index=np.array([grid.index(x) for x in times.tolist()],
                                                 np.int64),
        theta_target=np.array([a for a, _ in p.theta_changes], np.int64),
        theta_source=np.array([b for _, b in p.theta_changes], np.int64),
        state_target=np.array([a for a, _ in p.state_changes], np.int64),
        state_source=np.array([b for _, b in p.state_changes], np.int64))


def _sequential_points(plan: SimulationPlan) -> tuple[dict, dict]:
    """(experiment, period) -> offset of its first output, and its period index, in the
    sequential layout."""
    point: dict[tuple[int, int], int] = {}
    period: dict[tuple[int, int], int] = {}
    n_points = n_periods = 0
    for e, exp in enumerate(plan.experiments):
        for k, p in enumerate(exp.periods):
            point[(e, k)], period[(e, k)] = n_points, n_periods
            n_points += len(p.times)
            n_periods += 1
    return point, period


def _batches(plan: SimulationPlan) -> tuple[tuple[ExperimentBatch, ...], dict, dict]:
    """The batches by number of periods, and (experiment, period) -> offset of its
    first output and its period index in the batched layout."""
    by_p: dict[int, list[int]] = {}
    for e, exp in enumerate(plan.experiments):
        by_p.setdefault(len(exp.periods), []).append(e)
    batches = []
    point: dict[tuple[int, int], int] = {}
    period: dict[tuple[int, int], int] = {}
    n_points = n_periods = 0
    for P, exps in sorted(by_p.items()):
        batch = _batch(plan, P, exps)
        N, E = batch.n_times, len(exps)
        for i, e in enumerate(exps):
            for k in range(P):
                point[(e, k)] = n_points + (i * P + k) * N
                period[(e, k)] = n_periods + i * P + k
        batches.append(batch)
        n_points += E * P * N
        n_periods += E * P
    return tuple(batches), point, period


def _batch(plan: SimulationPlan, P: int, exps: list[int]) -> ExperimentBatch:
    n_theta, n_x = len(plan.theta_ids), len(plan.state_ids)
    all_periods = [p for e in exps for p in plan.experiments[e].periods]
    N = max(1, max(len(p.times) for p in all_periods))
    K = max(1, max(len(p.theta_changes) for p in all_periods))
    K2 = max(1, max(len(p.state_changes) for p in all_periods))
    E = len(exps)
    starts, ends = np.zeros((E, P)), np.zeros((E, P))
    ts = np.zeros((E, P, N))
    t_inf = np.zeros((E, P, N), bool)
    th_t, th_s = np.full((E, P, K), n_theta, np.int64), np.zeros((E, P, K), np.int64)
    st_t, st_s = np.full((E, P, K2), n_x, np.int64), np.zeros((E, P, K2), np.int64)
    group = np.zeros(E, np.int64)
    for i, e in enumerate(exps):
        exp = plan.experiments[e]
        group[i] = exp.group
        for k, p in enumerate(exp.periods):
            starts[i, k], ends[i, k] = p.start, p.end
            ts[i, k, :] = p.end
            ts[i, k, : len(p.times)] = p.times
            if p.steady_state:
                t_inf[i, k] = ~np.isfinite(ts[i, k])
                finite = p.times[np.isfinite(p.times)]
                ts[i, k, t_inf[i, k]] = finite[-1] if finite.size else p.start
            for c, (ti, ci) in enumerate(p.theta_changes):
                th_t[i, k, c], th_s[i, k, c] = ti, ci
            for c, (xi, ci) in enumerate(p.state_changes):
                st_t[i, k, c], st_s[i, k, c] = xi, ci
    return ExperimentBatch(P, np.array(exps, np.int64), N, group, starts, ends, ts, t_inf,
                           th_t, th_s, st_t, st_s)


# --------------------------------------------------------------------------- groups
def _group_arrays(plan: SimulationPlan) -> dict[str, np.ndarray]:
    G = len(plan.groups_conditions)
    kg = max((len(c) for c in plan.group_theta_changes), default=0)
    target = np.full((G, kg), len(plan.theta_ids), np.int64)
    source = np.zeros((G, kg), np.int64)
    for g, changes in enumerate(plan.group_theta_changes):
        for i, (ti, ci) in enumerate(changes):
            target[g, i], source[g, i] = ti, ci
    return {"group_t0": plan.group_t0.astype(np.float64), "group_theta_target": target,
            "group_theta_source": source,
            "group_theta_count": np.array([len(c) for c in plan.group_theta_changes],
                                          np.int64).reshape(-1)}


def _observable_rows(plan: SimulationPlan) -> tuple[tuple[tuple[int, np.ndarray], ...],
                                                    np.ndarray]:
    m = plan.measurements
    rows = []
    for i in range(len(plan.observable_ids)):
        idx = np.flatnonzero(m.observable == i).astype(np.int64)
        if idx.size:
            rows.append((i, idx))
    order = (np.argsort(np.concatenate([idx for _, idx in rows])).astype(np.int64) if rows
             else np.zeros(0, np.int64))
    return tuple(rows), order


def _likelihood_groups(plan: SimulationPlan) -> tuple[tuple[int, int, np.ndarray], ...]:
    m = plan.measurements
    groups = []
    for tr in range(len(TRANSFORMS)):
        for di in range(len(DISTRIBUTIONS)):
            idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
            if idx.size:
                groups.append((tr, di, idx.astype(np.int64)))
    return tuple(groups)


def _change_values(plan: SimulationPlan) -> dict[str, np.ndarray]:
    """Numbers in a table, formulas indexed among themselves."""
    exprs = plan.change_exprs
    numeric = [bool(getattr(e, "is_number", False)) for e in exprs]
    is_formula = ~np.array(numeric, bool).reshape(-1)
    return {"change_constant": np.array([float(e) if n else 0.0
                                         for e, n in zip(exprs, numeric)],
                                        np.float64).reshape(-1),
            "change_is_formula": is_formula,
            "change_formula_index": np.maximum(np.cumsum(is_formula) - 1, 0)
            .astype(np.int64)}
