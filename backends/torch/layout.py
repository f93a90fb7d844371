"""The plan's data as flat numpy arrays (:func:`build_layout`) and those arrays as tensors
per device and dtype (:class:`TensorCache`): the constants and their condition changes,
the networks' array inputs, each period's output times and changes, and the index arrays
of the measurements, their likelihood groups and the priors.  A function of the plan
alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from petab_sciml.simulation.plan import SimulationPlan


@dataclass(frozen=True)
class PeriodLayout:
    """One period of one experiment; its arrays are ``{key}_ts`` (output times padded
    with the end), ``{key}_grid`` / ``{key}_where`` (the sorted distinct times from start
    to end and each output's place in them), ``{key}_th_t`` / ``{key}_th_s`` and
    ``{key}_st_t`` / ``{key}_st_s`` (constants and states changed at its start: targets
    and sources in the condition changes' values)."""

    key: str
    start: float
    end: float
    """The end of the integration: a steady-state period's last finite output time."""
    n_times: int
    """Output times integrated to (a steady-state period's finite ones)."""
    steady: bool
    n_inf: int
    """Outputs at the steady state (``inf`` times)."""


@dataclass(frozen=True)
class DataLayout:
    arrays: dict[str, np.ndarray]
    """Every array by name: ``theta0``, ``mech_theta``, ``free``, ``arr_{net}_{arg}``,
    ``g{group}_tgt`` / ``_src``, the periods' (:class:`PeriodLayout`), ``m_*`` (per
    measurement), ``obs_{i}``, ``m_order``, ``llh_{transform}_{distribution}`` and
    ``prior_{i}``."""
    periods: list[list[PeriodLayout]]
    """Per experiment, its periods."""
    network_arrays: list[tuple[int, str]]
    """``(network index, argument)`` of every array input (``arr_{net}_{arg}``)."""
    observable_rows: list[tuple[int, str]]
    """``(observable index, key)``: the measurements of each measured observable."""
    likelihood_groups: list[tuple[int, int, str]]
    """``(transform, distribution, key)``: the measurements of each noise model."""


def build_layout(plan: SimulationPlan) -> DataLayout:
    """The plan's arrays (see :class:`DataLayout`)."""
    d: dict[str, Any] = {}
    d["theta0"] = plan.theta0.astype(np.float64)
    d["mech_theta"] = plan.mech_theta_index.astype(np.int64)
    d["free"] = plan.free_index.astype(np.int64)
    network_arrays = []
    for j, net in enumerate(plan.networks):
        for inp in net.inputs:
            if inp.kind == "array":
                d[f"arr_{j}_{inp.arg}"] = np.asarray(inp.data, np.float64)
                network_arrays.append((j, inp.arg))
    for g, changes in enumerate(plan.group_theta_changes):
        d[f"g{g}_tgt"] = np.array([a for a, _ in changes], np.int64)
        d[f"g{g}_src"] = np.array([b for _, b in changes], np.int64)
    periods = _period_arrays(plan, d)
    observable_rows, likelihood_groups = _measurement_arrays(plan, d)
    for i, (_, idx, *_) in enumerate(plan.priors):
        d[f"prior_{i}"] = np.asarray(idx, np.int64)
    return DataLayout(d, periods, network_arrays, observable_rows, likelihood_groups)


def _period_arrays(plan: SimulationPlan, d: dict[str, Any]) -> list[list[PeriodLayout]]:
    """Each period's arrays into ``d``; its :class:`PeriodLayout`."""
    n_out = max((len(p.times) for e in plan.experiments for p in e.periods), default=0)
    n_out_max = max(1, n_out)
    periods: list[list[PeriodLayout]] = []
    for e, exp in enumerate(plan.experiments):
        per = []
        for k, p in enumerate(exp.periods):
            key = f"e{e}p{k}"
            times = np.asarray(p.times, np.float64)
            n_times = int(times.size)
            end = p.end
            if p.steady_state:
                # integrate to the last finite time here; the steady-state solve goes on
                # to the steady state, where the inf points are read
                times = times[np.isfinite(times)]
                end = float(times[-1]) if times.size else p.start
            padded = np.full(n_out_max, end, np.float64)
            padded[: times.size] = np.clip(times, p.start, end)
            d[f"{key}_ts"] = padded
            d[f"{key}_grid"] = np.array(sorted({p.start, end, *times.tolist()}))
            d[f"{key}_where"] = np.array([sorted({p.start, end, *times.tolist()})
                                          .index(x) for x in times.tolist()], np.int64)
            d[f"{key}_th_t"] = np.array([a for a, _ in p.theta_changes], np.int64)
            d[f"{key}_th_s"] = np.array([b for _, b in p.theta_changes], np.int64)
            d[f"{key}_st_t"] = np.array([a for a, _ in p.state_changes], np.int64)
            d[f"{key}_st_s"] = np.array([b for _, b in p.state_changes], np.int64)
            per.append(PeriodLayout(key, float(p.start), float(end), int(times.size),
                                    p.steady_state, n_times - int(times.size)))
        periods.append(per)
    return periods


def _measurement_arrays(plan: SimulationPlan, d: dict[str, Any]):
    """The measurements' arrays into ``d``: per measurement its output (``m_x``: the
    row among all periods' outputs, experiment by experiment), its period (``m_th``),
    group, time, value and observable / noise parameter overrides; the rows of each
    observable and of each noise model.  Returns ``(observable_rows,
    likelihood_groups)`` (:class:`DataLayout`)."""
    m = plan.measurements
    offsets, th_offsets, x_off, th_off = {}, {}, 0, 0
    for e, exp in enumerate(plan.experiments):
        for k, p in enumerate(exp.periods):
            offsets[(e, k)] = x_off
            th_offsets[(e, k)] = th_off
            x_off += len(p.times)
            th_off += 1
    d["m_x"] = np.array([offsets[(int(e), int(k))] + int(j) for e, k, j in
                         zip(m.experiment, m.period, m.time_index)], np.int64)
    d["m_th"] = np.array([th_offsets[(int(e), int(k))] for e, k in
                          zip(m.experiment, m.period)], np.int64)
    d["m_group"] = np.array([plan.experiments[int(e)].group for e in m.experiment],
                            np.int64)
    d["m_time"] = m.time.astype(np.float64)
    d["m_value"] = m.value.astype(np.float64)
    d["m_opt"], d["m_opv"] = m.obs_par_theta.astype(np.int64), m.obs_par_value
    d["m_npt"], d["m_npv"] = m.noise_par_theta.astype(np.int64), m.noise_par_value
    observable_rows = []
    rows = []
    for i in range(len(plan.observable_ids)):
        idx = np.flatnonzero(m.observable == i)
        if idx.size:
            d[f"obs_{i}"] = idx.astype(np.int64)
            observable_rows.append((i, f"obs_{i}"))
            rows.append(idx)
    d["m_order"] = (np.argsort(np.concatenate(rows)) if rows else
                    np.zeros(0)).astype(np.int64)
    likelihood_groups = []
    for tr in range(3):
        for di in range(2):
            idx = np.flatnonzero((m.transform == tr) & (m.distribution == di))
            if idx.size:
                d[f"llh_{tr}_{di}"] = idx.astype(np.int64)
                likelihood_groups.append((tr, di, f"llh_{tr}_{di}"))
    return observable_rows, likelihood_groups


class TensorCache:
    """Numpy arrays as tensors on a device, floats in a dtype, made once per
    ``(device, dtype)``."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self._found: dict[tuple, dict[str, torch.Tensor]] = {}

    def get(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The arrays on ``like``'s device, floats in its dtype, integers as int64."""
        key = (like.device, like.dtype)
        found = self._found.get(key)
        if found is None:
            found = {}
            for name, value in self.arrays.items():
                value = np.asarray(value)
                dtype = like.dtype if value.dtype.kind == "f" else torch.int64
                found[name] = torch.as_tensor(value, dtype=dtype, device=like.device)
            self._found[key] = found
        return found
