"""MaxPool, AveragePool, LpPool and the global pools -> pooling layers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .conv import _conv_geometry
from .importer import _Importer
from .registry import handles
from .values import _C


# ---------------------------------------------------------------- pooling
def _pool_args(im: _Importer, node: Any, x: Any) -> tuple[dict, list[int], list[int], int]:
    at = im.attrs(node)
    kernel = [int(k) for k in at["kernel_shape"]]
    n = len(kernel)
    g = _conv_geometry(im, node, x, kernel)
    if g["same"]:
        raise im.error(node, "auto_pad SAME needs static input sizes")
    return {"kernel_size": kernel, "stride": g["strides"], "dilation": g["dil"],
            "ceil_mode": bool(at.get("ceil_mode", 0))}, g["begins"], g["ends"], n


def _pool_padding(kernel: Sequence[int], dil: Sequence[int], begins: Sequence[int],
                  ends: Sequence[int]) -> list[int] | None:
    """Symmetric PyTorch padding if allowed (at most half the effective kernel)."""
    if list(begins) != list(ends):
        return None
    for p, k, d in zip(begins, kernel, dil):
        if p > ((k - 1) * d + 1) // 2:
            return None
    return list(begins)


@handles("MaxPool")
def _maxpool(im: _Importer, node: Any, ins: list) -> None:
    if im.used(node, 1):
        raise im.error(node, "the Indices output of MaxPool is not supported")
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    ref = im.tensor(x, node)
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    if padding is None:
        ref = im.pad(node, ref, im.shape(x), [0, 0] + begins, [0, 0] + ends,
                     value=-np.inf)
        padding = [0] * n
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "dilation": g["dilation"], "ceil_mode": g["ceil_mode"]}
    im.bind(node, 0, im.add_layer(node, f"MaxPool{n}d", args, {}, [ref]))


@handles("AveragePool")
def _avgpool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    include = bool(im.attrs(node).get("count_include_pad", 0))
    if any(d != 1 for d in g["dilation"]):
        _dilated_avgpool(im, node, x, g, begins, ends, include)
        return
    ref = im.tensor(x, node)
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    rescale = None
    if padding is None:
        if not include:
            # Average of the valid elements: PyTorch's average over the explicitly padded
            # input, rescaled per output position by (window size / valid elements).
            shape = im.static_shape(x)
            if shape is None:
                raise im.error(node, "asymmetric padding with count_include_pad=0 needs the "
                               "static input shape")
            rescale = _exclude_pad_scale(shape[-n:], g["kernel_size"], g["stride"], begins,
                                         ends, g["ceil_mode"])
        ref = im.pad(node, ref, im.shape(x), [0, 0] + begins, [0, 0] + ends)
        padding = [0] * n
        include = True
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "ceil_mode": g["ceil_mode"], "count_include_pad": include}
    if rescale is None:
        im.bind(node, 0, im.add_layer(node, f"AvgPool{n}d", args, {}, [ref]))
        return
    pooled = im.add_layer(node, f"AvgPool{n}d", args, {}, [ref])
    factor = im.tensor(_C(rescale, f"{im.out_name(node)}_divisor"), node)
    im.bind(node, 0, im.emit("mul", [pooled, factor], name=im.out_name(node)))


def _dilated_avgpool(im: _Importer, node: Any, x: Any, g: dict, begins: Sequence[int],
                     ends: Sequence[int], include: bool) -> None:
    """AveragePool with dilations (PyTorch's AvgPool has none): the sum of the strided
    slices of the zero-padded input at each kernel offset, over a constant per-position
    divisor that counts the window's input elements (and its declared pads with
    ``count_include_pad``; never the overhang of ``ceil_mode``).  The output sizes are
    ONNX shape inference's."""
    shape, out_shape = im.static_shape(x), im.shapes.get(node.output[0])
    if shape is None or out_shape is None or any(d is None for d in out_shape):
        raise im.error(node, "dilated average pooling needs the static input and output "
                       "shapes")
    kernel, stride, dil = g["kernel_size"], g["stride"], g["dilation"]
    n = len(kernel)
    spatial, out = shape[-n:], [int(d) for d in out_shape[-n:]]
    reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out, stride, kernel, dil)]
    extra = [max(r - (size + b + e), 0) for r, size, b, e in zip(reach, spatial, begins, ends)]
    ref = im.pad(node, im.tensor(x, node), shape, [0] * (len(shape) - n) + list(begins),
                 [0] * (len(shape) - n) + [e + x_ for e, x_ in zip(ends, extra)])
    total = None
    counted = np.zeros(out)
    lead = [{"slice": [None, None, None]}] * (len(shape) - n)
    for offset in itertools.product(*(range(k) for k in kernel)):
        index = lead + [{"slice": [o * d, o * d + (m - 1) * s + 1, s]}
                        for o, d, m, s in zip(offset, dil, out, stride)]
        piece = im.emit("getitem", [ref], {"index": index})
        total = piece if total is None else im.emit("add", [total, piece])
        # which of these taps count: inside the input, or inside its declared pads
        axes = []
        for o, d, m, s, size, b, e in zip(offset, dil, out, stride, spatial, begins, ends):
            at = np.arange(m) * s + o * d - b          # position in the unpadded input
            low, high = (-b, size + e) if include else (0, size)
            axes.append((at >= low) & (at < high))
        window = axes[0].astype(float)
        for a in axes[1:]:
            window = np.multiply.outer(window, a)
        counted += window
    divisor = 1.0 / np.maximum(counted, 1.0)
    im.bind(node, 0, im.emit("mul", [total, im.tensor(_C(divisor, "avg_pool_divisor"), node)],
                             name=im.out_name(node)))


def _exclude_pad_scale(spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                       begins: Sequence[int], ends: Sequence[int], ceil_mode: bool
                       ) -> np.ndarray:
    """Per output position: PyTorch's divisor over the padded input (windows clipped at
    its end) over the number of input elements in the window (ONNX's
    ``count_include_pad=0`` divisor)."""
    factors = []
    for size, k, s, b, e in zip(spatial, kernel, stride, begins, ends):
        padded = size + b + e
        out = (padded - k + ((s - 1) if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= padded:
            out -= 1
        starts = np.arange(out) * s
        stops = np.minimum(starts + k, padded)
        valid = np.minimum(stops, b + size) - np.maximum(starts, b)
        factors.append((stops - starts) / np.maximum(valid, 1))
    scale = factors[0]
    for f in factors[1:]:
        scale = np.multiply.outer(scale, f)
    return scale.astype(np.float32)


@handles("LpPool")
def _lppool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    p = float(im.attrs(node).get("p", 2))
    if any(d != 1 for d in g["dilation"]) or g["ceil_mode"]:
        raise im.error(node, "dilated or ceil_mode LpPool is not supported")
    ref = im.tensor(x, node)
    if not any(begins) and not any(ends) and p.is_integer() and int(p) % 2 == 0:
        args = {"norm_type": p, "kernel_size": g["kernel_size"], "stride": g["stride"]}
        im.bind(node, 0, im.add_layer(node, f"LPPool{n}d", args, {}, [ref]))
        return
    # (sum over the window of |x|^p)^(1/p) = (avgpool(|x|^p, zero padding) * k)^(1/p)
    powered = im.emit("pow", [im.emit("abs", [ref]), p])
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    if padding is None:
        powered = im.pad(node, powered, im.shape(x), [0, 0] + begins, [0, 0] + ends)
        padding = [0] * n
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "count_include_pad": True}
    pooled = im.add_layer(node, f"AvgPool{n}d", args, {}, [powered])
    total = im.emit("mul", [pooled, float(math.prod(g["kernel_size"]))])
    im.bind(node, 0, im.emit("pow", [total, 1.0 / p], name=im.out_name(node)))


@handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank not in (3, 4, 5):
        raise im.error(node, f"{node.op_type} needs an input of rank 3 to 5")
    kind = "Avg" if node.op_type == "GlobalAveragePool" else "Max"
    args: dict[str, Any] = {"output_size": 1}
    im.bind(node, 0, im.add_layer(node, f"Adaptive{kind}Pool{rank - 2}d", args, {},
                                  [im.tensor(x, node)]))


@handles("GlobalLpPool")
def _global_lp(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank is None or rank < 3:
        raise im.error(node, "GlobalLpPool needs an input of known rank >= 3")
    p = float(im.attrs(node).get("p", 2))
    ref = im.emit("pow", [im.emit("abs", [im.tensor(x, node)]), p])
    s = im.emit("sum", [ref], {"dim": list(range(2, rank)), "keepdim": True})
    im.bind(node, 0, im.emit("pow", [s, 1.0 / p], name=im.out_name(node)))
