"""Every formula of a plan compiled once for one backend (straight-line code from
:func:`petab_sciml.expressions.compile_expressions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from petab_sciml.expressions import compile_expressions
from petab_sciml.simulation.jumps import jump_time_exprs
from petab_sciml.simulation.plan import SimulationPlan
from petab_sciml.simulation.term_sums import MIN_STATES, compile_term_sum


@dataclass
class CompiledFormulas:
    rhs: Any
    """``rhs(t, x, theta, *o) -> dx/dt``."""
    x0: Any
    """``x0(t0, theta, *o) -> x(t0)``."""
    changes: Any
    """``changes(t, x, theta, *o) -> value of every condition change``."""
    net_inputs: list[Any]
    """Per network (plan order): ``f(t, x, theta, *o) -> element inputs`` or None."""
    observables: list[Any]
    """Per observable: ``f(t, x, theta, *o, obs_pars) -> (value,)``."""
    jumps: Any
    """``jumps(t, theta, *o) -> times`` at which the right-hand side jumps
    (:mod:`petab_sciml.simulation.jumps`) or an event at a parameter-dependent time
    fires (:mod:`petab_sciml.simulation.events`), or None when there are none."""
    noise: list[Any]
    """Per observable: ``f(t, x, theta, *o, observable_pars, noise_pars) -> (sigma,)``.

    Each observable is evaluated on its own measurements only, so a formula never sees
    another observable's placeholders (or their NaN padding) and contributes no NaN
    gradients there."""
    jump_events: tuple[int, ...] = ()
    """Per entry of ``jumps``' result: the event that fires there, or -1 (a jump of the
    right-hand side only)."""
    triggers: Any = None
    """``triggers(t, x, theta, *o) -> g`` of every event (None: no events)."""
    trigger_scales: Any = None
    """``trigger_scales(t, x, theta, *o)``: every event's ``|lhs| + |rhs|``."""
    event_values: tuple[Any, ...] = ()
    """Per event: ``f(t, x, theta, *o) -> values`` of its targets."""


def compile_plan(plan: SimulationPlan, backend: str, *, term_sums: bool | None = None
                 ) -> CompiledFormulas:
    """Every formula of ``plan`` compiled for ``backend``.  ``term_sums``: the
    right-hand side as a sum of terms (:mod:`.term_sums`); None: for models of
    :data:`~.term_sums.MIN_STATES` states and more."""
    groups = plan.groups()
    no_x = plan.groups(with_states=False)
    op = [f"__op{k}" for k in range(plan.n_obs_par)]
    np_ = [f"__np{k}" for k in range(plan.n_noise_par)]

    def comp(exprs, args, name):
        # the executors pass arrays of one batch shape: no explicit broadcasting
        return compile_expressions(list(exprs), args, backend=backend, name=name,
                                   broadcast=False)

    jumps = jump_time_exprs([*plan.rhs_exprs, *(e for n in plan.networks if n.in_rhs
                                                 for e in n.input_exprs)], plan.theta_ids)
    timed = [(k, e.time) for k, e in enumerate(plan.events) if e.time is not None]
    jump_events = (-1,) * len(jumps) + tuple(k for k, _ in timed)
    jumps = (*jumps, *(tau for _, tau in timed))
    events = plan.events
    if term_sums is None:
        term_sums = len(plan.state_ids) >= MIN_STATES
    return CompiledFormulas(
        rhs=(compile_term_sum(plan.rhs_exprs, groups, backend=backend, name="rhs")
             if term_sums and plan.rhs_exprs else comp(plan.rhs_exprs, groups, "rhs")),
        x0=comp(plan.x0_exprs, no_x, "initial"),
        changes=comp(plan.change_exprs, groups, "changes"),
        net_inputs=[comp(n.input_exprs, groups, f"inputs_{n.id}") if n.input_exprs else None
                    for n in plan.networks],
        observables=[comp([e], [*groups, op], f"observable_{i}")
                     for i, e in enumerate(plan.obs_exprs)],
        noise=[comp([e], [*groups, op, np_], f"noise_{i}") for i, e in enumerate(plan.noise_exprs)],
        jumps=comp(jumps, no_x, "jumps") if jumps else None,
        jump_events=jump_events,
        triggers=comp([e.root for e in events], groups, "triggers") if events else None,
        trigger_scales=(comp([e.scale for e in events], groups, "trigger_scales")
                        if events else None),
        event_values=tuple(comp(e.values, groups, f"event_{k}") if e.values else None
                           for k, e in enumerate(events)),
    )
