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
from dataclasses import dataclass

import torch

Solve = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
"""``solve(x0, t0, t1, ts) -> (x at ts, x at t1, ok)`` of one span."""
Field = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``field(t, x) -> dx/dt``."""


def _below(t: torch.Tensor) -> torch.Tensor:
    return torch.nextafter(t, torch.full_like(t, -torch.inf))


@dataclass
class JumpEvents:
    """The events at the jumps of :func:`split_at_jumps`."""

    event_of: torch.Tensor
    """``(J,)``: the event that fires at each jump, -1 for none."""
    apply: Callable[..., torch.Tensor]
    """``apply(k, t, x) -> x`` after event ``k``."""
    state: torch.Tensor | None = None
    """``(J,)`` bool: the jump is a state event's root found by the probe (one
    experiment only); None: none is."""
    root: Callable[..., torch.Tensor] | None = None
    """``root(k, t, x) -> g``: event ``k``'s root function."""


def split_at_jumps(solve: Solve, field: Field, taus: torch.Tensor, x0: torch.Tensor,
                   t0: torch.Tensor, t1: torch.Tensor, ts: torch.Tensor,
                   events: JumpEvents | None = None):
    """``solve`` from ``x0`` at ``t0`` to ``t1`` split at the jump times ``taus``: one experiment
    (``taus`` ``(J,)``, ``t0``/``t1`` scalars, ``ts`` ``(N,)``) or a batch (``taus``
    ``(E, J)``, ``t0``/``t1`` ``(E,)``, ``ts`` ``(E, N)``); ``field(t, x)`` the
    right-hand side with the solve's parameters; ``events``: the events that fire at
    some jumps.  Returns what ``solve`` returns, with ``ok`` and-ed over the pieces."""
    batched = ts.dim() == 2
    taus, order = torch.sort(taus, dim=-1, stable=True)
    event_of = None if events is None else events.event_of.to(order.device)[order]
    state = (None if events is None or events.state is None
             else events.state.to(order.device)[order])
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
        shift = taus[..., j] - taus[..., j].detach()
        shift = torch.where(inside[..., j], shift, torch.zeros_like(shift))
        shift_x = shift[:, None] if batched else shift
        if event_of is None:
            with torch.no_grad():
                step = field(end, x_end) - field(bound, x_end)
            x = x_end + step * shift_x
        else:
            if state is not None and bool(state[j]) and bool(inside[j]):
                shift = _root_shift(events.root, int(event_of[j]), bound, end, x_end, field)
                shift_x = shift
            x = _across_event(field, events.apply, event_of[..., j], inside[..., j], bound,
                              shift, shift_x, end, x_end)
        start = bound
    raise AssertionError("unreachable")  # pragma: no cover


def _root_shift(root: Callable[..., torch.Tensor], k: int, bound, end, x_end, field: Field
                ) -> torch.Tensor:
    """``-g / dg/dt`` (the rate without gradient) of event ``k`` at the probe's root
    ``bound``: one Newton step to this solve's root, and in derivative the implicit
    function theorem's ``dtau/dp = -(dg/dp) / (dg/dt)``."""
    with torch.enable_grad():
        t = bound.detach().clone().requires_grad_(True)
        x = x_end.detach().clone().requires_grad_(True)
        g_t, g_x = torch.autograd.grad(root(k, t, x), (t, x), allow_unused=True)
    with torch.no_grad():
        rate = (torch.zeros_like(t) if g_t is None else g_t) + (
            0.0 if g_x is None else (g_x * field(end, x_end)).sum())
        rate = torch.where(rate == 0, torch.ones_like(rate), rate)
    return -root(k, bound, x_end) / rate


def _across_event(field: Field, apply: Callable[..., torch.Tensor], event: torch.Tensor,
                  inside: torch.Tensor, bound, shift, shift_x, end, x_end) -> torch.Tensor:
    """The state carried across a jump at which ``event`` (per row; -1: none) may fire:
    ``h(x + f(tau-) dtau) - f(tau+, h) dtau``."""
    with torch.no_grad():
        f_minus = field(end, x_end)
    x_minus = x_end + f_minus * shift_x
    x_plus = x_minus
    fires = (event >= 0) & inside
    for k in sorted({int(k) for k in event.reshape(-1).tolist() if k >= 0}):
        mask = fires & (event == k)
        if bool(mask.any()):
            after = apply(k, bound + shift, x_minus)
            x_plus = torch.where(mask[..., None] if x_plus.dim() > mask.dim() else mask,
                                 after, x_plus)
    with torch.no_grad():
        f_plus = field(bound, x_plus)
    return x_plus - f_plus * shift_x
