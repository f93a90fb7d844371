"""Parameter dropout (the parameter table's ``dropout`` column) in JAX.

Functional and jit-friendly: the targets are static Python data, masks come from a PRNG
key (one split per target) or are injected.  Works on nested ``{layer: {array: array}}``
parameter dicts in PyTorch layout, the exchange format of every backend, so it composes
with the JAX backend's ``set_parameters``/forward (or any pytree of the same shape).
Same semantics as :mod:`petab_sciml.backends.torch.parameter_dropout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from petab_sciml.problem.dropout import DropoutTarget, dropout_targets

__all__ = ["DropoutTarget", "apply_parameter_dropout", "dropout_parameters",
           "dropout_targets", "sample_masks"]


def sample_masks(targets: list[DropoutTarget], key: jax.Array
                 ) -> dict[str, dict[str, jax.Array]]:
    """Keep-masks (bool, one entry per slice): each slice kept with probability 1 - p."""
    masks: dict[str, dict[str, jax.Array]] = {}
    keys = jax.random.split(key, max(len(targets), 1))
    for k, t in zip(keys, targets):
        u = jax.random.uniform(k, (t.n_slices,))
        masks.setdefault(t.layer, {})[t.array] = u >= t.p
    return masks


def apply_parameter_dropout(params: Mapping[str, Mapping[str, Any]],
                            targets: list[DropoutTarget],
                            masks: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``params`` with every target multiplied by its mask factor (a new dict)."""
    out = {layer: dict(arrays) for layer, arrays in params.items()}
    for t in targets:
        w = jnp.asarray(params[t.layer][t.array])
        keep = jnp.asarray(masks[t.layer][t.array], dtype=bool)
        scale = jnp.asarray(t.scale, dtype=w.dtype)
        factor = jnp.where(keep, scale, jnp.zeros((), w.dtype))
        out[t.layer][t.array] = w * factor.reshape(t.mask_shape)
    return out


def dropout_parameters(params: Mapping[str, Mapping[str, Any]], targets: list[DropoutTarget],
                       *, key: jax.Array | None = None,
                       masks: Mapping[str, Mapping[str, Any]] | None = None,
                       train: bool = True) -> dict[str, dict[str, Any]]:
    """Training mode: apply dropout with ``masks`` or masks drawn from ``key``.
    Eval mode (``train=False``) or no targets: ``params`` unchanged."""
    if not train or not targets:
        return {layer: dict(arrays) for layer, arrays in params.items()}
    if masks is None:
        if key is None:
            raise ValueError("parameter dropout in training mode needs a PRNG key or masks")
        masks = sample_masks(targets, key)
    return apply_parameter_dropout(params, targets, masks)
