"""SBML events in the JAX backend (:mod:`petab_sciml.simulation.events`): firing at a
period's start, the state map at an event, and the check that no state-dependent
trigger changed inside a period."""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml.simulation.events import ROOT_RTOL


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

    def unchanged_inside(self, t0, x0, ts, ys, t1, x1, theta, outs):
        """Whether no state-triggered event's trigger changed between the period's
        start, its output times and its end (a change means an event the solve did
        not stop at)."""
        import jax.numpy as jnp

        if not self.state_triggered.any():
            return jnp.asarray(True)
        first = self.status(t0, x0, theta, outs)
        along = self.status(ts, ys, theta, outs)
        last = self.status(t1, x1, theta, outs, left=True)
        same = jnp.all(along == first[None, :], axis=0) & (last == first)
        return jnp.all(same | ~self.state_triggered)
