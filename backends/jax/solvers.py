"""The pieces of one diffrax solve: the solver, the step-size controller, what is saved
and when a solve counts as successful."""

from __future__ import annotations

from typing import Any

from petab_sciml.simulation.plan import SimulationError

from .options import SOLVERS, JaxOptions


def diffrax_solver(name: str, scan_kind: str | None = None) -> Any:
    """The diffrax solver called ``name`` (:data:`~.options.SOLVERS`); ``scan_kind="lax"``
    for solves that are never differentiated by JAX (plain while loops)."""
    import diffrax

    table = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8,
             "kvaerno3": diffrax.Kvaerno3, "kvaerno4": diffrax.Kvaerno4,
             "kvaerno5": diffrax.Kvaerno5}
    cls = table.get(name.lower())
    if cls is None:
        raise SimulationError(f"unknown JAX solver {name!r}; known: {', '.join(SOLVERS)}")
    return cls(scan_kind=scan_kind) if scan_kind else cls()


def step_controller(options: JaxOptions, norm: Any = None) -> Any:
    """The PID step-size controller of ``options``: tolerances, the largest step
    growth (``petab_sciml.simulation.steps.max_step_growth``: 6x for ``dopri8``) and
    the controller's coefficients (``options.pi_coefficients``, else
    ``steps.pi_coefficients`` of the solver and ``options.sensitivity``: the executor
    sets them for its resolved sensitivity);
    ``norm``: the error norm (None: diffrax's RMS norm)."""
    import diffrax

    from petab_sciml.simulation.steps import max_step_growth, pi_coefficients

    factormax = options.factormax
    if factormax is None:
        factormax = max_step_growth(options.solver)
    pcoeff, icoeff = options.pi_coefficients or pi_coefficients(options.solver,
                                                                 options.sensitivity)
    extra = {} if norm is None else {"norm": norm}
    cls = diffrax.PIDController if pcoeff == 0 else _pi_controller_class()
    return cls(rtol=options.rtol, atol=options.atol, factormax=factormax, pcoeff=pcoeff,
               icoeff=icoeff, **extra)


_PI_CONTROLLER: Any = None


def _pi_controller_class() -> Any:
    """diffrax's ``PIDController`` whose proportional term reads the last step's scaled
    error no lower than ``steps.PI_ERROR_FLOOR`` (built on first use: diffrax is
    imported lazily)."""
    global _PI_CONTROLLER
    if _PI_CONTROLLER is None:
        import diffrax
        import jax.numpy as jnp

        from petab_sciml.simulation.steps import PI_ERROR_FLOOR

        class FlooredPIController(diffrax.PIDController):
            def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error,
                                error_order, controller_state):
                prev, prev_prev, at_dtmin = controller_state
                prev = jnp.minimum(prev, 1.0 / PI_ERROR_FLOOR)
                return super().adapt_step_size(t0, t1, y0, y1_candidate, args, y_error,
                                               error_order, (prev, prev_prev, at_dtmin))

        _PI_CONTROLLER = FlooredPIController
    return _PI_CONTROLLER


def save_at(ts: Any) -> Any:
    """Save at the times ``ts`` (``sol.ys[0]``) and at the end (``sol.ys[1][-1]``)."""
    import diffrax

    return diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)])


def succeeded(sol: Any) -> Any:
    """Whether a solve succeeded; a steady-state event ends a solve successfully too."""
    import diffrax

    return (sol.result == diffrax.RESULTS.successful) | \
        (sol.result == diffrax.RESULTS.event_occurred)
