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

from collections.abc import Mapping
from typing import Any

import numpy as np

from petab_sciml.errors import require
from petab_sciml.parameter_vector import ParameterVector, parameter_names
from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.scales import to_scale

__all__ = ["ParameterVector", "parameter_names", "pypesto_objective", "pypesto_problem"]


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
