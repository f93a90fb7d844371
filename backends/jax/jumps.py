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
    ``field`` and ``nets``: the right-hand side the correction evaluates."""
    import jax
    import jax.numpy as jnp

    def split(x0, theta, outs, arrays, t0, t1, ts):
        taus = jnp.sort(jumps(t0, theta, *outs))
        bounds = jnp.clip(jax.lax.stop_gradient(taus), t0, t1)
        inside = (taus > t0) & (taus < t1)
        x, start, y, oks = x0, t0, None, []
        for j in range(taus.shape[0] + 1):
            last = j == taus.shape[0]
            end = t1 if last else jnp.maximum(start, jnp.nextafter(bounds[j], -jnp.inf))
            ys, x_end, ok = solve(x, theta, outs, arrays, start, end,
                                  jnp.clip(ts, start, end))
            y = ys if y is None else jnp.where((ts >= start)[:, None], ys, y)
            oks.append(ok)
            if last:
                return y, x_end, jnp.all(jnp.stack(oks))
            before = field(end, x_end, theta, outs, arrays, nets)
            after = field(bounds[j], x_end, theta, outs, arrays, nets)
            shift = taus[j] - jax.lax.stop_gradient(taus[j])
            x = x_end + jnp.where(inside[j], (before - after) * shift, 0.0)
            start = bounds[j]
        raise AssertionError("unreachable")  # pragma: no cover

    return split
