"""Periods split at the times where the right-hand side jumps
(:mod:`petab_sciml.simulation.jumps`).

:func:`with_jumps` wraps a :data:`~.period.PeriodSolve` of any sensitivity mode: per
period, the ``J`` jump times ``tau`` (sorted, clipped to the period) cut it into ``J + 1``
solves, each ending one float below its jump (so that no Runge-Kutta stage evaluates the
right-hand side past it) and the next starting at it.  The solves see the times as
constants; the state carried across a jump inside the period gets
``(f(tau-, x) - f(tau+, x)) * (tau - stop_gradient(tau))``: zero in value, and in
derivative the sensitivity jump ``dx(tau+)/dtau = f(tau-) - f(tau+)`` that ``tau``'s
influence on the solution consists of.  A jump time outside the period gives a solve of
length zero and no correction.

Where an SBML event fires at the jump (an event at a parameter-dependent time,
:mod:`petab_sciml.simulation.events`), the state carried across is
``h(x + f(tau-) dtau) - f(tau+, h) dtau`` with ``dtau = tau - stop_gradient(tau)`` and ``h``
the event's assignments: the event's value, and in derivative the sensitivity jump of an
event at a parameter-dependent time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .period import PeriodSolve
from .terms import VectorField


def with_jumps(solve: PeriodSolve, field: VectorField, nets: Any,
               jumps: Callable[..., Any] | None, events: Any = None,
               probe: Callable[..., Any] | None = None) -> PeriodSolve:
    """``solve`` split at the jump times ``jumps(t0, theta, *outs)`` of every period (None:
    none) and at the state events' times that ``probe`` (:func:`.events.event_probe`)
    finds; ``field`` and ``nets``: the right-hand side the correction evaluates.  The
    pieces are one ``lax.scan`` over the solves: ``solve`` is traced once, however many
    jumps the model has (unrolled, a model with six jump times took minutes to compile
    its gradient); ``events`` (:class:`.events.Events`): the events that fire at some
    jumps."""
    return JumpSplit(solve, field, nets, jumps, events, probe)


class JumpSplit:
    """The period solve of :func:`with_jumps`: calling it solves one period."""

    def __init__(self, solve: PeriodSolve, field: VectorField, nets: Any,
                 jumps: Callable[..., Any] | None, events: Any = None,
                 probe: Callable[..., Any] | None = None) -> None:
        self.solve, self.field, self.nets = solve, field, nets
        self.jumps, self.events, self.probe = jumps, events, probe
        self.jump_events = () if events is None or jumps is None else events.fns.jump_events
        self.fired = sorted({k for k in self.jump_events if k >= 0}
                            | (set(range(len(events.targets))) if probe is not None
                               else set()))

    def state_shift(self, event, bound, x_end, f_minus, theta, outs):
        """``-g / stop_gradient(dg/dt)`` of ``event`` at the probe's root ``bound``: one
        Newton step to the root of this solve's trajectory (the probe's root carries
        its interpolation error), and in derivative the implicit function theorem's
        ``dtau/dp = -(dg/dp) / (dg/dt)``."""
        import jax
        import jax.numpy as jnp

        def g(t, x):
            return jnp.take(self.events.fns.triggers(t, x, theta, *outs), event)

        value, rate = jax.jvp(g, (bound, x_end), (jnp.ones_like(bound), f_minus))
        rate = jax.lax.stop_gradient(rate)
        return -value / jnp.where(rate == 0, 1.0, rate)

    def carry_across(self, jump, event, state, bound, shift, end, x_end, theta, outs,
                     arrays):
        """The state after the jump at ``bound`` (see the module's docstring)."""
        import jax
        import jax.numpy as jnp

        sg, field, nets = jax.lax.stop_gradient, self.field, self.nets
        f_minus = sg(field(end, x_end, theta, outs, arrays, nets))
        if not self.fired:
            step = f_minus - sg(field(bound, x_end, theta, outs, arrays, nets))
            return x_end + jnp.where(jump, step * shift, 0.0)
        if self.probe is not None:
            shift = jnp.where(state & (event >= 0),
                              self.state_shift(jnp.maximum(event, 0), bound, x_end, f_minus,
                                               theta, outs), shift)
        x_minus = x_end + jnp.where(jump, f_minus * shift, 0.0)
        x_plus = x_minus
        for k in self.fired:
            after = self.events.apply(k, bound + shift, x_minus, theta, outs)
            x_plus = jnp.where(jump & (event == k), after, x_plus)
        f_plus = sg(field(bound, x_plus, theta, outs, arrays, nets))
        return x_plus - jnp.where(jump, f_plus * shift, 0.0)

    def jump_times(self, x0, theta, outs, arrays, t0, t1, ts):
        """``(taus, event of each (-1: none), whether found by the probe, ok)``."""
        import jax
        import jax.numpy as jnp

        sg = jax.lax.stop_gradient
        taus, event_of, state, ok = [], [], [], jnp.asarray(True)
        if self.jumps is not None:
            times = self.jumps(t0, theta, *outs)
            taus.append(times)
            event_of.append(jnp.asarray(self.jump_events, jnp.int32) if self.jump_events
                            else jnp.full(times.shape, -1, jnp.int32))
            state.append(jnp.zeros(times.shape, bool))
        if self.probe is not None:
            times, ks, ok = self.probe(sg(x0), sg(theta), sg(outs), sg(arrays), t0, t1, ts)
            taus.append(times)
            event_of.append(ks)
            state.append(jnp.ones(times.shape, bool))
        return (jnp.concatenate(taus), jnp.concatenate(event_of), jnp.concatenate(state),
                ok)

    def __call__(self, x0, theta, outs, arrays, t0, t1, ts):
        import jax
        import jax.numpy as jnp

        sg = jax.lax.stop_gradient
        taus, event_of, state, probed = self.jump_times(x0, theta, outs, arrays, t0, t1, ts)
        order = jnp.argsort(taus, stable=True)
        taus, event_of, state = taus[order], event_of[order], state[order]
        inside = (taus > t0) & (taus < t1)
        ends = jnp.concatenate([jnp.clip(sg(taus), t0, t1), t1[None]])
        is_jump = jnp.arange(ends.shape[0]) < taus.shape[0]
        shifts = jnp.concatenate([jnp.where(inside & ~state, taus - sg(taus), 0.0),
                                  jnp.zeros((1,), taus.dtype)])
        # an event fires only inside the period (at its ends, the periods' starts do)
        events_at = jnp.concatenate([jnp.where(inside, event_of, -1),
                                     jnp.full((1,), -1, jnp.int32)])
        states = jnp.concatenate([state, jnp.zeros((1,), bool)])

        def piece(carry, piece_args):
            x, start, y, ok = carry
            bound, jump, shift, event, by_state = piece_args
            end = jnp.where(jump, jnp.maximum(start, jnp.nextafter(bound, -jnp.inf)), t1)
            ys, x_end, good = self.solve(x, theta, outs, arrays, start, end,
                                         jnp.clip(ts, start, end))
            y = jnp.where((ts >= start)[:, None], ys, y)
            x_next = self.carry_across(jump, event, by_state, bound, shift, end, x_end,
                                       theta, outs, arrays)
            return (x_next, jnp.where(jump, bound, start), y, ok & good), None

        y0 = jnp.zeros((ts.shape[0], x0.shape[0]), x0.dtype)
        (x, _, y, ok), _ = jax.lax.scan(piece, (x0, t0, y0, probed),
                                        (ends, is_jump, shifts, events_at, states))
        return y, x, ok
