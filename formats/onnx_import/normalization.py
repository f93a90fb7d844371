"""BatchNormalization, InstanceNormalization, LayerNormalization and LRN -> norm layers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C, _f32


# ---------------------------------------------------------------- normalisation
def _affine(im: _Importer, node: Any, scale: Any, bias: Any, n: int
            ) -> tuple[bool, dict[str, tuple[np.ndarray, Any, str]]]:
    """(affine, arrays) for norm layers: constant ones/zeros mean not affine."""
    s = im.array(scale)
    bb = im.array(bias) if bias is not None else np.zeros(n, dtype=np.float32)
    if s is None or bb is None:
        raise im.error(node, "scale and bias must be initializers or constants")
    if isinstance(scale, _C) and (bias is None or isinstance(bias, _C)) \
            and np.all(s == 1) and not np.any(bb):
        return False, {}
    arrays = {"weight": (s.reshape(n), scale, ""),
              "bias": (bb.reshape(n), bias, "" if bias is not None else "zeros (absent)")}
    return True, arrays


@handles("BatchNormalization")
def _batchnorm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    for k in range(1, len(node.output)):
        if im.used(node, k):
            raise im.error(node, "the running-statistics outputs of a training-mode "
                           "BatchNormalization are not supported")
    if im.opset < 9 and at.get("spatial", 1) == 0:
        raise im.error(node, "spatial=0 (per-activation statistics) is not supported")
    x = ins[0]
    rank = im.rank(x)
    if rank not in (2, 3, 4, 5):
        raise im.error(node, f"BatchNormalization needs an input of rank 2 to 5 (got "
                       f"{'unknown' if rank is None else rank})")
    mean = im.array(ins[3])
    var = im.array(ins[4])
    if mean is None or var is None or im.array(ins[1]) is None or im.array(ins[2]) is None:
        return _batchnorm_generic(im, node, ins, rank, _f32(at.get("epsilon", 1e-5)))
    c = int(mean.size)
    affine, arrays = _affine(im, node, ins[1], ins[2], c)
    momentum = at.get("momentum", 0.9)
    args = {"num_features": c, "eps": _f32(at.get("epsilon", 1e-5)),
            "momentum": _f32(1.0 - _f32(momentum)), "affine": affine,
            "track_running_stats": True}
    arrays["running_mean"] = (mean.reshape(c), ins[3], "")
    arrays["running_var"] = (var.reshape(c), ins[4], "")
    if at.get("training_mode", 0):
        im.warnings.append(f"{im._where(node)}: training_mode=1 BatchNormalization imported "
                           "as a BatchNorm layer; it uses batch statistics only when the "
                           "network runs in training mode")
    n = 1 if rank <= 3 else rank - 2
    im.bind(node, 0, im.add_layer(node, f"BatchNorm{n}d", args, arrays, [im.tensor(x, node)]))


def _batchnorm_generic(im: _Importer, node: Any, ins: list, rank: int, eps: float) -> None:
    """Inference BatchNorm of computed statistics:
    (x - mean) * scale / sqrt(var + eps) + bias, per channel (axis 1)."""
    x, scale, bias, mean, var = (im.tensor(v, node) for v in ins[:5])

    def per_channel(ref: str, v: Any) -> str:
        shape = im.static_shape(v)
        if shape is None or len(shape) != 1:
            raise im.error(node, "statistics of unknown shape")
        return im.emit("reshape", [ref], {"shape": [int(shape[0])] + [1] * (rank - 2)}) \
            if rank > 2 else ref

    m, s, b = per_channel(mean, ins[3]), per_channel(scale, ins[1]), per_channel(bias, ins[2])
    v = per_channel(var, ins[4])
    inv = im.emit("div", [s, im.emit("sqrt", [im.emit("add", [v, eps])])])
    y = im.emit("mul", [im.emit("sub", [x, m]), inv])
    im.bind(node, 0, im.emit("add", [y, b], name=im.out_name(node)))


def _instancenorm_computed(im: _Importer, node: Any, ins: list, rank: int) -> None:
    """InstanceNormalization with a scale or bias the network computes (no layer):
    ``(x - mean) / sqrt(var + eps) * scale + bias`` over the spatial axes, biased
    variance, as the layer computes it."""
    eps = _f32(im.attrs(node).get("epsilon", 1e-5))
    x = im.tensor(ins[0], node)
    axes = list(range(2, rank))
    mean = im.emit("mean", [x], {"dim": axes, "keepdim": True})
    centred = im.emit("sub", [x, mean])
    var = im.emit("mean", [im.emit("mul", [centred, centred])], {"dim": axes, "keepdim": True})
    y = im.emit("div", [centred, im.emit("sqrt", [im.emit("add", [var, eps])])])
    shape = [-1] + [1] * (rank - 2)
    y = im.emit("mul", [y, im.emit("reshape", [im.tensor(ins[1], node)], {"shape": shape})])
    if len(ins) > 2 and ins[2] is not None:
        y = im.emit("add", [y, im.emit("reshape", [im.tensor(ins[2], node)], {"shape": shape})],
                    name=im.out_name(node))
    im.bind(node, 0, y)


@handles("InstanceNormalization")
def _instancenorm(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank not in (3, 4, 5):
        raise im.error(node, "InstanceNormalization needs an input of rank 3 to 5")
    scale = im.array(ins[1])
    if scale is None or (len(ins) > 2 and ins[2] is not None and im.array(ins[2]) is None):
        _instancenorm_computed(im, node, ins, rank)
        return
    c = int(scale.size)
    affine, arrays = _affine(im, node, ins[1], ins[2], c)
    args = {"num_features": c, "eps": _f32(im.attrs(node).get("epsilon", 1e-5)),
            "affine": affine, "track_running_stats": False}
    im.bind(node, 0, im.add_layer(node, f"InstanceNorm{rank - 2}d", args, arrays,
                                  [im.tensor(x, node)]))


@handles("LayerNormalization")
def _layernorm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    for k in range(1, len(node.output)):
        if im.used(node, k):
            raise im.error(node, "the Mean/InvStdDev outputs are not supported")
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    shape = im.shape(x)
    axis = int(at.get("axis", -1))
    eps = _f32(at.get("epsilon", 1e-5))
    s = im.array(scale)
    if shape is None or s is None:
        raise im.error(node, "LayerNormalization needs the input rank and a constant scale")
    axis = im.norm_axis(node, axis, len(shape))
    normalized = shape[axis:]
    ref = im.tensor(x, node)
    if all(d is not None for d in normalized):
        normalized = [int(d) for d in normalized]
        size = math.prod(normalized)
        b = im.array(bias) if bias is not None else None
        if s.size == size and (b is None or b.size == size):
            args: dict[str, Any] = {"normalized_shape": normalized, "eps": eps}
            arrays: dict[str, tuple[np.ndarray, Any, str]] = {}
            ones = isinstance(scale, _C) and np.all(s == 1)
            zero_bias = b is None or (isinstance(bias, _C) and not np.any(b))
            if ones and zero_bias:
                args["elementwise_affine"] = False
            else:
                arrays["weight"] = (s.reshape(normalized), scale,
                                    "" if s.shape == tuple(normalized) else "reshaped")
                if not zero_bias:
                    arrays["bias"] = (b.reshape(normalized), bias,
                                      "" if b.shape == tuple(normalized) else "reshaped")
                else:
                    args["bias"] = False
            im.bind(node, 0, im.add_layer(node, "LayerNorm", args, arrays, [ref]))
            return
    # Generic: (x - mean) / sqrt(var + eps) * scale + bias over the trailing axes.
    dims = list(range(axis - len(shape), 0))
    mu = im.emit("mean", [ref], {"dim": dims, "keepdim": True})
    d = im.emit("sub", [ref, mu])
    var = im.emit("mean", [im.emit("mul", [d, d])], {"dim": dims, "keepdim": True})
    y = im.emit("div", [d, im.emit("sqrt", [im.emit("add", [var, eps])])])
    y = im.emit("mul", [y, im.operand(scale, node, x)])
    if bias is not None:
        y = im.emit("add", [y, im.operand(bias, node, x)])
    im.bind(node, 0, y)


@handles("LRN")
def _lrn(im: _Importer, node: Any, ins: list) -> None:
    """LRN -> LocalResponseNorm.  Both average x**2 over ``size`` channels; for an even
    size ONNX's window reaches one channel further up (``[c - (size-1)//2, c + size//2]``)
    and PyTorch's one further down, so even sizes run on the channel-flipped input."""
    at = im.attrs(node)
    if "size" not in at:
        raise im.error(node, "LRN needs its size attribute")
    size = int(at["size"])
    args = {"size": size, "alpha": _f32(at.get("alpha", 1e-4)),
            "beta": _f32(at.get("beta", 0.75)), "k": _f32(at.get("bias", 1.0))}
    x = im.tensor(ins[0], node)
    if size % 2:
        im.bind(node, 0, im.add_layer(node, "LocalResponseNorm", args, {}, [x],
                                      out_hint=im.out_name(node)))
        return
    flipped = im.emit("flip", [x], {"dims": [1]})
    y = im.add_layer(node, "LocalResponseNorm", args, {}, [flipped])
    im.bind(node, 0, im.emit("flip", [y], {"dims": [1]}, name=im.out_name(node)))
