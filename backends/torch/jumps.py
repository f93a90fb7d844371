"""Periods split at the times where the right-hand side jumps
(:mod:`petab_sciml.simulation.jumps`), as the JAX backend does (``backends/jax/jumps.py``).

Per period, the ``J`` jump times ``tau`` (sorted, clipped to the period) cut it into
``J + 1`` solves, each ending one float below its jump (no Runge-Kutta stage evaluates
the right-hand side past it) and the next starting at it.  The solves see the times as
constants; the state carried across a jump inside the period gets
``(f(tau-, x) - f(tau+, x)) * (tau - tau.detach())``: zero in value, and in derivative
the sensitivity jump ``dx(tau+)/dtau = f(tau-) - f(tau+)``.  ``f`` is evaluated without
gradient: its derivative is multiplied by the zero shift.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Solve = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""``solve(x0, t0, t1, ts) -> (x at ts, x at t1, ok)`` of one span."""
Field = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``field(t, x) -> dx/dt``."""


def _below(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, -torch.inf))


def split_at_jumps(solve: Solve, field: Field, taus: torch.Tensor, x0: torch.Tensor,
                   t0: torch.Tensor, t1: torch.Tensor, ts: torch.Tensor):
    """``solve`` from ``x0`` at ``t0`` to ``t1`` split at the jump times ``taus``: one experiment
    (``taus`` ``(J,)``, ``t0``/``t1`` scalars, ``ts`` ``(N,)``) or a batch (``taus``
    ``(E, J)``, ``t0``/``t1`` ``(E,)``, ``ts`` ``(E, N)``); ``field(t, x)`` the
    right-hand side with the solve's parameters.  Returns what ``solve`` returns, with
    ``ok`` and-ed over the pieces."""
    batched = ts.dim() == 2
    taus = torch.sort(taus, dim=-1).values
    lo, hi = (t0[:, None], t1[:, None]) if batched else (t0, t1)
    bounds = torch.minimum(torch.maximum(taus.detach(), lo), hi)
    inside = (taus > lo) & (taus < hi)
    x, start, y, ok = x0, t0, None, None
    n_jumps = taus.shape[-1]
    for j in range(n_jumps + 1):
        last = j == n_jumps
        bound = bounds[..., j] if not last else None
        end = t1 if last else torch.maximum(start, _below(bound))
        s_, e_ = (start[:, None], end[:, None]) if batched else (start, end)
        ys, x_end, good = solve(x, start, end, torch.minimum(torch.maximum(ts, s_), e_))
        y = ys if y is None else torch.where((ts >= s_)[..., None], ys, y)
        ok = good if ok is None else ok & good
        if last:
            return y, x_end, ok
        with torch.no_grad():
            step = field(end, x_end) - field(bound, x_end)
        shift = taus[..., j] - taus[..., j].detach()
        shift = torch.where(inside[..., j], shift, torch.zeros_like(shift))
        x = x_end + step * (shift[:, None] if batched else shift)
        start = bound
    raise AssertionError("unreachable")  # pragma: no cover
