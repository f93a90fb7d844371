"""The core data layout (:mod:`petab_sciml.simulation.layout`) as the named numpy
arrays the jitted objective takes.

Everything the objective reads besides the parameters (initial-condition groups,
experiments batched by their number of periods, measurements, noise models, priors,
condition changes) is an argument of the jitted function, so new data values never
retrace.  This module only names the core's arrays; it builds none of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from petab_sciml.simulation.layout import DataLayout
from petab_sciml.simulation.plan import SimulationPlan

Batch = tuple[int, list[int], int]
"""``(P, experiments, N)``: experiments with ``P`` periods each, solved together, with
at most ``N`` measurement times per period."""


@dataclass
class NamedArrays:
    """The arrays of :func:`named_arrays` and how to read them."""

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


def named_arrays(plan: SimulationPlan, layout: DataLayout, *, steady_state: bool,
                 forward_ad: bool) -> NamedArrays:
    """``layout`` (of ``plan``) by name; ``steady_state``: include which points are read
    at the end of a period run to steady state (``b{b}_tinf``); ``forward_ad``: include
    the free parameters' indices (``free``)."""
    out = NamedArrays()
    d = out.arrays
    d["g_t0"] = layout.group_t0
    d["g_th_tgt"], d["g_th_src"] = layout.group_theta_target, layout.group_theta_source
    d.update({f"arr_{j}_{arg}": data for j, arg, data in layout.array_inputs})
    for b, batch in enumerate(layout.batches):
        d.update({f"b{b}_start": batch.start, f"b{b}_end": batch.end,
                  f"b{b}_ts": batch.save_times, f"b{b}_th_tgt": batch.theta_target,
                  f"b{b}_th_src": batch.theta_source, f"b{b}_st_tgt": batch.state_target,
                  f"b{b}_st_src": batch.state_source, f"b{b}_group": batch.group})
        if steady_state:
            d[f"b{b}_tinf"] = batch.at_steady_state
        out.batches.append((batch.n_periods, batch.experiments.tolist(), batch.n_times))
    d.update({"m_x": layout.measurement_point_batched,
              "m_th": layout.measurement_period_batched, "m_group": layout.measurement_group,
              "m_time": layout.measurement_time, "m_value": layout.measurement_value,
              "m_opt": layout.obs_par_theta, "m_opv": layout.obs_par_value,
              "m_npt": layout.noise_par_theta, "m_npv": layout.noise_par_value})
    for i, rows in layout.observable_rows:
        d[f"obs_{i}"] = rows
        out.obs_rows.append((i, f"obs_{i}"))
    d["m_order"] = layout.table_order
    for tr, di, rows in layout.likelihood_groups:
        d[f"llh_{tr}_{di}"] = rows
        out.llh_groups.append((tr, di, f"llh_{tr}_{di}"))
    d.update({f"prior_{i}": idx for i, idx in enumerate(layout.prior_index)})
    if forward_ad:
        d["free"] = plan.free_index
    d["mech_theta"] = plan.mech_theta_index
    d.update({"chg_const": layout.change_constant, "chg_formula": layout.change_is_formula,
              "chg_pos": layout.change_formula_index})
    return out
