"""The solve of one period, differentiated by JAX through diffrax.

``solve(x0, theta, outs, arrays, t0, t1, ts) -> (x(ts), x(t1), ok)`` for the sensitivity
modes that differentiate the solver itself: ``"reverse"`` (``RecursiveCheckpointAdjoint``),
``"adjoint"`` (``BacksolveAdjoint``) and ``"forward-ad"`` (``ForwardMode``).
``"forward"`` has its own solve (:mod:`.forward_sensitivities`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .options import JaxOptions
from .solvers import diffrax_solver, save_at, step_controller, succeeded
from .stage_sums import diffeqsolve
from .steady_state import steady_state_event
from .terms import VectorField

PeriodSolve = Callable[..., tuple[Any, Any, Any]]
"""``solve(x0, theta, outs, arrays, t0, t1, ts) -> (x(ts), x(t1), ok)``."""


def period_solver(field: VectorField, nets: Any, options: JaxOptions, *, sensitivity: str,
                  checkpoints: int | None, steady_state: bool) -> PeriodSolve:
    """The solve of one period of the ODE ``field`` with the networks' arrays ``nets``;
    ``sensitivity``: ``"reverse"``, ``"adjoint"`` or ``"forward-ad"``; ``checkpoints``:
    reverse mode's; ``steady_state``: some period of the plan runs to steady state (the
    solves then carry the steady-state event)."""
    import diffrax
    import jax.numpy as jnp

    solver = diffrax_solver(options.solver)
    controller = step_controller(options)
    if sensitivity == "forward-ad":
        adjoint = diffrax.ForwardMode()
    elif sensitivity == "adjoint":
        adjoint = diffrax.BacksolveAdjoint(solver=diffrax_solver(options.solver),
                                           stepsize_controller=controller)
    else:
        adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    term = diffrax.ODETerm(lambda t, x, a: field(t, x, *a))

    def solve(x0, theta, outs, arrays, t0, t1, ts):
        args = (theta, outs, arrays, nets)
        if sensitivity == "adjoint":
            # BacksolveAdjoint takes no SaveAt(subs=...): the end state is the
            # last saved time (t1 finite: steady states are refused with it)
            sol = diffeqsolve(
                term, solver, t0, t1, None, x0, args,
                saveat=diffrax.SaveAt(ts=jnp.concatenate([ts, t1[None]])),
                stepsize_controller=controller, max_steps=options.max_steps,
                adjoint=adjoint, throw=False)
            return sol.ys[:-1], sol.ys[-1], succeeded(sol)
        event = None
        if steady_state:
            event = steady_state_event(lambda t, x, a: [(field(t, x, *a), x)], t1, ts,
                                       options)
        sol = diffeqsolve(
            term, solver, t0, t1, None, x0, args,
            saveat=save_at(ts), stepsize_controller=controller,
            max_steps=options.max_steps, adjoint=adjoint, throw=False, event=event)
        return sol.ys[0], sol.ys[1][-1], succeeded(sol)

    return solve
