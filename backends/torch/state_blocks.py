"""The states at the output times and the constants of every (experiment, period), as
row blocks of a few tensors (:class:`StateBlocks`), and each measurement's row in them.

A batch's period is one block for all its experiments: slicing out each experiment
would cost autograd nodes, and full-size zero-filled gradients, per experiment."""

from __future__ import annotations

import numpy as np
import torch

from petab_sciml.simulation.plan import SimulationPlan


class StateBlocks:
    """Row blocks of one evaluation, filled in solve order.  ``index_cache``: a dict
    kept by the caller across evaluations for :meth:`measured` (the layout is fixed by
    the plan and the batches)."""

    def __init__(self, index_cache: dict):
        self.x_blocks: list[torch.Tensor] = []
        self.th_blocks: list[torch.Tensor] = []
        self.x_at: dict[tuple[int, int], int] = {}
        self.th_at: dict[tuple[int, int], int] = {}
        self.rows_x = self.rows_th = 0
        self.index_cache = index_cache

    def add_batch(self, exps: list[int], ys: list[torch.Tensor],
                  thetas: list[torch.Tensor]) -> None:
        """A batch's periods: per period ``k``, the states at its padded output times
        ``ys[k]`` ``(E, N, n_x)`` and constants ``thetas[k]`` ``(E, n_theta)``."""
        n_x = ys[0].shape[-1] if ys else 0
        for k, (y, theta) in enumerate(zip(ys, thetas)):
            N = y.shape[1]
            self.x_blocks.append(y.reshape(y.shape[0] * N, n_x))
            self.th_blocks.append(theta)
            for i, e in enumerate(exps):
                self.x_at[(e, k)] = self.rows_x + i * N
                self.th_at[(e, k)] = self.rows_th + i
            self.rows_x += len(exps) * N
            self.rows_th += len(exps)

    def add_period(self, e: int, k: int, y: torch.Tensor, theta: torch.Tensor) -> None:
        """Period ``k`` of experiment ``e``: states at its output times ``y`` and its
        constants ``theta``."""
        self.x_blocks.append(y)
        self.th_blocks.append(theta.unsqueeze(0))
        self.x_at[(e, k)], self.th_at[(e, k)] = self.rows_x, self.rows_th
        self.rows_x += y.shape[0]
        self.rows_th += 1

    def measured(self, plan: SimulationPlan, d: dict[str, torch.Tensor], w: torch.Tensor):
        """``(X, TH)``: per measurement, its states and constants."""
        n_x = len(plan.state_ids)
        if not self.th_blocks:   # no measurements
            return w.new_zeros((0, n_x)), w.new_zeros((0, d["theta0"].shape[0]))
        pick_x, pick_th = self._measurement_rows(plan, d)
        return torch.cat(self.x_blocks)[pick_x], torch.cat(self.th_blocks)[pick_th]

    def _measurement_rows(self, plan: SimulationPlan, d: dict[str, torch.Tensor]):
        """Per measurement, its row in the concatenated state blocks and in the
        concatenated constant blocks (worked out once per device and block sizes)."""
        key = (d["m_x"].device, (self.rows_x, self.rows_th))
        found = self.index_cache.get(key)
        if found is None:
            first = []
            for e, exp in enumerate(plan.experiments):
                for k, p in enumerate(exp.periods):
                    first.append(np.arange(len(p.times)) + self.x_at[(e, k)])
            x_rows = np.concatenate(first) if first else np.zeros(0, np.int64)
            th_rows = np.array([self.th_at[(e, k)] for e, exp in enumerate(plan.experiments)
                                for k in range(len(exp.periods))], np.int64)
            m_x, m_th = d["m_x"].cpu().numpy(), d["m_th"].cpu().numpy()
            device = d["m_x"].device
            found = (torch.as_tensor(x_rows[m_x], device=device),
                     torch.as_tensor(th_rows[m_th], device=device))
            self.index_cache.clear()
            self.index_cache[key] = found
        return found
