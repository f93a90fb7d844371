"""Linear (``linear``, flattened to 2-D and back for other ranks), Bilinear (matmul,
mul and sum_reduce) and matmul."""

from __future__ import annotations

import math
from typing import Any

from .registry import function, layer
from .writer import LayerCall, _Ident, _Writer


@layer("Linear")
def _linear(w: _Writer, call: LayerCall) -> _Ident:
    lay, base, x = call.layer, call.base, call.x
    cfg = lay.config
    weight = w.array(lay.id, "weight")
    b = w.array(lay.id, "bias", (1, cfg["out_features"])) if cfg["bias"] else 0.0
    if len(call.in_shape) == 2:
        return w.op(base, "linear", x, weight, b)
    flat = w.op(f"{base}_in", "reshape", x, shape=[-1, cfg["in_features"]])
    y = w.op(f"{base}_2d", "linear", flat, weight, b)
    return w.op(base, "reshape", y, shape=list(call.out_shape))


@layer("Bilinear")
def _bilinear(w: _Writer, call: LayerCall) -> _Ident:
    """y = x1^T W x2 + b as x1 @ W' (W' = W as [in1, out * in2]), times x2, summed over
    in2; leading dimensions are flattened to one batch dimension and restored."""
    lay, base, out_shape = call.layer, call.base, call.out_shape
    cfg = lay.config
    i1, i2, o = cfg["in1_features"], cfg["in2_features"], cfg["out_features"]
    x1, x2 = (_Ident(w.names[r.name]) for r in call.inputs[:2])
    batch = math.prod(out_shape[:-1])
    if len(out_shape) != 2:
        x1 = w.op(f"{base}_x1", "reshape", x1, shape=[batch, i1])
        x2 = w.op(f"{base}_x2", "reshape", x2, shape=[batch, i2])
    weight = w.op(f"{base}_w", "reshape", w.op(f"{base}_wt", "transpose",
                                               w.array(lay.id, "weight"),
                                               axes=[1, 0, 2]), shape=[i1, o * i2])
    left = w.op(f"{base}_left", "reshape", w.op(f"{base}_mm", "matmul", x1, weight),
                shape=[batch, o, i2])
    prod = w.op(f"{base}_prod", "mul", left, w.op(f"{base}_x2u", "unsqueeze", x2, axes=[1]))
    y = w.op(f"{base}_sum", "squeeze", w.op(f"{base}_red", "sum_reduce", prod, axes=[2]),
             axes=[2])
    if cfg["bias"]:
        y = w.op(f"{base}_biased", "add", y, w.array(lay.id, "bias", (1, o)))
    if len(out_shape) != 2:
        return w.op(base, "reshape", y, shape=list(out_shape))
    return y


@function("matmul")
def _matmul(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "matmul", x, w.value(node.bound["other"]))
