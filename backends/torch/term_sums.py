"""PyTorch operations of :func:`petab_sciml.simulation.term_sums.compile_term_sum`."""

from __future__ import annotations

import numpy as np
import torch


class TorchTermSumOps:
    """Index tables become tensors on the arguments' device, once per device and dtype."""

    @staticmethod
    def key(like: torch.Tensor) -> tuple:
        return (like.device, like.dtype)

    @staticmethod
    def index(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(a, device=like.device)

    @staticmethod
    def values(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(a, dtype=like.dtype, device=like.device)

    @staticmethod
    def take(a: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return a.index_select(-1, index)

    @staticmethod
    def monomials(x: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        padded = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
        out = padded.index_select(-1, columns[:, 0])
        for d in range(1, columns.shape[1]):
            out = out * padded.index_select(-1, columns[:, d])
        return out

    @staticmethod
    def row_sums(values: torch.Tensor, rows: torch.Tensor, n_rows: int) -> torch.Tensor:
        out = values.new_zeros(values.shape[:-1] + (n_rows,))
        return out.index_add(-1, rows, values)
