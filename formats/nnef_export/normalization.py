"""Normalization: BatchNorm and InstanceNorm (``batch_normalization`` with running
statistics, else the ``mean_variance_normalization`` fragment), LayerNorm (moments
written out) and LocalResponseNorm (shifted channel slices; NNEF's own ``local_response_
normalization`` centres even windows otherwise)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .registry import function, layer
from .writer import LayerCall, _Ident, _Writer


@layer("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
def _batchnorm(w: _Writer, call: LayerCall) -> _Ident:
    return _normalization(w, call)


@layer("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
def _instancenorm(w: _Writer, call: LayerCall) -> _Ident:
    return w.batched(call, _normalization)


def _normalization(w: _Writer, call: LayerCall) -> _Ident:
    """Running statistics where tracked (inference mode normalises with them); else the
    statistics of the input, over batch and space (BatchNorm) or space (InstanceNorm)."""
    lay, base, x = call.layer, call.base, call.x
    cfg, n = lay.config, lay.spec.spatial_dims
    c = cfg["num_features"]
    scale = w.array(lay.id, "weight", (1, c)) if cfg["affine"] else w.filled(
        f"{base}_scale", (1, c), 1.0)
    offset = w.array(lay.id, "bias", (1, c)) if cfg["affine"] else w.filled(
        f"{base}_offset", (1, c), 0.0)
    if cfg["track_running_stats"]:
        mean = w.array(lay.id, "running_mean", (1, c))
        var = w.array(lay.id, "running_var", (1, c))
        return w.op(base, "batch_normalization", x, mean, var, offset, scale,
                    epsilon=float(cfg["eps"]))
    rank = len(call.in_shape)
    axes = [0, *range(2, rank)] if lay.type.startswith("Batch") else list(range(rank - n,
                                                                               rank))
    w.fragments.add("mean_variance_normalization")
    return w.op(base, "mean_variance_normalization", x, scale, offset, axes=axes,
                epsilon=float(cfg["eps"]))


@layer("LayerNorm")
def _layer_norm(w: _Writer, call: LayerCall) -> _Ident:
    lay, base, x = call.layer, call.base, call.x
    cfg = lay.config
    normalized = cfg["normalized_shape"]
    normalized = [normalized] if isinstance(normalized, int) else list(normalized)
    rank, k = len(call.in_shape), len(normalized)
    axes = list(range(rank - k, rank))
    mean = w.op(f"{base}_mean", "mean_reduce", x, axes=axes)
    centred = w.op(f"{base}_centred", "sub", x, mean)
    var = w.op(f"{base}_var", "mean_reduce",
               w.op(f"{base}_sq", "mul", centred, centred), axes=axes)
    std = w.op(f"{base}_std", "sqrt", w.op(f"{base}_eps", "add", var, float(cfg["eps"])))
    has_weight = cfg["elementwise_affine"]
    has_bias = has_weight and cfg["bias"]
    y = w.op(base if not has_weight else f"{base}_normed", "div", centred, std)
    full = [1] * (rank - k) + normalized
    if has_weight:
        weight = w.array(lay.id, "weight", full)
        y = w.op(base if not has_bias else f"{base}_scaled", "mul", y, weight)
    if has_bias:
        y = w.op(base, "add", y, w.array(lay.id, "bias", full))
    return y


@layer("LocalResponseNorm")
def _lrn_layer(w: _Writer, call: LayerCall) -> _Ident:
    return _lrn(w, call.base, call.x, call.in_shape, call.layer.config)


@function("local_response_norm")
def _lrn_function(w: _Writer, node: Any, x: Any) -> _Ident:
    return _lrn(w, node.name, x, w.shapes[node.bound["input"].name], node.bound)


def _lrn(w: _Writer, base: str, x: Any, shape: Sequence[int], cfg: Mapping[str, Any]
         ) -> _Ident:
    """x / (k + alpha * mean of x**2 over [c - size//2, c + (size-1)//2]) ** beta."""
    size, channels = int(cfg["size"]), shape[1]
    rank = len(shape)
    padding = [(0, 0)] * rank
    padding[1] = (size // 2, (size - 1) // 2)
    sq = w.op(f"{base}_sq", "sqr", x)
    padded = w.op(f"{base}_padded", "pad", sq, padding=padding, border="constant")
    total = None
    for j in range(size):
        piece = w.op(f"{base}_w{j}", "slice", padded, axes=[1], begin=[j], end=[j + channels])
        total = piece if total is None else w.op(f"{base}_sum{j}", "add", total, piece)
    scaled = w.op(f"{base}_scaled", "add", w.op(f"{base}_avg", "mul", total,
                                                float(cfg["alpha"]) / size), float(cfg["k"]))
    return w.op(base, "div", x, w.op(f"{base}_den", "pow", scaled, float(cfg["beta"])))
