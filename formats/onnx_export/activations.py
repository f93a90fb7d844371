"""Activations: the ONNX ops of the same name (Relu, Selu, Elu, ...), the ones written
out where ONNX has none or only at a newer opset (silu, gelu, mish, softplus with beta
and threshold, logsigmoid, tanhshrink), Clip (relu6, hardtanh, clamp), Softmax /
LogSoftmax and the PReLU layer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from petab_sciml.catalogue import implicit_softmax_dim

from .exporter import _Exporter
from .registry import function, layer

_NATIVE = {"relu": "Relu", "hardswish": "HardSwish", "selu": "Selu", "softsign": "Softsign",
           "tanh": "Tanh", "sigmoid": "Sigmoid"}
"""Activations with an ONNX op of the same maths and no arguments."""


@function(*_NATIVE)
def _native(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op(_NATIVE[fn], [ex.input(b)])


@function("hardsigmoid")
def _hardsigmoid(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("HardSigmoid", [ex.input(b)], alpha=1.0 / 6.0, beta=0.5)


@function("leaky_relu")
def _leaky_relu(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("LeakyRelu", [ex.input(b)], alpha=float(b["negative_slope"]))


@function("elu", "celu")
def _elu(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Elu" if fn == "elu" else "Celu", [ex.input(b)], alpha=float(b["alpha"]))


@function("silu")
def _silu(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Mul", [ex.input(b), ex.op("Sigmoid", [ex.input(b)])])


@function("logsigmoid")
def _logsigmoid(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Neg", [ex.op("Softplus", [ex.op("Neg", [ex.input(b)])])])


@function("tanhshrink")
def _tanhshrink(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Sub", [ex.input(b), ex.op("Tanh", [ex.input(b)])])


def _clip(ex: _Exporter, x: str, lo: float | None, hi: float | None) -> str:
    args = [x, "" if lo is None else ex.const(lo), "" if hi is None else ex.const(hi)]
    while args[-1] == "":
        args.pop()
    return ex.op("Clip", args)


@function("relu6")
def _relu6(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _clip(ex, ex.input(b), 0.0, 6.0)


@function("hardtanh")
def _hardtanh(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _clip(ex, ex.input(b), float(b["min_val"]), float(b["max_val"]))


@function("clamp")
def _clamp(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _clip(ex, ex.input(b), None if b["min"] is None else float(b["min"]),
                 None if b["max"] is None else float(b["max"]))


@function("gelu", opset=20)
def _gelu(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    """Gelu from opset 20; before, the erf or tanh formula."""
    x = ex.input(b)
    approx = b["approximate"]
    if ex.opset >= 20:
        return ex.op("Gelu", [x], approximate=approx)
    if approx == "none":
        e = ex.op("Erf", [ex.op("Div", [x, ex.const(math.sqrt(2.0))])])
        return ex.op("Mul", [ex.op("Mul", [x, ex.op("Add", [e, ex.const(1.0)])]),
                             ex.const(0.5)])
    cube = ex.op("Mul", [ex.op("Pow", [x, ex.const(3.0)]), ex.const(0.044715)])
    inner = ex.op("Mul", [ex.op("Add", [x, cube]), ex.const(math.sqrt(2.0 / math.pi))])
    t = ex.op("Add", [ex.op("Tanh", [inner]), ex.const(1.0)])
    return ex.op("Mul", [ex.op("Mul", [x, ex.const(0.5)]), t])


@function("softplus")
def _softplus(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    """Softplus(beta x) / beta where beta x <= threshold, else x (PyTorch's)."""
    x = ex.input(b)
    beta, threshold = float(b["beta"]), float(b["threshold"])
    bx = x if beta == 1.0 else ex.op("Mul", [x, ex.const(beta)])
    sp = ex.op("Softplus", [bx])
    if beta != 1.0:
        sp = ex.op("Div", [sp, ex.const(beta)])
    return ex.op("Where", [ex.op("Greater", [bx, ex.const(threshold)]), x, sp])


@function("mish", opset=18)
def _mish(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    if ex.opset >= 18:
        return ex.op("Mish", [x])
    return ex.op("Mul", [x, ex.op("Tanh", [ex.op("Softplus", [x])])])


@function("softmax", "log_softmax")
def _softmax(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    dim = b["dim"]
    if dim is None:
        dim = implicit_softmax_dim(ex.need_rank(x, "softmax without dim"))
    return ex.op("Softmax" if fn == "softmax" else "LogSoftmax", [x], axis=int(dim))


@layer("PReLU")
def _prelu(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    """PRelu with PyTorch's (C,) weight reshaped to broadcast over axis 1 (C, 1, ..., 1)."""
    x = ins[0]
    w = ex.init(lay.id, "weight")
    n = int(lay.config["num_parameters"])
    if n == 1:
        if ex.rank(x) == 0:  # a (1,) slope does not broadcast to a 0-d input
            w = ex.op("Reshape", [w, ex.ints([], "shape")])
        return ex.op("PRelu", [x, w])
    r = ex.need_rank(x, "PReLU with several parameters")
    if r > 2:
        w = ex.channel(w, r)
    return ex.op("PRelu", [x, w])
