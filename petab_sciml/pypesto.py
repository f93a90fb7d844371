"""pyPESTO on a PEtab SciML problem: objective, gradient, parameter names, bounds, starts.

Needs the ``pypesto`` extra (``pip install 'petab-sciml-toolkit[pypesto]'``); pyPESTO is
imported only when a function here is called, so ``validate`` and ``info`` never need it.

The optimization vector ``x`` is the vector of the problem's *estimated* entries
(``plan.free_index`` of the :class:`~petab_sciml.simulation.plan.SimulationPlan`, in that
order): first the estimated mechanistic parameters (parameter-table order) on their
``parameterScale`` (``lin``, ``log``: natural logarithm, ``log10``), then the estimated
elements of every network array (PyTorch layout, C order) on linear scale.  Their names
are the parameter ids and ``net.layer.array[i, j]`` (e.g. ``net1.layer1.weight[0, 1]``).

::

    from petab_sciml import load_problem
    from petab_sciml.pypesto import pypesto_problem
    import pypesto.optimize

    problem = load_problem("problem.yaml", backend="jax")
    pp = pypesto_problem(problem, seed=0)
    result = pypesto.optimize.minimize(pp, pypesto.optimize.FidesOptimizer(), n_starts=5)
    problem.save(pp.objective.parameters(result.optimize_result[0].x), "best/")

See ``docs/training.md`` (section "pyPESTO").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.errors import require
from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.scales import from_scale, to_scale

__all__ = ["ParameterVector", "parameter_names", "pypesto_objective", "pypesto_problem"]

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


def _plan(problem: Any) -> SimulationPlan:
    from petab_sciml.simulation.objective import simulator_for

    plan = getattr(problem, "plan", None)
    if plan is None:
        plan = simulator_for(problem).plan
    return plan


def pypesto_objective(problem: Any, backend: str | None = None, **options: Any) -> Any:
    """A ``pypesto.objective.ObjectiveBase`` of a loaded problem
    (:func:`petab_sciml.load_problem`): the negative log-posterior (negative
    log-likelihood without priors) and its gradient over the optimization vector ``x``
    (module docstring), with ``x_names``.

    ``backend`` (default: the problem's) and ``options`` (solver options, see
    :class:`~petab_sciml.simulation.Simulator`) choose the simulator.  The objective
    pickles (for pyPESTO's multi-process engines: a worker compiles the plan again) and
    deep-copies cheaply (copies share the compiled simulator).  ``objective.vector`` is
    the :class:`ParameterVector`; ``objective.parameters(x)`` gives the values to save.
    """
    require("pypesto", "pypesto")
    from petab_sciml._pypesto_impl import PetabScimlObjective

    backend = backend or problem.backend_name
    return PetabScimlObjective(_plan(problem), backend, options,
                               simulator=problem.simulator(backend, **options))


def pypesto_problem(problem: Any, backend: str | None = None, *, seed: int = 0,
                    start_bounds: Mapping[str, tuple[float, float]] | None = None,
                    check_starts: bool = True, **options: Any) -> Any:
    """A ``pypesto.Problem`` of a loaded problem: :func:`pypesto_objective`, the bounds
    of ``x`` (``parameterScale`` for mechanistic parameters; network elements may be
    unbounded), ``x_names``, ``x_scales`` and a seeded start-point method.

    Start points come from :mod:`petab_sciml.startpoints` (mechanistic parameters from
    their prior or uniformly within their bounds on their scale, network arrays from
    their layer's default PyTorch initialiser in ``backend``): the ``k``-th point the
    method draws is start ``k`` of ``seed``.  ``start_bounds`` (``{parameter id: (lower,
    upper)}``, linear values within the parameter's bounds) narrows where mechanistic
    parameters are drawn: it sets pyPESTO's initialization bounds ``lb_init``/``ub_init``
    (which the method follows), not the bounds of the optimization.  With
    ``check_starts``, a start whose value or gradient is not finite is replaced by the
    next draw, and pyPESTO orders the starts by their objective value.
    """
    pypesto = require("pypesto", "pypesto")
    from petab_sciml._pypesto_impl import PetabScimlStartpoints

    objective = pypesto_objective(problem, backend, **options)
    vector = objective.vector
    lower, upper = vector.bounds()
    lower_init, upper_init = lower.copy(), upper.copy()
    position = {vector.names[j]: j for j in range(vector.size)
                if vector.index[j] < vector.plan.n_mech}
    for pid, (lo, hi) in (start_bounds or {}).items():
        if pid not in position:
            raise ValueError(f"start_bounds: {pid!r} is not an estimated mechanistic "
                             f"parameter (those are: {', '.join(position) or 'none'})")
        j = position[pid]
        lo_x, hi_x = to_scale(np.array([lo, hi], np.float64), (vector.scales[j],) * 2)
        if not (lower[j] <= lo_x <= hi_x <= upper[j]):
            i = int(vector.index[j])
            raise ValueError(f"start_bounds: {pid!r} range [{lo:g}, {hi:g}] is not an "
                             f"interval within its bounds [{vector.plan.w_lower[i]:g}, "
                             f"{vector.plan.w_upper[i]:g}]")
        lower_init[j], upper_init[j] = lo_x, hi_x
    startpoints = PetabScimlStartpoints(vector, seed=seed, backend=objective.backend,
                                        check=check_starts)
    return pypesto.Problem(objective, lower, upper, lb_init=lower_init, ub_init=upper_init,
                           x_names=vector.names, x_scales=list(vector.scales),
                           copy_objective=False, startpoint_method=startpoints)
