"""The core data layout (:mod:`petab_sciml.simulation.layout`) as the named numpy arrays
the PyTorch executor reads (:func:`named_layout`), and those arrays as tensors per device
and dtype (:class:`TensorCache`).  This module only names the core's arrays (periods
solved one at a time, measurements, likelihood groups, priors) and adds the plan's
constants; it builds no index array of its own."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from petab_sciml.simulation.layout import DataLayout
from petab_sciml.simulation.plan import SimulationPlan


@dataclass(frozen=True)
class PeriodLayout:
    """One period of one experiment (the core's
    :class:`~petab_sciml.simulation.layout.PeriodArrays`); its arrays are ``{key}_ts``
    (output times padded with the end), ``{key}_grid`` / ``{key}_where`` (the sorted
    distinct times from start to end and each output's place in them), ``{key}_th_t`` /
    ``{key}_th_s`` and ``{key}_st_t`` / ``{key}_st_s`` (constants and states changed at
    its start: targets and sources in the condition changes' values)."""

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
class TorchLayout:
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


def named_layout(plan: SimulationPlan, layout: DataLayout) -> TorchLayout:
    """``layout`` (of ``plan``) by name, with the plan's constants (see
    :class:`TorchLayout`); the arrays are the core's, not copies."""
    d: dict[str, np.ndarray] = {"theta0": plan.theta0.astype(np.float64),
                                "mech_theta": plan.mech_theta_index.astype(np.int64),
                                "free": plan.free_index.astype(np.int64)}
    d.update({f"arr_{j}_{arg}": data for j, arg, data in layout.array_inputs})
    for g, count in enumerate(layout.group_theta_count.tolist()):
        d[f"g{g}_tgt"] = layout.group_theta_target[g, :count]
        d[f"g{g}_src"] = layout.group_theta_source[g, :count]
    periods = []
    for e, experiment in enumerate(layout.periods):
        per = []
        for k, p in enumerate(experiment):
            key = f"e{e}p{k}"
            d.update({f"{key}_ts": p.save_times, f"{key}_grid": p.grid,
                      f"{key}_where": p.grid_index, f"{key}_th_t": p.theta_target,
                      f"{key}_th_s": p.theta_source, f"{key}_st_t": p.state_target,
                      f"{key}_st_s": p.state_source})
            per.append(PeriodLayout(key, p.start, p.end, p.n_times, p.steady_state,
                                    p.n_inf))
        periods.append(per)
    d.update({"m_x": layout.measurement_point, "m_th": layout.measurement_period,
              "m_group": layout.measurement_group, "m_time": layout.measurement_time,
              "m_value": layout.measurement_value, "m_opt": layout.obs_par_theta,
              "m_opv": layout.obs_par_value, "m_npt": layout.noise_par_theta,
              "m_npv": layout.noise_par_value})
    d.update({f"obs_{i}": rows for i, rows in layout.observable_rows})
    d["m_order"] = layout.table_order
    d.update({f"llh_{tr}_{di}": rows for tr, di, rows in layout.likelihood_groups})
    d.update({f"prior_{i}": idx for i, idx in enumerate(layout.prior_index)})
    return TorchLayout(
        d, periods, [(j, arg) for j, arg, _ in layout.array_inputs],
        [(i, f"obs_{i}") for i, _ in layout.observable_rows],
        [(tr, di, f"llh_{tr}_{di}") for tr, di, _ in layout.likelihood_groups])


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
