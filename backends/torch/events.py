"""SBML events in the PyTorch backend (:mod:`petab_sciml.simulation.events`), as the JAX
backend has them (``backends/jax/events.py``): firing at a period's start, the state map
at an event, and the probe that finds where state-triggered events fire inside a period.
Every method takes one experiment (``x`` ``(n_x,)``) or a batch (``x`` ``(E, n_x)``, with
``t`` ``(E,)`` and ``theta`` / ``outs`` ``(E, .)``)."""

from __future__ import annotations

from typing import Any

import torch

from petab_sciml.simulation.events import ROOT_RTOL


class Events:
    """The compiled events of a plan (``fns``: its
    :class:`~petab_sciml.simulation.compiled.CompiledFormulas`)."""

    def __init__(self, plan: Any, fns: Any):
        self.fns = fns
        self.strict = torch.tensor([e.strict for e in plan.events])
        self.initial = torch.tensor([e.initial_value for e in plan.events])
        self.targets = [torch.tensor(e.targets, dtype=torch.int64) for e in plan.events]
        self.state_triggered = torch.tensor([e.time is None for e in plan.events])

    def status(self, t, x, theta, outs, *, left: bool = False) -> torch.Tensor:
        """Whether each trigger is true at ``(t, x)``; ``left``: just before ``t``."""
        with torch.no_grad():
            g = self.fns.triggers(t, x, theta, *outs)
            if left:
                return g > ROOT_RTOL * self.fns.trigger_scales(t, x, theta, *outs)
        return torch.where(self.strict.to(g.device), g > 0, g >= 0)

    def apply(self, k: int, t, x, theta, outs) -> torch.Tensor:
        """The state after event ``k`` fires at ``t`` in state ``x``."""
        values = self.fns.event_values[k]
        if values is None:
            return x
        new = values(t, x, theta, *outs).to(x.dtype)
        return x.index_copy(-1, self.targets[k].to(x.device), new)

    def fire_at_start(self, t, x, theta, outs, before: torch.Tensor) -> torch.Tensor:
        """``x`` after every event whose trigger is true at ``t`` and was not
        (``before``), in execution order."""
        now = self.status(t, x, theta, outs)
        fire = now & ~before.to(now.device)
        for k in range(len(self.targets)):
            if bool(fire[..., k].any()):
                x = torch.where(fire[..., k, None], self.apply(k, t, x, theta, outs), x)
        return x


def event_probe(events: Events, field, x0: torch.Tensor, t0: float, t1: float, theta, outs,
                *, implicit: bool, rtol: float, atol: float
                ) -> tuple[list[float], list[int], bool]:
    """``(taus, ks, ok)``: the times at which state-triggered events ``ks`` fire inside
    ``(t0, t1)`` (finite ``t1``), found by SciPy's ``solve_ivp`` with terminal events on
    the rising triggers (Brent's method on its dense output), applying every event it
    meets; ``field(t, x)`` the right-hand side; ``implicit``: ``Radau`` instead of
    ``DOP853``.  Without gradients (the solve after it is differentiated).  ``ok``: the
    solves succeeded and at most :data:`MAX_STATE_EVENTS` state events fired."""
    import numpy as np
    from scipy.integrate import solve_ivp

    from petab_sciml.simulation.events import MAX_STATE_EVENTS

    like = x0.detach()
    n = len(events.targets)

    def as_tensor(t, y):
        return like.new_tensor(t), torch.as_tensor(y, dtype=like.dtype, device=like.device)

    def rhs(t, y):
        with torch.no_grad():
            return field(*as_tensor(t, y)).cpu().numpy()

    def g_all(t, y):
        with torch.no_grad():
            return events.fns.triggers(*as_tensor(t, y), theta, *outs).cpu().numpy()

    def trigger(k, offsets):
        def g(t, y):
            return float(g_all(t, y)[k] + offsets[k])
        g.terminal, g.direction = True, 1.0
        return g

    taus: list[float] = []
    ks: list[int] = []
    t, x = float(t0), like.cpu().numpy()
    status = events.status(like.new_tensor(t), like, theta, outs).cpu().numpy()
    for _ in range(MAX_STATE_EVENTS + int((~events.state_triggered).sum()) + 1):
        with torch.no_grad():
            g = g_all(t, x)
            tol = ROOT_RTOL * events.fns.trigger_scales(*as_tensor(t, x), theta,
                                                        *outs).cpu().numpy()
        # a trigger true within its tolerance of zero (just after its root) is not
        # found rising again at once
        offsets = np.where(status & (np.abs(g) <= tol), tol - g, 0.0)
        sol = solve_ivp(rhs, (t, float(t1)), x, method="Radau" if implicit else "DOP853",
                        rtol=rtol, atol=atol, events=[trigger(k, offsets) for k in range(n)])
        if sol.status == -1:
            return taus, ks, False
        if sol.status == 0:
            return taus, ks, True
        k = min(range(n), key=lambda j: sol.t_events[j][0] if len(sol.t_events[j])
                else np.inf)
        t = float(sol.t_events[k][0])
        before = as_tensor(t, sol.y_events[k][0])[1]
        with torch.no_grad():
            after = events.apply(k, like.new_tensor(t), before, theta, outs)
        x = after.cpu().numpy()
        if bool(events.state_triggered[k]):
            taus.append(t)
            ks.append(k)
            if len(taus) > MAX_STATE_EVENTS:
                return taus, ks, False
        status = events.status(like.new_tensor(t), after, theta, outs).cpu().numpy()
        status[k] = True
    return taus, ks, False
