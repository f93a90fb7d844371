"""The data of a plan as numpy index and value arrays: the arguments of the objective.

Everything the objective reads besides the parameters (initial-condition groups,
experiments batched by their number of periods, measurements, noise models, priors,
condition changes) is laid out here as arrays, so that new data values never retrace.
A function of the plan alone (numpy only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from petab_sciml.simulation.plan import SimulationPlan

Batch = tuple[int, list[int], int]
"""``(P, experiments, N)``: experiments with ``P`` periods each, solved together, with
at most ``N`` measurement times per period."""


@dataclass
class DataLayout:
    """The arrays of :func:`data_layout` and how to read them."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """By name: ``g_*`` initial-condition groups, ``arr_{j}_{arg}`` array inputs of
    network ``j``, ``b{b}_*`` batch ``b``, ``m_*`` measurements, ``obs_{i}`` rows of
    observable ``i``, ``llh_{tr}_{di}`` rows of a noise model, ``prior_{i}`` entries of
    ``w`` with prior ``i``, ``chg_*`` condition changes, ``free`` and ``mech_theta``."""
    batches: list[Batch] = field(default_factory=list)
    """Experiments batched by their number of periods, fewest periods first."""
    obs_rows: list[tuple[int, str]] = field(default_factory=list)
    """``(observable index, array name of its measurement rows)``, measured ones only."""
    llh_groups: list[tuple[int, int, str]] = field(default_factory=list)
    """``(transformation code, distribution code, array name of its rows)``."""


def data_layout(plan: SimulationPlan, *, steady_state: bool, forward_ad: bool) -> DataLayout:
    """The arrays of ``plan``; ``steady_state``: lay out which points are read at the end
    of a period run to steady state (``b{b}_tinf``); ``forward_ad``: include the free
    parameters' indices (``free``)."""
    layout = DataLayout()
    d = layout.arrays
    _group_arrays(plan, d)
    for j, net in enumerate(plan.networks):
        for inp in net.inputs:
            if inp.kind == "array":
                d[f"arr_{j}_{inp.arg}"] = inp.data
    point_of, theta_of = _batch_arrays(plan, layout, steady_state)
    _measurement_arrays(plan, layout, point_of, theta_of)
    for i, (_, idx, *_) in enumerate(plan.priors):
        d[f"prior_{i}"] = idx
    if forward_ad:
        d["free"] = plan.free_index
    d["mech_theta"] = plan.mech_theta_index
    _change_arrays(plan, d)
    return layout


def _group_arrays(plan: SimulationPlan, d: dict[str, np.ndarray]) -> None:
    """Initial-condition groups: start times and first-period parameter changes as
    (target, source) index pairs, padded with target ``n_theta`` (dropped)."""
    n_theta = len(plan.theta_ids)
    G = len(plan.groups_conditions)
    d["g_t0"] = plan.group_t0.astype(np.float64)
    kg = max((len(c) for c in plan.group_theta_changes), default=0)
    tgt = np.full((G, kg), n_theta, np.int64)
    src = np.zeros((G, kg), np.int64)
    for g, changes in enumerate(plan.group_theta_changes):
        for i, (ti, ci) in enumerate(changes):
            tgt[g, i], src[g, i] = ti, ci
    d["g_th_tgt"], d["g_th_src"] = tgt, src


def _batch_arrays(plan: SimulationPlan, layout: DataLayout, steady_state: bool
                  ) -> tuple[dict[tuple[int, int, int], int], dict[tuple[int, int], int]]:
    """The arrays of every batch of experiments; returns where each measured point
    (experiment, period, time index) and each period's parameters (experiment, period)
    lie in the concatenated outputs of all batches."""
    by_p: dict[int, list[int]] = {}
    for e, exp in enumerate(plan.experiments):
        by_p.setdefault(len(exp.periods), []).append(e)
    x_offset, th_offset = 0, 0
    point_of: dict[tuple[int, int, int], int] = {}
    theta_of: dict[tuple[int, int], int] = {}
    for b, (P, exps) in enumerate(sorted(by_p.items())):
        N = max(1, max(len(p.times) for e in exps for p in plan.experiments[e].periods))
        arrays = _one_batch(plan, exps, P, N, steady_state)
        layout.arrays.update({f"b{b}_{name}": value for name, value in arrays.items()})
        for i, e in enumerate(exps):
            for k, p in enumerate(plan.experiments[e].periods):
                for jt in range(len(p.times)):
                    point_of[(e, k, jt)] = x_offset + (i * P + k) * N + jt
                theta_of[(e, k)] = th_offset + i * P + k
        layout.batches.append((P, exps, N))
        x_offset += len(exps) * P * N
        th_offset += len(exps) * P
    return point_of, theta_of


def _one_batch(plan: SimulationPlan, exps: list[int], P: int, N: int, steady_state: bool
               ) -> dict[str, np.ndarray]:
    """Arrays of the experiments ``exps`` (``P`` periods, at most ``N`` times each):
    period bounds, measurement times (padded with the period's end), parameter and state
    changes as (target, source) pairs (padded with targets that are dropped), initial-
    condition group and, with ``steady_state``, which times are ``inf``."""
    n_theta, n_x = len(plan.theta_ids), len(plan.state_ids)
    E = len(exps)
    K = max(1, max(len(p.theta_changes) for e in exps for p in plan.experiments[e].periods))
    K2 = max(1, max(len(p.state_changes) for e in exps for p in plan.experiments[e].periods))
    starts, ends, ts = np.zeros((E, P)), np.zeros((E, P)), np.zeros((E, P, N))
    th_t, th_s = np.full((E, P, K), n_theta, np.int64), np.zeros((E, P, K), np.int64)
    st_t, st_s = np.full((E, P, K2), n_x, np.int64), np.zeros((E, P, K2), np.int64)
    group = np.zeros(E, np.int64)
    t_inf = np.zeros((E, P, N), bool)
    for i, e in enumerate(exps):
        exp = plan.experiments[e]
        group[i] = exp.group
        for k, p in enumerate(exp.periods):
            starts[i, k], ends[i, k] = p.start, p.end
            ts[i, k, :] = p.end
            ts[i, k, : len(p.times)] = p.times
            if p.steady_state:
                # steady-state (inf) points read the end state; the solver saves
                # there at the last finite time (or the start) instead
                t_inf[i, k] = ~np.isfinite(ts[i, k])
                finite = p.times[np.isfinite(p.times)]
                ts[i, k, t_inf[i, k]] = finite[-1] if finite.size else p.start
            for c, (ti, ci) in enumerate(p.theta_changes):
                th_t[i, k, c], th_s[i, k, c] = ti, ci
            for c, (xi, ci) in enumerate(p.state_changes):
                st_t[i, k, c], st_s[i, k, c] = xi, ci
    arrays = {"start": starts, "end": ends, "ts": ts, "th_tgt": th_t, "th_src": th_s,
              "st_tgt": st_t, "st_src": st_s, "group": group}
    if steady_state:
        arrays["tinf"] = t_inf
    return arrays


def _measurement_arrays(plan: SimulationPlan, layout: DataLayout,
                        point_of: dict[tuple[int, int, int], int],
                        theta_of: dict[tuple[int, int], int]) -> None:
    """Per measurement: its point and parameters in the batches' outputs, group, time,
    value and placeholder sources; rows per observable and per noise model."""
    d = layout.arrays
    m = plan.measurements
    d["m_x"] = np.array([point_of[(int(e), int(k), int(j))] for e, k, j in
                         zip(m.experiment, m.period, m.time_index)], np.int64)
    d["m_th"] = np.array([theta_of[(int(e), int(k))] for e, k in
                          zip(m.experiment, m.period)], np.int64)
    d["m_group"] = np.array([plan.experiments[int(e)].group for e in m.experiment],
                            np.int64)
    d["m_time"] = m.time
    d["m_value"] = m.value
    d["m_opt"], d["m_opv"] = m.obs_par_theta, m.obs_par_value
    d["m_npt"], d["m_npv"] = m.noise_par_theta, m.noise_par_value
    rows = []
    for i in range(len(plan.observable_ids)):
        idx = np.flatnonzero(m.observable == i)
        if idx.size:
            d[f"obs_{i}"] = idx.astype(np.int64)
            layout.obs_rows.append((i, f"obs_{i}"))
            rows.append(idx)
    d["m_order"] = np.argsort(np.concatenate(rows)) if rows else np.zeros(0, np.int64)
    for tr in range(3):
        for di in range(2):
            idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
            if idx.size:
                key = f"llh_{tr}_{di}"
                d[key] = idx.astype(np.int64)
                layout.llh_groups.append((tr, di, key))


def _change_arrays(plan: SimulationPlan, d: dict[str, np.ndarray]) -> None:
    """Condition changes: the numbers in a table (``chg_const``), which changes are
    formulas (``chg_formula``) and each formula's position among them (``chg_pos``)."""
    exprs = plan.change_exprs
    numeric = [bool(getattr(e, "is_number", False)) for e in exprs]
    d["chg_const"] = np.array([float(e) if n else 0.0 for e, n in zip(exprs, numeric)],
                              np.float64).reshape(-1)
    d["chg_formula"] = ~np.array(numeric, bool).reshape(-1)
    d["chg_pos"] = np.maximum(np.cumsum(d["chg_formula"]) - 1, 0).astype(np.int64)
