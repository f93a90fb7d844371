"""The optimization vector ``x`` of a simulation plan: its entries' names, scales and
bounds, and the map between ``x`` and the objective's parameter vector ``w``.

``x`` holds the plan's *estimated* entries (``plan.free_index`` of the
:class:`~petab_sciml.simulation.plan.SimulationPlan`, in that order): first the estimated
mechanistic parameters (parameter-table order) on their ``parameterScale`` (``lin``,
``log``: natural logarithm, ``log10``), then the estimated elements of every network
array (PyTorch layout, C order) on linear scale.  Used by :mod:`petab_sciml.pypesto`;
framework-free (numpy only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.scales import from_scale, to_scale

__all__ = ["ParameterVector", "parameter_names"]

LN10 = float(np.log(10.0))


def parameter_names(plan: SimulationPlan) -> list[str]:
    """Names of the estimated entries of ``w`` (``plan.free_index`` order): mechanistic
    parameter ids, then ``net.layer.array[i, j]`` (no index for a 0-d array)."""
    names = np.empty(plan.n_w, dtype=object)
    names[: plan.n_mech] = plan.mech_ids
    free = plan.free_mask()
    for net in plan.networks:
        for s in net.arrays:
            local = np.flatnonzero(free[s.offset: s.offset + s.size])
            if not local.size:
                continue
            head = f"{net.id}.{s.key}"
            if not s.shape:
                names[s.offset] = head
                continue
            index = np.unravel_index(local, s.shape)
            for k, flat in enumerate(local):
                names[s.offset + flat] = \
                    f"{head}[{', '.join(str(int(i[k])) for i in index)}]"
    return [str(n) for n in names[plan.free_index]]


class ParameterVector:
    """The optimization vector ``x`` of a plan and its map to the objective's ``w``.

    ``x[j]`` is ``w[plan.free_index[j]]`` on its scale (:attr:`scales`); entries of
    ``w`` that are not estimated keep their nominal values (``plan.w0``).
    """

    def __init__(self, plan: SimulationPlan):
        self.plan = plan
        self.index = np.asarray(plan.free_index, np.int64)
        mech_scale = plan.mech_scale or ("lin",) * plan.n_mech
        self.scales: tuple[str, ...] = tuple(
            mech_scale[i] if i < plan.n_mech else "lin" for i in self.index.tolist())
        scaled = [j for j, s in enumerate(self.scales) if s != "lin"]
        self._scaled = np.array(scaled, np.int64)
        self._scaled_names = tuple(self.scales[j] for j in scaled)
        self._names: list[str] | None = None

    @property
    def size(self) -> int:
        return int(self.index.size)

    @property
    def names(self) -> list[str]:
        """:func:`parameter_names` of the plan (computed once)."""
        if self._names is None:
            self._names = parameter_names(self.plan)
        return self._names

    def to_w(self, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """The full linear parameter vector ``w`` of ``x``."""
        x = np.asarray(x, np.float64).reshape(-1)
        if x.size != self.size:
            raise ValueError(f"x has {x.size} entries; the problem estimates {self.size}")
        values = x.copy()
        values[self._scaled] = from_scale(x[self._scaled], self._scaled_names)
        w = self.plan.w0.astype(np.float64).copy()
        w[self.index] = values
        return w

    def from_w(self, w: np.ndarray) -> np.ndarray:
        """``x`` of a full linear parameter vector ``w``."""
        x = np.asarray(w, np.float64)[self.index].copy()
        x[self._scaled] = to_scale(x[self._scaled], self._scaled_names)
        return x

    def gradient(self, w: np.ndarray, grad_free: np.ndarray) -> np.ndarray:
        """The gradient with respect to ``x`` of a gradient with respect to ``w[index]``
        (chain rule: ``dw/dx`` is ``w`` on ``log`` scale, ``w ln 10`` on ``log10``)."""
        g = np.asarray(grad_free, np.float64).copy()
        if self._scaled.size:
            values = np.asarray(w, np.float64)[self.index[self._scaled]]
            factor = np.where(np.array(self._scaled_names) == "log", 1.0, LN10)
            g[self._scaled] *= values * factor
        return g

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of ``x`` (on each entry's scale; may be infinite)."""
        lower = np.asarray(self.plan.w_lower, np.float64)[self.index].copy()
        upper = np.asarray(self.plan.w_upper, np.float64)[self.index].copy()
        lower[self._scaled] = to_scale(lower[self._scaled], self._scaled_names)
        upper[self._scaled] = to_scale(upper[self._scaled], self._scaled_names)
        return lower, upper

    def parameters(self, x: Sequence[float] | np.ndarray) -> dict[str, Any]:
        """``x`` as ``{"mech": linear values, "nets": {net: {layer: {array: ndarray}}}}``,
        the form :meth:`Problem.objective` and :meth:`Problem.save` take."""
        return self.plan.unpack(self.to_w(x))
