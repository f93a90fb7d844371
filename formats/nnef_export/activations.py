"""Activations: NNEF's own (relu, tanh, sigmoid, selu, silu, gelu, elu, leaky_relu,
softplus, softmax, clamp, prelu) and the others written out with standard operations
(gelu's tanh form, softplus with beta and threshold, hardsigmoid, hardswish, mish,
logsigmoid, tanhshrink, softsign, celu, log_softmax), plus the PReLU layer."""

from __future__ import annotations

import math
from typing import Any

from petab_sciml.catalogue import implicit_softmax_dim

from .registry import function, layer
from .writer import LayerCall, _Ident, _Writer

_NATIVE = ("relu", "tanh", "sigmoid", "selu", "silu")
"""Activations NNEF has under the same name, without arguments."""


@function(*_NATIVE)
def _native(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, node.function, x)


@function("gelu")
def _gelu(w: _Writer, node: Any, x: Any) -> _Ident:
    base = node.name
    if node.bound["approximate"] == "none":
        return w.op(base, "gelu", x)
    cube = w.op(f"{base}_cube", "mul", w.op(f"{base}_sq", "mul", x, x), x)
    inner = w.op(f"{base}_inner", "add", x, w.op(f"{base}_c", "mul", cube, 0.044715))
    t = w.op(f"{base}_tanh", "tanh", w.op(f"{base}_s", "mul", inner,
                                          math.sqrt(2.0 / math.pi)))
    half = w.op(f"{base}_half", "mul", x, 0.5)
    return w.op(base, "mul", half, w.op(f"{base}_1p", "add", t, 1.0))


@function("elu")
def _elu(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "elu", x, alpha=float(node.bound["alpha"]))


@function("leaky_relu")
def _leaky_relu(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "leaky_relu", x, alpha=float(node.bound["negative_slope"]))


@function("softplus")
def _softplus(w: _Writer, node: Any, x: Any) -> _Ident:
    """softplus(beta x) / beta where beta x <= threshold, else x (PyTorch's)."""
    base, b = node.name, node.bound
    beta, threshold = float(b["beta"]), float(b["threshold"])
    if beta == 1 and threshold >= 20:
        return w.op(base, "softplus", x)  # the threshold only guards overflow
    scaled = w.op(f"{base}_scaled", "mul", x, beta) if beta != 1 else x
    soft = w.op(f"{base}_soft", "softplus", scaled)
    soft = w.op(f"{base}_smooth", "div", soft, beta) if beta != 1 else soft
    linear = w.op(f"{base}_linear", "gt", scaled, threshold)
    return w.op(base, "select", linear, x, soft)


@function("relu6", "hardtanh")
def _hardtanh(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    lo, hi = (0.0, 6.0) if node.function == "relu6" else (float(b["min_val"]),
                                                          float(b["max_val"]))
    return w.op(node.name, "clamp", x, lo, hi)


@function("clamp")
def _clamp(w: _Writer, node: Any, x: Any) -> _Ident:
    base, lo, hi = node.name, node.bound["min"], node.bound["max"]
    if lo is not None and hi is not None:
        return w.op(base, "clamp", x, float(lo), float(hi))
    if lo is not None:
        return w.op(base, "max", x, float(lo))
    if hi is not None:
        return w.op(base, "min", x, float(hi))
    return w.op(base, "copy", x)


def _hardsigmoid(w: _Writer, base: str, x: Any) -> _Ident:
    scaled = w.op(f"{base}_scaled", "add", w.op(f"{base}_div", "div", x, 6.0), 0.5)
    return w.op(base, "clamp", scaled, 0.0, 1.0)


@function("hardsigmoid")
def _hardsigmoid_function(w: _Writer, node: Any, x: Any) -> _Ident:
    return _hardsigmoid(w, node.name, x)


@function("hardswish")
def _hardswish(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "mul", x, _hardsigmoid(w, f"{node.name}_gate", x))


@function("mish")
def _mish(w: _Writer, node: Any, x: Any) -> _Ident:
    base = node.name
    soft = w.op(f"{base}_softplus", "softplus", x)
    return w.op(base, "mul", x, w.op(f"{base}_tanh", "tanh", soft))


@function("logsigmoid")
def _logsigmoid(w: _Writer, node: Any, x: Any) -> _Ident:
    base = node.name
    neg = w.op(f"{base}_neg", "neg", x)
    return w.op(base, "neg", w.op(f"{base}_softplus", "softplus", neg))


@function("tanhshrink")
def _tanhshrink(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "sub", x, w.op(f"{node.name}_tanh", "tanh", x))


@function("softsign")
def _softsign(w: _Writer, node: Any, x: Any) -> _Ident:
    base = node.name
    denominator = w.op(f"{base}_den", "add", w.op(f"{base}_abs", "abs", x), 1.0)
    return w.op(base, "div", x, denominator)


@function("celu")
def _celu(w: _Writer, node: Any, x: Any) -> _Ident:
    """max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0)."""
    base = node.name
    alpha = float(node.bound["alpha"])
    scaled = w.op(f"{base}_scaled", "div", x, alpha)
    expm1 = w.op(f"{base}_expm1", "sub", w.op(f"{base}_exp", "exp", scaled), 1.0)
    neg = w.op(f"{base}_neg", "min", w.op(f"{base}_mul", "mul", expm1, alpha), 0.0)
    return w.op(base, "add", w.op(f"{base}_pos", "max", x, 0.0), neg)


@function("softmax", "log_softmax")
def _softmax(w: _Writer, node: Any, x: Any) -> _Ident:
    base, b, f = node.name, node.bound, node.function
    rank = w.rank(b["input"].name)
    dim = b["dim"]
    if dim is None:
        dim = implicit_softmax_dim(rank)
    soft = w.op(base if f == "softmax" else f"{base}_softmax", "softmax", x,
                axes=[w.axis(dim, rank)])
    return soft if f == "softmax" else w.op(base, "log", soft)


@layer("PReLU")
def _prelu(w: _Writer, call: LayerCall) -> _Ident:
    """Channels on axis 1 (one channel below rank 2), as a [1, C, 1, ...] variable."""
    lay = call.layer
    alpha = [1] * max(len(call.in_shape), 1)
    if lay.config["num_parameters"] > 1:
        alpha[1] = lay.config["num_parameters"]
    return w.op(call.base, "prelu", call.x, w.array(lay.id, "weight", alpha))
