"""JAX operations of :func:`petab_sciml.simulation.term_sums.compile_term_sum`."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from petab_sciml.simulation.term_sums import NumpyTermSumOps


class JaxTermSumOps(NumpyTermSumOps):
    """Index tables stay numpy (constants of the traced program), as in numpy's."""

    @staticmethod
    def take(a: Any, index: np.ndarray) -> Any:
        return jnp.take(a, index, axis=-1)

    @staticmethod
    def monomials(x: Any, columns: np.ndarray) -> Any:
        padded = jnp.concatenate([x, jnp.ones_like(x[..., :1])], axis=-1)
        out = jnp.take(padded, columns[:, 0], axis=-1)
        for d in range(1, columns.shape[1]):
            out = out * jnp.take(padded, columns[:, d], axis=-1)
        return out

    @staticmethod
    def row_sums(values: Any, rows: np.ndarray, n_rows: int) -> Any:
        out = jnp.zeros(values.shape[:-1] + (n_rows,), values.dtype)
        return out.at[..., rows].add(values, indices_are_sorted=True)
