"""The ``dropout`` column of the parameter table (our extension), framework-free part.

In training mode, at every forward pass, each slice of a targeted array along its *input
axis* is zeroed with probability ``p`` and the kept slices are scaled by ``1 / (1 - p)``;
in eval mode nothing happens.  Input axes: axis 1 for arrays with two or more dimensions
(Linear ``in_features``, Conv ``in_channels``, Bilinear ``in1``), axis 0 for ConvTranspose
weights (PyTorch stores them ``(in, out, k...)``), each element for 1-D arrays, and the
whole value for scalars.

A *mask* is a boolean vector of kept slices, one entry per slice.  The backends
(``petab_sciml.backends.torch.parameter_dropout`` and
``petab_sciml.backends.jax.parameter_dropout``) draw masks from their own generator or
PRNG key, or take injected masks; :func:`apply_numpy` is the reference implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DropoutTarget:
    """One array under parameter dropout."""

    layer: str
    array: str
    p: float
    shape: tuple[int, ...]
    axis: int | None
    """The input axis; None for a scalar (dropped as a whole)."""

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.array}"

    @property
    def n_slices(self) -> int:
        return 1 if self.axis is None else self.shape[self.axis]

    @property
    def mask_shape(self) -> tuple[int, ...]:
        """Shape that broadcasts a mask of ``n_slices`` against the array."""
        if self.axis is None:
            return ()
        return tuple(n if d == self.axis else 1 for d, n in enumerate(self.shape))

    @property
    def scale(self) -> float:
        return 1.0 / (1.0 - self.p)


def input_axis(layer_type: str | None, array_id: str, ndim: int) -> int | None:
    if ndim == 0:
        return None
    if ndim == 1:
        return 0
    if layer_type and layer_type.startswith("ConvTranspose") and array_id == "weight":
        return 0
    return 1


def dropout_targets(network: Any, spec: Mapping[str, Mapping[str, float]]) -> list[DropoutTarget]:
    """Targets of ``spec`` (``{layer: {array: p}}``, e.g. ``ResolvedNetwork.dropout``)."""
    infos = network.parameter_arrays()
    out = []
    for layer, arrays in spec.items():
        for array, p in arrays.items():
            if not p:
                continue
            if not 0.0 <= p < 1.0:
                raise ValueError(f"dropout of {layer}.{array} must be in [0, 1), got {p}")
            shape = tuple(infos[layer][array].shape)
            kind = network.layers[layer].type if layer in network.layers else None
            out.append(DropoutTarget(layer, array, float(p), shape,
                                     input_axis(kind, array, len(shape))))
    return out


def factor(keep: np.ndarray, target: DropoutTarget, dtype: Any) -> np.ndarray:
    """The multiplier for ``keep``: ``1/(1-p)`` (rounded to ``dtype``) or 0, mask-shaped."""
    scale = np.asarray(target.scale, dtype=dtype)
    out = np.where(np.asarray(keep, bool), scale, np.zeros((), dtype)).astype(dtype)
    return out.reshape(target.mask_shape)


def apply_numpy(params: Mapping[str, Mapping[str, np.ndarray]], targets: list[DropoutTarget],
                masks: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Reference: ``params`` with each target multiplied by its mask factor."""
    out = {layer: dict(arrays) for layer, arrays in params.items()}
    for t in targets:
        w = np.asarray(params[t.layer][t.array])
        out[t.layer][t.array] = w * factor(masks[t.layer][t.array], t, w.dtype)
    return out
