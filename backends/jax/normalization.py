"""Normalisation layers: ``torch.nn.BatchNormNd``, ``InstanceNormNd``, ``LayerNorm`` and
``LocalResponseNorm`` as layer modules."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from petab_sciml.catalogue import as_tuple

from . import ops
from .layer_base import Array, LayerModule, static_field

NORM_FAMILIES = ("BatchNorm", "InstanceNorm", "LayerNorm", "LocalResponseNorm")


class _Norm(LayerModule):
    weight: Array | None
    bias: Array | None
    running_mean: Array | None
    running_var: Array | None
    num_batches_tracked: Array | None
    spatial_dims: int = static_field()
    eps: float = static_field()
    momentum: float | None = static_field()
    track_running_stats: bool = static_field()
    array_names: ClassVar[tuple[str, ...]] = (
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked")

    def _affine(self, y: Array) -> Array:
        if self.weight is None:
            return y
        shape = (1, -1) + (1,) * (y.ndim - 2)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class BatchNorm(_Norm):
    """``torch.nn.BatchNormNd``: batch statistics in training mode (or without running
    statistics), running statistics in eval mode; running statistics updated like PyTorch
    (unbiased variance, ``momentum=None`` as the cumulative average)."""

    def forward(self, x: Array, train: bool = False, key: Array | None = None):
        n = self.spatial_dims
        ranks = (2, 3) if n == 1 else (n + 2,)
        ops.check_rank(x, ranks, f"BatchNorm{n}d")
        use_batch_stats = train or not self.track_running_stats
        shape = (1, -1) + (1,) * (x.ndim - 2)
        updates: dict[str, Array] = {}
        if use_batch_stats:
            axes = (0, *range(2, x.ndim))
            count = math.prod(x.shape[a] for a in axes)
            if count == 1:
                raise ValueError(f"Expected more than 1 value per channel when training, got "
                                 f"input size {tuple(x.shape)}")
            mean = jnp.mean(x, axis=axes)
            var = jnp.mean(jnp.square(x - mean.reshape(shape)), axis=axes)
            if train and self.track_running_stats:
                tracked = self.num_batches_tracked + 1
                if self.momentum is None:
                    factor = 1.0 / tracked.astype(x.dtype)
                else:
                    factor = self.momentum
                unbiased = var * (count / (count - 1))
                updates = {
                    "running_mean": (1 - factor) * self.running_mean + factor * mean,
                    "running_var": (1 - factor) * self.running_var + factor * unbiased,
                    "num_batches_tracked": tracked,
                }
        else:
            mean, var = self.running_mean, self.running_var
        y = (x - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + self.eps)
        return self._affine(y), updates


class InstanceNorm(_Norm):
    """``torch.nn.InstanceNormNd``: per-sample, per-channel statistics; with
    ``track_running_stats`` the running statistics are the batch mean of the instance
    statistics (``momentum=None`` leaves them unchanged, as in PyTorch) and are used in
    eval mode.  ``num_batches_tracked`` is never incremented (as in PyTorch)."""

    def forward(self, x: Array, train: bool = False, key: Array | None = None):
        n = self.spatial_dims
        ops.check_rank(x, (n + 1, n + 2), f"InstanceNorm{n}d")
        if x.ndim == n + 1:
            y, updates = self.forward(x[None], train, key)
            return y[0], updates
        use_input_stats = train or not self.track_running_stats
        axes = tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * n
        updates: dict[str, Array] = {}
        if use_input_stats:
            count = math.prod(x.shape[2:])
            if count == 1:
                raise ValueError(f"Expected more than 1 spatial element when training, got "
                                 f"input size {tuple(x.shape)}")
            mean = jnp.mean(x, axis=axes, keepdims=True)
            var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
            y = (x - mean) * jax.lax.rsqrt(var + self.eps)
            if self.track_running_stats:
                m = 0.0 if self.momentum is None else self.momentum
                inst_mean = mean.reshape(x.shape[:2]).mean(axis=0)
                inst_var = (var.reshape(x.shape[:2]) * (count / (count - 1))).mean(axis=0)
                updates = {
                    "running_mean": (1 - m) * self.running_mean + m * inst_mean,
                    "running_var": (1 - m) * self.running_var + m * inst_var,
                }
        else:
            y = ((x - self.running_mean.reshape(shape))
                 * jax.lax.rsqrt(self.running_var.reshape(shape) + self.eps))
        return self._affine(y), updates


class LayerNorm(LayerModule):
    weight: Array | None
    bias: Array | None
    normalized_shape: tuple[int, ...] = static_field()
    eps: float = static_field()
    array_names: ClassVar[tuple[str, ...]] = ("weight", "bias")

    def apply(self, x: Array) -> Array:
        k = len(self.normalized_shape)
        if x.ndim < k or tuple(x.shape[x.ndim - k:]) != self.normalized_shape:
            raise ValueError(f"LayerNorm: expected an input whose trailing dimensions are "
                             f"{list(self.normalized_shape)}, got shape {tuple(x.shape)}")
        axes = tuple(range(x.ndim - k, x.ndim))
        mean = jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class LocalResponseNorm(LayerModule):
    """``torch.nn.LocalResponseNorm``: ``x / (k + alpha * mean of x**2 over the channel
    window [c - size//2, c + (size-1)//2])**beta``, zero-padded at the ends (PyTorch's
    window; ONNX's LRN centres even windows one channel later)."""

    size: int = static_field()
    alpha: float = static_field()
    beta: float = static_field()
    k: float = static_field()

    def apply(self, x: Array) -> Array:
        if x.ndim < 3:
            raise ValueError(f"Expected 3D or higher dimensionality input (got {x.ndim} "
                             "dimensions)")
        sq = jnp.square(x)
        pads = [(0, 0)] * x.ndim
        pads[1] = (self.size // 2, (self.size - 1) // 2)
        sq = jnp.pad(sq, pads)
        channels = x.shape[1]
        total = sq[:, :channels]
        for j in range(1, self.size):
            total = total + sq[:, j:j + channels]
        return x / jnp.power(total * (self.alpha / self.size) + self.k, self.beta)


def make_norm(family: str, n: int | None, cfg: Mapping[str, Any],
              arrays: Mapping[str, Array]) -> LayerModule:
    """The normalisation module of ``family`` (:data:`NORM_FAMILIES`; ``n`` spatial
    dimensions where the type has them) with resolved arguments ``cfg`` and ``arrays``."""
    a = {name: arrays.get(name) for name in ("weight", "bias")}
    if family in ("BatchNorm", "InstanceNorm"):
        cls = BatchNorm if family == "BatchNorm" else InstanceNorm
        return cls(**a, running_mean=arrays.get("running_mean"),
                   running_var=arrays.get("running_var"),
                   num_batches_tracked=arrays.get("num_batches_tracked"), spatial_dims=n,
                   eps=float(cfg["eps"]),
                   momentum=None if cfg["momentum"] is None else float(cfg["momentum"]),
                   track_running_stats=cfg["track_running_stats"])
    if family == "LayerNorm":
        return LayerNorm(**a, normalized_shape=as_tuple(cfg["normalized_shape"], 1),
                         eps=float(cfg["eps"]))
    return LocalResponseNorm(size=cfg["size"], alpha=float(cfg["alpha"]),
                             beta=float(cfg["beta"]), k=float(cfg["k"]))
