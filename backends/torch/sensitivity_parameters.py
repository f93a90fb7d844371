"""Where each network acts (pre-initialization, right-hand side, observables) and the
layout of the sensitivity parameter vector ``p``: everything the right-hand side reads
besides the states, ``[theta, pre-initialization outputs, right-hand-side network
arrays]``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from petab_sciml.simulation.plan import SimulationPlan


@dataclass(frozen=True)
class SensitivityParameters:
    n_theta: int
    pre_ids: list[int]
    """Networks evaluated before the solves (pre-initialization)."""
    rhs_nets: list[int]
    """Networks inside the right-hand side."""
    obs_nets: list[int]
    """Networks inside observables."""
    p_pre: list[tuple[int, int, int]]
    """``(network, start, end)``: each pre-initialization network's outputs in ``p``."""
    p_nets: list[tuple[int, int, int, int]]
    """``(network, start in p, start in w, size)``: each right-hand-side network's
    arrays in ``p`` and in the parameter vector ``w``."""
    n_p: int
    """Entries of ``p``."""

    def vector(self, theta: torch.Tensor, outs: list[torch.Tensor],
               w: torch.Tensor) -> torch.Tensor:
        """``p`` of one experiment: its constants, pre-initialization outputs ``outs`` and
        the right-hand-side networks' arrays in ``w``."""
        pieces = [theta] + [outs[j] for j in self.pre_ids]
        pieces += [w[base: base + size] for _, _, base, size in self.p_nets]
        return torch.cat(pieces)

    def split(self, p: torch.Tensor, n_outputs: list[int]):
        """``(theta, outs)`` of one experiment's ``p``: the pre-initialization networks'
        outputs read from ``p``, zeros for the others (``n_outputs`` per network)."""
        theta = p[: self.n_theta]
        outs = [p.new_zeros((n,)) for n in n_outputs]
        for j, a, b in self.p_pre:
            outs[j] = p[a:b]
        return theta, outs

    def split_rows(self, p: torch.Tensor, n_outputs: list[int]):
        """:meth:`split` of a batch (rows of ``p``)."""
        E = p.shape[0]
        theta = p[:, : self.n_theta]
        outs = [p.new_zeros((E, n)) for n in n_outputs]
        for j, a, b in self.p_pre:
            outs[j] = p[:, a:b]
        return theta, outs


def sensitivity_parameters(plan: SimulationPlan) -> SensitivityParameters:
    n_theta = len(plan.theta_ids)
    pre_ids = [j for j, n in enumerate(plan.networks) if n.pre_initialization]
    rhs_nets = [j for j, n in enumerate(plan.networks) if n.in_rhs]
    obs_nets = [j for j, n in enumerate(plan.networks) if n.in_observables]
    offset = n_theta
    p_pre = []
    for j in pre_ids:
        p_pre.append((j, offset, offset + plan.networks[j].n_outputs))
        offset += plan.networks[j].n_outputs
    p_nets = []
    for j in rhs_nets:
        slots = plan.networks[j].arrays
        if slots:
            a, b = slots[0].offset, slots[-1].offset + slots[-1].size
            p_nets.append((j, offset, a, b - a))
            offset += b - a
    return SensitivityParameters(n_theta, pre_ids, rhs_nets, obs_nets, p_pre, p_nets,
                                 offset)
