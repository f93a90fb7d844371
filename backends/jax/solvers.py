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
    """The PID step-size controller of ``options``: tolerances and the largest step
    growth (``petab_sciml.simulation.steps.max_step_growth``: 6x for ``dopri8``);
    ``norm``: the error norm (None: diffrax's RMS norm)."""
    import diffrax

    from petab_sciml.simulation.steps import max_step_growth

    factormax = options.factormax
    if factormax is None:
        factormax = max_step_growth(options.solver)
    extra = {} if norm is None else {"norm": norm}
    return diffrax.PIDController(rtol=options.rtol, atol=options.atol, factormax=factormax,
                                 **extra)


def save_at(ts: Any) -> Any:
    """Save at the times ``ts`` (``sol.ys[0]``) and at the end (``sol.ys[1][-1]``)."""
    import diffrax

    return diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)])


def succeeded(sol: Any) -> Any:
    """Whether a solve succeeded; a steady-state event ends a solve successfully too."""
    import diffrax

    return (sol.result == diffrax.RESULTS.successful) | \
        (sol.result == diffrax.RESULTS.event_occurred)
