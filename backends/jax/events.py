"""SBML events in the JAX backend (:mod:`petab_sciml.simulation.events`): firing at a
period's start, the state map at an event, and the probe that finds where state-triggered
events fire inside a period (``jumps.py`` splits the differentiable solve there)."""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml.simulation.events import MAX_STATE_EVENTS, ROOT_RTOL


class Events:
    """The compiled events of a plan (``fns``: its
    :class:`~petab_sciml.simulation.compiled.CompiledFormulas`)."""

    def __init__(self, plan: Any, fns: Any):
        self.fns = fns
        self.strict = np.array([e.strict for e in plan.events], bool)
        self.initial = np.array([e.initial_value for e in plan.events], bool)
        self.targets = [np.array(e.targets, np.int32) for e in plan.events]
        self.state_triggered = np.array([e.time is None for e in plan.events], bool)

    def status(self, t, x, theta, outs, *, left: bool = False):
        """Whether each trigger is true at ``(t, x)``; ``left``: just before ``t``
        (a root function within :data:`ROOT_RTOL` of zero there counts as not yet true)."""
        import jax.numpy as jnp

        g = self.fns.triggers(t, x, theta, *outs)
        if left:
            return g > ROOT_RTOL * self.fns.trigger_scales(t, x, theta, *outs)
        return jnp.where(self.strict, g > 0, g >= 0)

    def apply(self, k: int, t, x, theta, outs):
        """The state after event ``k`` fires at ``t`` in state ``x``."""
        values = self.fns.event_values[k]
        if values is None:
            return x
        return x.at[self.targets[k]].set(values(t, x, theta, *outs))

    def fire_at_start(self, t, x, theta, outs, before):
        """``x`` after every event whose trigger is true at ``t`` and was not
        (``before``, a bool per event) fires, in execution order."""
        import jax.numpy as jnp

        now = self.status(t, x, theta, outs)
        for k in range(len(self.targets)):
            fire = now[k] & ~before[k]
            x = jnp.where(fire, self.apply(k, t, x, theta, outs), x)
        return x


def event_probe(events: Events, field: Any, nets: Any, options: Any) -> Any:
    """``probe(x0, theta, outs, arrays, t0, t1, ts) -> (taus, ks, ok)``: the times
    ``taus`` (:data:`MAX_STATE_EVENTS`, padded with ``inf``) at which state-triggered
    events ``ks`` fire inside ``(t0, t1)``, found by a solve with diffrax's ``Event``
    that applies every event it meets; not to be differentiated (the caller stops the
    gradient of its inputs).  ``ok``: every solve succeeded and no more events fired
    than the arrays hold.

    The solve stops where one scalar rises through zero, found by bisection: the
    largest of the armed triggers' ``g`` (false ones, which fire when ``g`` rises
    through 0), of the disarmed triggers' ``-g - tol`` (true ones, re-armed when ``g``
    falls below ``-tol``, ``tol`` = :data:`ROOT_RTOL` of the trigger's scale), and of
    ``+1`` once a steady-state period has settled (``-1`` before)."""
    return EventProbe(events, field, nets, options)


class EventProbe:
    """The probe of :func:`event_probe`: calling it probes one period."""

    def __init__(self, events: Events, field: Any, nets: Any, options: Any) -> None:
        import diffrax
        import jax.numpy as jnp
        import optimistix as optx

        from .solvers import diffrax_solver, step_controller

        self.events, self.field, self.nets, self.options = events, field, nets, options
        self.n = len(events.targets)
        self.state_triggered = jnp.asarray(events.state_triggered)
        self.solver = diffrax_solver(options.solver, scan_kind="lax")
        self.controller = step_controller(options)
        self.term = diffrax.ODETerm(lambda t, x, a: field(t, x, *a[:4]))
        self.iterations = (2 * (MAX_STATE_EVENTS + int((~events.state_triggered).sum()))
                           + 2)
        self.root_finder = optx.Bisection(rtol=1e-12, atol=1e-12)

    def parts(self, t, y, theta, outs, status, tol):
        """Per trigger: ``g`` where armed, ``-g - tol`` where disarmed (rises through
        zero at the trigger's next change)."""
        import jax.numpy as jnp

        g = self.events.fns.triggers(t, y, theta, *outs)
        return jnp.concatenate([jnp.where(status, -jnp.inf, g),
                                jnp.where(status, -g - tol, -jnp.inf)])

    def __call__(self, x0, theta, outs, arrays, t0, t1, ts):
        import diffrax
        import jax
        import jax.numpy as jnp

        from .steady_state import steady_state_event

        field = self.field
        settled = steady_state_event(lambda t, x, a: [(field(t, x, *a[:4]), x)], t1, ts,
                                     self.options).cond_fn

        def cond(t, y, args, **kwargs):
            status, tol, start = args[4], args[5], args[6]
            change = jnp.max(self.parts(t, y, theta, outs, status, tol))
            # settled counts after the first step (a solve that starts settled, after an
            # event, then stops at once instead of never seeing the sign change)
            done = settled(t, y, args, **kwargs) & (t > start)
            return jnp.maximum(change, jnp.where(done, 1.0, -1.0))

        event = diffrax.Event(cond, root_finder=self.root_finder)

        def loop_cond(carry):
            *_, i, ok, done = carry
            return ~done & ok & (i < self.iterations)

        status = self.events.status(t0, x0, theta, outs)
        init = (t0, x0, status, jnp.full((MAX_STATE_EVENTS,), jnp.inf, x0.dtype),
                jnp.full((MAX_STATE_EVENTS,), -1, jnp.int32), jnp.asarray(0),
                jnp.asarray(0), jnp.asarray(True), jnp.asarray(False))
        out = jax.lax.while_loop(
            loop_cond, lambda carry: self.segment(carry, theta, outs, arrays, t1, event),
            init)
        taus, ks, ok, done = out[3], out[4], out[7], out[8]
        return taus, ks, ok & done

    def segment(self, carry, theta, outs, arrays, t1, event):
        """The solve from the carry's time to the next event (or ``t1``), the event
        applied and recorded: the probe's loop body."""
        import diffrax
        import jax.numpy as jnp

        from .solvers import succeeded

        events, n = self.events, self.n
        t, x, status, taus, ks, count, i, ok, _ = carry
        tol = ROOT_RTOL * events.fns.trigger_scales(t, x, theta, *outs)
        sol = diffrax.diffeqsolve(self.term, self.solver, t, t1, None, x,
                                  (theta, outs, arrays, self.nets, status, tol, t),
                                  saveat=diffrax.SaveAt(t1=True),
                                  stepsize_controller=self.controller,
                                  max_steps=self.options.max_steps, event=event, throw=False)
        t_e, x_e = sol.ts[-1], sol.ys[-1]
        values = self.parts(t_e, x_e, theta, outs, status, tol)
        which = jnp.argmax(values).astype(jnp.int32)
        # a trigger at its root (a settled steady state stops the solve with every
        # part clearly below zero)
        near = values[which] >= -jnp.concatenate([tol, tol])[which]
        changed = (sol.result == diffrax.RESULTS.event_occurred) & (t_e < t1) & near
        k = which % n
        fired = changed & (which < n)
        x_new = x_e
        for j in range(n):
            x_new = jnp.where(fired & (k == j), events.apply(j, t_e, x_e, theta, outs),
                              x_new)
        record = fired & self.state_triggered[k]
        slot = jnp.arange(MAX_STATE_EVENTS) == count
        taus = jnp.where(record & slot, t_e, taus)
        ks = jnp.where(record & slot, k, ks)
        count = count + record.astype(count.dtype)
        # a fired trigger is true; a re-armed one false; the rest as they are
        status = jnp.where(changed & (jnp.arange(n) == k), fired, status)
        # a settled steady state is a jump of the stopping scalar: bisection ends
        # there without meeting its tolerance on the value
        steady_stop = ~changed & (sol.result == diffrax.RESULTS.nonlinear_max_steps_reached)
        ok = ok & (succeeded(sol) | steady_stop) & (count <= MAX_STATE_EVENTS)
        settled_now = ~changed | (t_e >= t1)
        return (jnp.where(changed, t_e, t1), x_new, status, taus, ks, count, i + 1, ok,
                settled_now)
