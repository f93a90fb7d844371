"""Normalization: BatchNorm (BatchNormalization, or the batch statistics written out),
InstanceNorm, LayerNorm (LayerNormalization) and LocalResponseNorm (LRN, or PyTorch's
maths for even sizes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.catalogue import as_tuple

from .exporter import _Exporter, spatial_dims
from .registry import function, layer


@layer("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
def _batchnorm(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    x = ins[0]
    c = lay.config
    lid = lay.id
    nf = int(c["num_features"])
    w = ex.init(lid, "weight") if c["affine"] else ex.const(np.ones(nf), name="ones")
    b = ex.init(lid, "bias") if c["affine"] else ex.const(np.zeros(nf), name="zeros")
    eps = float(c["eps"])
    if c["track_running_stats"]:
        m = c["momentum"]
        return ex.op("BatchNormalization", [x, w, b, ex.init(lid, "running_mean"),
                                            ex.init(lid, "running_var")],
                     epsilon=eps, momentum=1.0 - (0.1 if m is None else float(m)))
    # No running statistics: PyTorch normalises with the batch statistics in any mode.
    r = ex.need_rank(x, f"{lay.type} without running statistics")
    axes = [0] + list(range(2, r))
    return _normalize(ex, x, axes, eps, ex.channel(w, r), ex.channel(b, r))


def _normalize(ex: _Exporter, x: str, axes: Sequence[int], eps: float, w: str, b: str
               ) -> str:
    mean = ex.reduce("ReduceMean", x, axes, True)
    d = ex.op("Sub", [x, mean])
    var = ex.reduce("ReduceMean", ex.op("Mul", [d, d]), axes, True)
    y = ex.op("Div", [d, ex.op("Sqrt", [ex.op("Add", [var, ex.const(eps)])])])
    return ex.op("Add", [ex.op("Mul", [y, w]), b])


@layer("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
def _instancenorm(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    c = lay.config
    lid = lay.id
    n = spatial_dims(lay)
    nf = int(c["num_features"])
    xb, added = ex.unbatch(ins[0], n, lay.type)
    w = ex.init(lid, "weight") if c["affine"] else ex.const(np.ones(nf), name="ones")
    b = ex.init(lid, "bias") if c["affine"] else ex.const(np.zeros(nf), name="zeros")
    if c["track_running_stats"]:  # eval mode: the running statistics, as BatchNorm
        y = ex.op("BatchNormalization", [xb, w, b, ex.init(lid, "running_mean"),
                                         ex.init(lid, "running_var")],
                  epsilon=float(c["eps"]))
    else:
        y = ex.op("InstanceNormalization", [xb, w, b], epsilon=float(c["eps"]))
    return ex.rebatch(y, added)


@layer("LayerNorm")
def _layernorm(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    c, lid = lay.config, lay.id
    shape = list(as_tuple(c["normalized_shape"], 1))
    scale = ex.init(lid, "weight") if c["elementwise_affine"] else ex.const(np.ones(shape))
    args = [ins[0], scale]
    if c["elementwise_affine"] and c["bias"]:
        args.append(ex.init(lid, "bias"))
    return ex.op("LayerNormalization", args, axis=-len(shape), epsilon=float(c["eps"]))


@layer("LocalResponseNorm")
def _lrn_layer(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    return _lrn(ex, lay.config, ins[0])


@function("local_response_norm")
def _lrn_function(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _lrn(ex, b, ex.input(b))


def _lrn(ex: _Exporter, c: Mapping[str, Any], x: str) -> str:
    """LRN for odd sizes.  For even sizes ONNX's window is centred the other way
    (``[c - size//2 + 1, c + size//2]``, PyTorch's ``[c - size//2, c + size//2 - 1]``)
    and onnxruntime runs only odd sizes, so PyTorch's maths is written out: the channel
    average of x**2 as an AveragePool over the padded channel axis."""
    size, alpha, beta, k = int(c["size"]), float(c["alpha"]), float(c["beta"]), float(c["k"])
    if size % 2:
        return ex.op("LRN", [x], size=size, alpha=alpha, beta=beta, bias=k)
    rank = ex.need_rank(x, "LocalResponseNorm of even size")
    if rank not in (3, 4):
        raise ex.error("LocalResponseNorm of even size is exported for inputs of rank 3 and "
                       f"4 only, got rank {rank}")
    sq = ex.op("Unsqueeze", [ex.op("Mul", [x, x]), ex.ints([1])])
    pads = [0] * (rank + 1) * 2
    pads[2], pads[rank + 1 + 2] = size // 2, (size - 1) // 2
    sq = ex.op("Pad", [sq, ex.ints(pads, "pads")])
    avg = ex.op("AveragePool", [sq], kernel_shape=[size] + [1] * (rank - 2))
    avg = ex.op("Squeeze", [avg, ex.ints([1])])
    div = ex.op("Pow", [ex.op("Add", [ex.op("Mul", [avg, ex.const(alpha)]), ex.const(k)]),
                        ex.const(beta)])
    return ex.op("Div", [x, div])
