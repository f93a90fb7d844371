"""The pyPESTO classes behind :mod:`petab_sciml.pypesto` (imported only from there, once
pyPESTO is known to be installed)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from pypesto.C import FVAL, GRAD, MODE_FUN
from pypesto.objective import ObjectiveBase
from pypesto.startpoint import CheckedStartpoints

from petab_sciml.parameter_vector import ParameterVector
from petab_sciml.simulation.plan import SimulationPlan

_SHARED = ("plan", "vector", "_simulator")
"""Attributes a deep copy shares: immutable data and the compiled simulator."""


class PetabScimlObjective(ObjectiveBase):
    """Negative log-posterior of a PEtab SciML problem and its gradient over the
    optimization vector ``x`` (:class:`~petab_sciml.parameter_vector.ParameterVector`).

    Evaluations that fail (the ODE solver gives up) return the simulator's non-finite
    value, which pyPESTO's optimizers treat as a rejected step.
    """

    def __init__(self, plan: SimulationPlan, backend: str, options: dict[str, Any],
                 simulator: Any = None):
        self.plan = plan
        self.backend = backend
        self.options = dict(options)
        self.vector = ParameterVector(plan)
        self._simulator = simulator
        super().__init__(x_names=self.vector.names)

    @property
    def simulator(self) -> Any:
        """The :class:`~petab_sciml.simulation.Simulator` (compiled on first use after
        unpickling)."""
        if self._simulator is None:
            from petab_sciml.simulation import Simulator

            self._simulator = Simulator(self.plan, self.backend, **self.options)
        return self._simulator

    def parameters(self, x: np.ndarray) -> dict[str, Any]:
        """``x`` as ``{"mech": ..., "nets": ...}`` (for ``Problem.save``/``objective``)."""
        return self.vector.parameters(x)

    # ------------------------------------------------------------------ pyPESTO API
    def check_mode(self, mode: Any) -> bool:
        return mode == MODE_FUN

    def check_sensi_orders(self, sensi_orders: tuple[int, ...], mode: Any) -> bool:
        return mode == MODE_FUN and all(o in (0, 1) for o in sensi_orders)

    def call_unprocessed(self, x: np.ndarray, sensi_orders: tuple[int, ...], mode: Any,
                         return_dict: bool, **kwargs: Any) -> dict[str, Any]:
        w = self.vector.to_w(x)
        grad = 1 in sensi_orders
        ev = self.simulator.evaluate(w, grad=grad)
        out: dict[str, Any] = {FVAL: ev.value}
        if grad:
            out[GRAD] = self.vector.gradient(w, ev.grad_flat)
        return out

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "problem": str(self.plan.source),
                "backend": self.backend, "options": dict(self.options)}

    # ------------------------------------------------------------------ copies
    def __deepcopy__(self, memo: dict) -> PetabScimlObjective:
        new = self.__class__.__new__(self.__class__)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key in _SHARED else copy.deepcopy(value, memo)
        return new

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_simulator"] = None     # compiled code does not pickle; rebuilt on use
        return state


class PetabScimlStartpoints(CheckedStartpoints):
    """Seeded start points (:mod:`petab_sciml.startpoints`): the ``k``-th point this
    method draws is start ``k`` of ``seed``, as ``x`` (the pyPESTO problem's free
    entries of it, where parameters were fixed in pyPESTO)."""

    def __init__(self, vector: ParameterVector, *, seed: int, backend: str,
                 check: bool = True):
        super().__init__(use_guesses=True, check_fval=check, check_grad=check)
        self.vector = vector
        self.seed = seed
        self.backend = backend
        self.drawn = 0
        self._free: list[int] | None = None

    def __call__(self, n_starts: int, problem: Any) -> np.ndarray:
        self._free = list(problem.x_free_indices)
        return super().__call__(n_starts, problem)

    def sample(self, n_starts: int, lb: np.ndarray, ub: np.ndarray,
               priors: Any = None) -> np.ndarray:
        """``n_starts`` points; ``lb``/``ub`` are pyPESTO's initialization bounds of the
        free entries (``x`` scale): they narrow the mechanistic parameters' range."""
        from petab_sciml.startpoints import start_points

        vector = self.vector
        free = self._free if self._free is not None else list(range(vector.size))
        lower, upper = vector.bounds()
        lower[free], upper[free] = lb, ub
        ws = start_points(vector.plan, n_starts, seed=self.seed, first=self.drawn,
                          backend=self.backend,
                          mech_bounds=(vector.to_w(lower)[: vector.plan.n_mech],
                                       vector.to_w(upper)[: vector.plan.n_mech]))
        self.drawn += n_starts
        xs = np.stack([vector.from_w(w) for w in ws]) if n_starts \
            else np.zeros((0, vector.size))
        return np.clip(xs[:, free], lb, ub)
