"""The ODE's right-hand side with the networks that run inside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .networks import BoundNetworks

VectorField = Callable[..., Any]
"""``field(t, x, theta, outs, arrays, nets) -> dx/dt``: ``outs`` the network outputs
known before the solve (pre-initialization), ``arrays`` the networks' array inputs,
``nets`` the networks' arrays (:meth:`BoundNetworks.arrays`)."""


def vector_field(networks: BoundNetworks, rhs: Callable[..., Any],
                 rhs_nets: list[int]) -> VectorField:
    """The right-hand side ``rhs(t, x, theta, *outs)`` of the compiled plan with the
    outputs of the networks ``rhs_nets`` evaluated at ``(t, x)`` (always in eval mode:
    an adaptive solver needs a deterministic right-hand side)."""
    def field(t, x, theta, outs, arrays, nets):
        outs = list(outs)
        for j in rhs_nets:
            outs[j] = networks.outputs(j, t, x, theta, outs, arrays, nets)
        return rhs(t, x, theta, *outs)

    return field
