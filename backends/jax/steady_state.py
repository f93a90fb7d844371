"""Steady states: the event that ends a period running to ``t = inf``.

A period that runs to steady state (pre-equilibration, or measurements at ``time =
inf``) is solved towards ``t1 = inf`` with this event; its end state is the steady
state, which the measurements at ``inf`` read (:mod:`.experiments`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .options import JaxOptions

Rates = Callable[[Any, Any, Any], list[tuple[Any, Any]]]
"""``rates(t, y, args) -> [(dy/dt, y), ...]``: each part of the solution that must settle,
with its rate of change."""


def steady_state_event(rates: Rates, t1: Any, ts: Any, options: JaxOptions) -> Any:
    """The steady-state event of a period ending at ``t1`` (inactive unless ``t1 =
    inf``): past the last finite measurement time ``ts[-1]``, stop once every rate of
    ``rates`` has a weighted RMS norm below 1 (AMICI's check, with ``options.atol`` and
    ``options.rtol``)."""
    import diffrax
    import jax.numpy as jnp

    def cond(t, y, args, **kwargs):
        del kwargs
        done = jnp.isinf(t1) & (t >= ts[-1])
        for rate, value in rates(t, y, args):
            scale = options.atol + options.rtol * jnp.abs(value)
            done = done & (jnp.sqrt(jnp.mean((rate / scale) ** 2)) < 1.0)
        return done

    return diffrax.Event(cond)
