"""The parameters ``p`` of forward sensitivities ``S = dx/dp``: everything the right-hand
side depends on besides the states.

``p = (theta, pre-initialization outputs, arrays of the networks inside the right-hand
side)``; the columns of ``S`` follow that order.  Small problems keep ``p`` as one vector
and ``S`` as one ``(n_x, n_x + n_p)`` matrix (its first ``n_x`` columns: ``dx/dx0``).
From :data:`.xla_options.LARGE_NETWORK_PARAMETERS` on, ``p`` and ``S`` are pytrees
(``S``: ``(dx/dx0, one block per array of p)``), so that the right-hand side takes each
array as it is and writes ``dS`` for each array once: as one vector sliced inside the
right-hand side, every array costs a pad and an add of all of ``p`` per reverse pass,
and one ``S`` matrix an extra copy of ``J_p`` per stage.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml.simulation.plan import SimulationPlan

from . import xla_options
from .networks import NetArrays


class SensitivityParameters:
    """How ``p`` is made from, and split back into, the right-hand side's arguments."""

    def __init__(self, plan: SimulationPlan, rhs_nets: list[int], pre_ids: list[int],
                 n_out: list[int], n_theta: int, n_nets: int):
        """``rhs_nets``: networks inside the right-hand side; ``pre_ids``: pre-
        initialization networks; ``n_out``: outputs per network; ``n_theta``: length
        of ``theta``; ``n_nets``: number of networks."""
        self.pre_ids = pre_ids
        self.n_nets = n_nets
        self.shapes = [(j, s) for j in rhs_nets for s in plan.networks[j].arrays]
        """``(network, array slot)`` of each network array in ``p``."""
        self.leaf_shapes = ([(n_theta,)] + [(n_out[j],) for j in pre_ids]
                            + [tuple(s.shape) for _, s in self.shapes])
        self.n_x = len(plan.state_ids)
        self.n_p = int(sum(np.prod(shape, dtype=np.int64) for shape in self.leaf_shapes))
        self.n = self.n_x + self.n_p
        """Columns of ``S``: ``x0`` then ``p``."""
        self.tree = plan.n_w >= xla_options.LARGE_NETWORK_PARAMETERS and self.n_x < self.n
        """``p`` and ``S`` are pytrees (large networks), else one vector and matrix."""

    def as_tree(self, p_flat: Any) -> tuple[Any, list[Any], list[Any]]:
        """``(theta, [pre outputs], [rhs arrays])`` from one vector."""
        leaves, start = [], 0
        for shape in self.leaf_shapes:
            size = int(np.prod(shape, dtype=np.int64))
            leaves.append(p_flat[start: start + size].reshape(shape))
            start += size
        k = 1 + len(self.pre_ids)
        return leaves[0], leaves[1:k], leaves[k:]

    def pack(self, theta: Any, outs: list[Any], nets: NetArrays) -> Any:
        """``p`` (a vector, or a pytree when :attr:`tree`) of the right-hand side's
        arguments."""
        import jax
        import jax.numpy as jnp

        arrays_ = []
        for j, s in self.shapes:
            group = nets[j][0] if s.ir_trainable else nets[j][1]
            arrays_.append(group[s.layer][s.array])
        p = (theta, [outs[j] for j in self.pre_ids], arrays_)
        if self.tree:
            return p
        parts = [leaf.reshape(-1) for leaf in jax.tree_util.tree_leaves(p)]
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    def unpack(self, p: Any, outs_template: list[Any], p_is_tree: bool | None = None
               ) -> tuple[Any, list[Any], NetArrays]:
        """``(theta, outs, nets)`` from ``p`` (a pytree when ``p_is_tree``, default
        :attr:`tree`); ``outs_template`` gives the outputs of networks not in ``p``."""
        if p_is_tree is None:
            p_is_tree = self.tree
        theta, pre, arrays_ = p if p_is_tree else self.as_tree(p)
        outs = list(outs_template)
        for j, value in zip(self.pre_ids, pre):
            outs[j] = value
        nets_: NetArrays = [(dict(), dict()) for _ in range(self.n_nets)]
        for (j, s), value in zip(self.shapes, arrays_):
            target = nets_[j][0] if s.ir_trainable else nets_[j][1]
            target.setdefault(s.layer, {})[s.array] = value
        return theta, outs, nets_
