"""SBML events in the simulation plan: triggers as root functions, assignments as state
maps, and which events fire at a time known from the parameters.

Every event ``e`` has a root function ``g_e(t, x, theta, *o)``: its trigger is true where
``g_e > 0`` (strict comparisons) or ``g_e >= 0``, and it fires where the trigger goes from
false to true.  Its assignments map the state just before the event to the state just
after it (all values computed from the state before, so simultaneous assignments do not
see each other).

Where the simulation fires events (both backends, ``backends/*/events.py``):

* **at a period's start**, after the period's condition changes: an event fires if its
  trigger is true there and was not true just before (at the previous period's end, or,
  at the initial time, its ``initialValue``).  This is how a PEtab condition and an
  SBML event at the same time are ordered: the condition first.
* **inside a period, at a time known from the parameters**: a trigger that compares
  time with parameters (``time >= t_dose``) fires at that time ``tau(theta)``.  The period is
  split there as at the right-hand side's jumps (:mod:`.jumps`), and the state carried
  across gets ``h(x + f(tau-) dtau) - f(tau+) dtau`` with ``dtau = tau - stop_gradient(tau)``:
  the event's value, and in derivative the sensitivity jump of an event at a
  parameter-dependent time.
* **inside a period, at a time that depends on the states**: a probe solve without
  gradients (diffrax's ``Event`` with a Newton root finder in JAX, SciPy's
  ``solve_ivp`` events in PyTorch) finds the times ``tau_0`` where triggers rise (at most
  :data:`MAX_STATE_EVENTS` per period).  The differentiable solve is then split there as
  above, with ``dtau = -g(tau_0, x) / stop_gradient(dg/dt)``: a Newton step from the
  probe's root to this solve's (the state carried across is moved by it to first
  order), and in derivative the implicit function theorem's ``dtau/dp`` of the root.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from petab_sciml.expressions import TIME
from petab_sciml.simulation.jumps import flip_time


@dataclass(frozen=True)
class EventPlan:
    id: str
    root: sympy.Expr
    """``g(t, x, theta, *o)``: the trigger is true where ``g > 0`` (``strict``) or
    ``g >= 0``."""
    strict: bool
    targets: tuple[int, ...]
    """State indices the event assigns."""
    values: tuple[sympy.Expr, ...]
    """Their values, in the state just before the event."""
    initial_value: bool
    time: sympy.Expr | None
    """``tau(theta)`` where the trigger compares time with parameters only (rising in
    time), else None."""
    scale: sympy.Expr = sympy.Integer(1)
    """``|lhs| + |rhs|`` of the trigger: just before a time, ``g`` within
    :data:`ROOT_RTOL` of it counts as zero (a trigger reached exactly at a period's end
    to the solver's accuracy has not crossed yet)."""


ROOT_RTOL = 1e-6

MAX_STATE_EVENTS = 8
"""The most state-triggered events one period may fire; a period with more fails
(``ok = False``)."""


def event_plans(model, state_ids: tuple[str, ...], theta_ids: tuple[str, ...],
                fail) -> tuple[EventPlan, ...]:
    """The hybridized ``model``'s events as plans; ``fail(message, entry=...)`` raises
    for an event whose target stopped being a state (a hybridization or condition
    assignment made it a rule)."""
    index = {s: i for i, s in enumerate(state_ids)}
    allowed = {sympy.Symbol(name) for name in theta_ids} | {TIME}
    plans = []
    for event in model.events:
        targets, values = [], []
        for target, value in event.assignments:
            if target not in index:
                fail(f"event {event.id!r} assigns {target!r}, which the problem turned into "
                     "an assignment (hybridization or condition); events can only assign "
                     "states", entry=f"event {event.id!r}")
            targets.append(index[target])
            values.append(model.expand(value))
        g, strict = event.root
        g = model.expand(g)
        tau = flip_time(sympy.GreaterThan(g, 0), allowed, rising=True)
        scale = model.expand(sympy.Abs(event.trigger.lhs) + sympy.Abs(event.trigger.rhs))
        plans.append(EventPlan(event.id, g, strict, tuple(targets), tuple(values),
                               event.initial_value, tau, scale))
    return tuple(plans)
