"""Pools: MaxPool, AvgPool and LPPool layers (MaxPool, AveragePool, LpPool), adaptive
pools (global pools, or a reduction per output window) and the functional pools."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from petab_sciml.catalogue import POOL_FUNCTIONS, as_tuple

from ..export_common import PoolLayer
from .exporter import _Exporter, spatial_dims
from .registry import function, layer


@layer(*(f"{kind}{n}d" for kind in ("MaxPool", "AvgPool", "LPPool") for n in (1, 2, 3)))
def _pool_layer(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    return _pool(ex, lay, ins[0])


@layer(*(f"Adaptive{kind}Pool{n}d" for kind in ("Avg", "Max") for n in (1, 2, 3)))
def _adaptive_pool_layer(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    return _adaptive_pool(ex, lay, ins[0])


@function(*(fn for fn in POOL_FUNCTIONS if fn != "local_response_norm"))
def _functional_pool(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    lay = PoolLayer(fn, b)
    x = ex.input(b)
    if lay.type.startswith("Adaptive"):
        return _adaptive_pool(ex, lay, x)
    return _pool(ex, lay, x)


def _pool(ex: _Exporter, lay: Any, x: str) -> str:
    c = lay.config
    t = lay.type
    n = spatial_dims(lay)
    k = list(as_tuple(c["kernel_size"], n))
    s = list(as_tuple(c["stride"], n)) if c["stride"] is not None else list(k)
    xb, added = ex.unbatch(x, n, t)
    if t.startswith("MaxPool"):
        p = list(as_tuple(c["padding"], n))
        y = ex.op("MaxPool", [xb], kernel_shape=k, strides=s, pads=p + p,
                  dilations=list(as_tuple(c["dilation"], n)), ceil_mode=int(c["ceil_mode"]))
    elif t.startswith("AvgPool"):
        p = list(as_tuple(c["padding"], n))
        div = c.get("divisor_override")
        include = bool(c["count_include_pad"]) or div is not None
        y = ex.op("AveragePool", [xb], kernel_shape=k, strides=s, pads=p + p,
                  ceil_mode=int(c["ceil_mode"]), count_include_pad=int(include))
        if div is not None:
            y = ex.op("Mul", [y, ex.const(math.prod(k) / div)])
    else:
        y = _lp_pool(ex, c, xb, k, s)
    return ex.rebatch(y, added)


def _lp_pool(ex: _Exporter, c: Mapping[str, Any], xb: str, k: list[int], s: list[int]
             ) -> str:
    """LpPool for even integer norms without ceil_mode; else PyTorch's maths:
    avg_pool(x^p) * k, then sign * relu(|.|) ** (1/p)."""
    norm = float(c["norm_type"])
    if norm.is_integer() and int(norm) % 2 == 0 and not c["ceil_mode"]:
        return ex.op("LpPool", [xb], kernel_shape=k, strides=s, p=int(norm))
    powered = ex.op("Pow", [xb, ex.const(norm)])
    avg = ex.op("AveragePool", [powered], kernel_shape=k, strides=s,
                ceil_mode=int(c["ceil_mode"]), count_include_pad=1)
    signed = ex.op("Mul", [ex.op("Sign", [avg]), ex.op("Relu", [ex.op("Abs", [avg])])])
    return ex.op("Pow", [ex.op("Mul", [signed, ex.const(float(math.prod(k)))]),
                         ex.const(1.0 / norm)])


def _adaptive_pool(ex: _Exporter, lay: Any, x: str) -> str:
    """A global pool where every output size is 1; else, axis by axis, PyTorch's windows
    ``[floor(j L / O), ceil((j+1) L / O))`` as Slice + Reduce, concatenated (needs the
    static input size)."""
    n = spatial_dims(lay)
    kind = "Avg" if "Avg" in lay.type else "Max"
    out = lay.config["output_size"]
    sizes = [out] * n if not isinstance(out, (list, tuple)) else list(out)
    if all(o == 1 for o in sizes):
        xb, added = ex.unbatch(x, n, lay.type)
        op = "GlobalAveragePool" if kind == "Avg" else "GlobalMaxPool"
        return ex.rebatch(ex.op(op, [xb]), added)
    shape = ex.shape(x)
    reduce = "ReduceMean" if kind == "Avg" else "ReduceMax"
    y = x
    for i, o in enumerate(sizes):
        axis = i - n
        size = None if shape is None or len(shape) < n else shape[axis]
        if o is None or o == size:
            continue
        if size is None:
            raise ex.error(f"{lay.type} with output size {o} needs the static input size "
                           "of its spatial axes; pass input_shapes")
        pieces = []
        for j in range(o):
            start, stop = (j * size) // o, -(-((j + 1) * size) // o)
            piece = ex.op("Slice", [y, ex.ints([start], "starts"), ex.ints([stop], "ends"),
                                    ex.ints([axis])])
            pieces.append(ex.reduce(reduce, piece, [axis], True))
        y = pieces[0] if len(pieces) == 1 else ex.op("Concat", pieces, axis=axis)
    return y
