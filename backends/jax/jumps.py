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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .period import PeriodSolve
from .terms import VectorField


def with_jumps(solve: PeriodSolve, field: VectorField, nets: Any,
               jumps: Callable[..., Any]) -> PeriodSolve:
    """``solve`` split at the jump times ``jumps(t0, theta, *outs)`` of every period;
    ``field`` and ``nets``: the right-hand side the correction evaluates.  The pieces
    are one ``lax.scan`` over the ``J + 1`` solves: ``solve`` is traced once, however
    many jumps the model has (unrolled, a model with six jump times took minutes to
    compile its gradient)."""
    import jax
    import jax.numpy as jnp

    def split(x0, theta, outs, arrays, t0, t1, ts):
        taus = jnp.sort(jumps(t0, theta, *outs))
        inside = (taus > t0) & (taus < t1)
        ends = jnp.concatenate([jnp.clip(jax.lax.stop_gradient(taus), t0, t1), t1[None]])
        is_jump = jnp.arange(ends.shape[0]) < taus.shape[0]
        shifts = jnp.concatenate([jnp.where(inside, taus - jax.lax.stop_gradient(taus),
                                            0.0), jnp.zeros((1,), taus.dtype)])

        def piece(carry, piece_args):
            x, start, y, ok = carry
            bound, jump, shift = piece_args
            end = jnp.where(jump, jnp.maximum(start, jnp.nextafter(bound, -jnp.inf)), t1)
            ys, x_end, good = solve(x, theta, outs, arrays, start, end,
                                    jnp.clip(ts, start, end))
            y = jnp.where((ts >= start)[:, None], ys, y)
            step = jax.lax.stop_gradient(field(end, x_end, theta, outs, arrays, nets)
                                         - field(bound, x_end, theta, outs, arrays, nets))
            x_next = x_end + jnp.where(jump, step * shift, 0.0)
            return (x_next, jnp.where(jump, bound, start), y, ok & good), None

        y0 = jnp.zeros((ts.shape[0], x0.shape[0]), x0.dtype)
        (x, _, y, ok), _ = jax.lax.scan(piece, (x0, t0, y0, jnp.asarray(True)),
                                        (ends, is_jump, shifts))
        return y, x, ok

    return split
