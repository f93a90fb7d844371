"""SBML events in the PyTorch backend (:mod:`petab_sciml.simulation.events`), as the JAX
backend has them (``backends/jax/events.py``): firing at a period's start, the state map
at an event, and the check that no state-dependent trigger changed inside a period.
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

    def unchanged_inside(self, t0, x0, ts, ys, t1, x1, theta, outs) -> torch.Tensor:
        """Whether no state-triggered event's trigger changed between the period's
        start, its output times (``ts``, ``ys`` with one more axis than ``x0``) and its
        end: a change is an event that the solve did not stop at."""
        if not bool(self.state_triggered.any()):
            return torch.ones(x0.shape[:-1], dtype=torch.bool, device=x0.device)
        first = self.status(t0, x0, theta, outs)
        along = self.status(ts, ys, theta[..., None, :], [o[..., None, :] for o in outs])
        last = self.status(t1, x1, theta, outs, left=True)
        same = (along == first[..., None, :]).all(-2) & (last == first)
        return (same | ~self.state_triggered.to(same.device)).all(-1)
