"""Hybrid simulation of PEtab SciML problems: objective, gradient and simulations.

``build_plan(problem.data)`` turns a problem's data into a plain-data plan (once, at load);
``Simulator(plan, backend="jax"|"torch", **options)`` compiles it for a backend.  Most
users go through the loaded problem::

    problem = load_problem("problem.yaml", backend="jax")
    p = problem.parameters()              # {"mech": ..., "nets": {...}}
    value, grad = problem.value_and_grad(p)

See ``docs/simulation.md``.
"""

from __future__ import annotations

from petab_sciml.simulation.builder import build_plan
from petab_sciml.simulation.objective import Evaluation, Simulator, simulator_for
from petab_sciml.simulation.plan import SimulationError, SimulationPlan

__all__ = ["Evaluation", "SimulationError", "SimulationPlan", "Simulator", "build_plan",
           "simulator_for"]
