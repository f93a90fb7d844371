"""Pools: MaxPool / AvgPool layers (``max_pool`` / ``avg_pool`` over windows that include
the batch and channel axes; PyTorch's ceil_mode, count_include_pad and divisor_override
as padding, borders and rescaling), LPPool (``pow`` around ``avg_pool``), adaptive pools
(one pool, or reduced slices per output window) and the functional pools."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from petab_sciml.catalogue import POOL_FUNCTIONS, as_tuple

from ..export_common import PoolLayer
from .registry import LAYERS, function, layer
from .writer import LayerCall, _Ident, _Writer

_WINDOW_POOLS = tuple(f"{kind}{n}d" for kind in ("MaxPool", "AvgPool") for n in (1, 2, 3))
_LP_POOLS = tuple(f"LPPool{n}d" for n in (1, 2, 3))
_ADAPTIVE_POOLS = tuple(f"Adaptive{kind}Pool{n}d" for kind in ("Max", "Avg")
                        for n in (1, 2, 3))


@layer(*_WINDOW_POOLS)
def _pool(w: _Writer, call: LayerCall) -> _Ident:
    lay, base, x, in_shape, out_shape = (call.layer, call.base, call.x, call.in_shape,
                                         call.out_shape)
    cfg, n = lay.config, lay.spec.spatial_dims
    lead = len(in_shape) - n
    k = list(as_tuple(cfg["kernel_size"], n))
    s = list(as_tuple(cfg["stride"] if cfg["stride"] is not None else k, n))
    p = list(as_tuple(cfg["padding"], n))
    d = list(as_tuple(cfg.get("dilation", 1), n))
    pads = []
    for i in range(n):
        extra = 0
        if cfg["ceil_mode"]:
            o = out_shape[lead + i]
            extra = max(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1
                        - (in_shape[lead + i] + 2 * p[i]))
        pads.append((p[i], p[i] + extra))
    ceil_extra = any(q != pp for pp, q in pads)
    attrs = {"size": [1] * lead + k, "padding": [(0, 0)] * lead + pads,
             "stride": [1] * lead + s, "dilation": [1] * lead + d}
    if lay.type.startswith("MaxPool"):
        return w.op(base, "max_pool", x, border="ignore", **attrs)
    if cfg.get("divisor_override") is not None:
        # the window sum (padding as zeros) over the divisor: a constant-border
        # average (always over the full window) rescaled
        factor = math.prod(k) / cfg["divisor_override"]
        mean = w.op(base if factor == 1 else f"{base}_mean", "avg_pool", x,
                    border="constant", **attrs)
        return mean if factor == 1 else w.op(base, "mul", mean, factor)
    if cfg["count_include_pad"] and any(p):
        if not ceil_extra:
            return w.op(base, "avg_pool", x, border="constant", **attrs)
        return _overhanging_average(w, call, attrs, k, s, p)
    return w.op(base, "avg_pool", x, border="ignore" if (
        not cfg["count_include_pad"] or ceil_extra) else "constant", **attrs)


def _overhanging_average(w: _Writer, call: LayerCall, attrs: dict[str, Any], k: list[int],
                         s: list[int], p: list[int]) -> _Ident:
    """PyTorch divides a window overhanging the padded input by the part inside it:
    the full-window average rescaled by window / that part, per position."""
    base, in_shape, out_shape = call.base, call.in_shape, call.out_shape
    n = call.layer.spec.spatial_dims
    lead = len(in_shape) - n
    counts = [np.array([min(j * s[i] - p[i] + k[i], in_shape[lead + i] + p[i])
                        - (j * s[i] - p[i]) for j in range(out_shape[lead + i])])
              for i in range(n)]
    grid = math.prod(k) / functools.reduce(np.multiply, np.ix_(*counts))
    mean = w.op(f"{base}_mean", "avg_pool", call.x, border="constant", **attrs)
    factor = w.op(f"{base}_divisor", "constant<scalar>",
                  shape=[1] * lead + list(grid.shape),
                  value=[float(v) for v in grid.ravel()])
    return w.op(base, "mul", mean, factor)


@layer(*_LP_POOLS)
def _lp_pool(w: _Writer, call: LayerCall) -> _Ident:
    """(sum over the window of x ** p) ** (1 / p), the sum as an average times the size."""
    lay, base, x, in_shape, out_shape = (call.layer, call.base, call.x, call.in_shape,
                                         call.out_shape)
    cfg, n = lay.config, lay.spec.spatial_dims
    rank = len(in_shape)
    lead = rank - n
    k = list(as_tuple(cfg["kernel_size"], n))
    s = list(as_tuple(cfg["stride"] if cfg["stride"] is not None else k, n))
    pads = []
    for i in range(n):
        extra = max(0, (out_shape[lead + i] - 1) * s[i] + k[i] - in_shape[lead + i])
        pads.append((0, extra if cfg["ceil_mode"] else 0))
    p = float(cfg["norm_type"])
    powered = w.op(f"{base}_pow", "pow", x, p)
    pooled = w.op(f"{base}_avg", "avg_pool", powered, size=[1] * lead + k,
                  border="ignore", padding=[(0, 0)] * lead + pads,
                  stride=[1] * lead + s, dilation=[1] * (lead + n))
    summed = w.op(f"{base}_sum", "mul", pooled, float(math.prod(k)))
    return w.op(base, "pow", summed, 1.0 / p)


@layer(*_ADAPTIVE_POOLS)
def _adaptive_pool(w: _Writer, call: LayerCall) -> _Ident:
    """One pool where the output sizes divide the input's; else NNEF has no adaptive
    pooling: PyTorch's windows [floor(j L / O), ceil((j+1) L / O)) form a box, and
    max/mean over a box is max/mean over one axis after another, so one reduced slice
    per output position, concatenated, axis by axis."""
    lay, base, x, in_shape, out_shape = (call.layer, call.base, call.x, call.in_shape,
                                         call.out_shape)
    n = lay.spec.spatial_dims
    rank = len(in_shape)
    lead = rank - n
    sizes = [in_shape[lead + i] // max(out_shape[lead + i], 1) for i in range(n)]
    op = "max_pool" if "Max" in lay.type else "avg_pool"
    if all(out_shape[lead + i] * sizes[i] == in_shape[lead + i] for i in range(n)):
        return w.op(base, op, x, size=[1] * lead + sizes, border="ignore",
                    padding=[(0, 0)] * rank, stride=[1] * lead + sizes,
                    dilation=[1] * rank)
    reduce = "max_reduce" if "Max" in lay.type else "mean_reduce"
    y = x
    for i in range(n):
        axis, size, out = lead + i, in_shape[lead + i], out_shape[lead + i]
        if size == out:
            continue
        parts = [w.op(f"{base}_{i}_{j}", reduce,
                      w.slice_axis(f"{base}_{i}_{j}_window", y, axis,
                                   (j * size) // out, -((-(j + 1) * size) // out)),
                      axes=[axis]) for j in range(out)]
        y = w.op(f"{base}_{i}", "concat", parts, axis=axis)
    return y if y is not x else w.op(base, "copy", x)


@function(*(fn for fn in POOL_FUNCTIONS if fn != "local_response_norm"))
def _functional_pool(w: _Writer, node: Any, x: Any) -> _Ident:
    """The pool layer of the same maths, on a batch of one for an unbatched input."""
    pool = PoolLayer(node.function, node.bound)
    call = LayerCall(pool, node.name, x, w.shapes[node.bound["input"].name],
                     w.shapes[node.name])
    return w.batched(call, LAYERS.handlers[pool.type])
