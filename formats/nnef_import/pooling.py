"""``max_pool`` / ``avg_pool`` -> MaxPoolNd / AvgPoolNd: windows over the batch and
channel axes dropped, asymmetric padding as ``ceil_mode`` where PyTorch's output sizes
agree, the ``border`` as ``count_include_pad``."""

from __future__ import annotations

import math
from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .conv import _auto_padding, _one
from .lifter import _input, _Lifter, _out
from .registry import handles


def _torch_pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


@handles("max_pool", "avg_pool")
def _pool(lf: _Lifter, op: Any) -> Tensor:
    kind = "max" if op.name == "max_pool" else "avg"
    size = list(op.attribs["size"])
    rank = len(size)
    in_shape = lf.shape(op.inputs["input"])
    stride = list(op.attribs.get("stride") or [1] * rank)
    dilation = list(op.attribs.get("dilation") or [1] * rank)
    padding = [tuple(p) for p in op.attribs.get("padding") or []]
    if in_shape is not None and rank > len(in_shape):
        # nnef_tools writes windows of rank N+2 for unbatched inputs: drop the extra
        extra = rank - len(in_shape)
        if any(v != 1 for v in size[:extra] + stride[:extra] + dilation[:extra]):
            raise lf.error(f"pool window {size} does not fit an input of shape {in_shape}")
        size, stride, dilation = size[extra:], stride[extra:], dilation[extra:]
        padding = padding[-len(in_shape):] if padding else padding
        rank = len(in_shape)
    border = op.attribs.get("border", "constant")
    if not padding:
        if in_shape is None:
            raise lf.error("automatic pool padding needs known shapes")
        padding = _auto_padding(in_shape, size, stride, dilation)
    trivial = 0  # leading dimensions the window does not touch (batch, channel)
    while trivial < rank and size[trivial] == 1 and stride[trivial] == 1 and (
            dilation[trivial] == 1 and tuple(padding[trivial]) == (0, 0)):
        trivial += 1
    first = max(min(trivial, 2), rank - 3)
    n = rank - first
    if first < 1 or n < 1 or any(
            v != 1 for v in size[:first] + stride[:first] + dilation[:first]) or any(
            tuple(p) != (0, 0) for p in padding[:first]):
        raise lf.error("pooling over the batch or channel dimension is not supported")
    k, s, d = size[first:], stride[first:], dilation[first:]
    pads = padding[first:]
    ceil = any(p != q for p, q in pads)
    if any(q < p for p, q in pads):
        raise lf.error(f"pool padding {pads} (left above right) is not supported")
    if ceil:
        if in_shape is None:
            raise lf.error("asymmetric pool padding (ceil_mode) needs known shapes")
        for size_i, ki, si, di, (p, q) in zip(in_shape[first:], k, s, d, pads):
            nnef_out = (size_i + p + q - di * (ki - 1) - 1) // si + 1
            if _torch_pool_out(size_i, ki, si, p, di, True) != nnef_out:
                raise lf.error(f"asymmetric pool padding {pads} is not PyTorch's "
                               "ceil_mode for these sizes")
    pad = [p for p, _ in pads]
    layer_stride = None if s == k else _one(s)
    if kind == "max":
        if border not in ("ignore", "constant") or (border == "constant" and any(
                p or q for p, q in pads)):
            raise lf.error(f"max_pool with border {border!r} and padding is not supported "
                           "(PyTorch pads with -inf: border 'ignore')")
        args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                "dilation": _one(d), "ceil_mode": ceil}
        layer_type = f"MaxPool{n}d"
    else:
        if any(v != 1 for v in d):
            raise lf.error("avg_pool with dilation is not supported")
        args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                "ceil_mode": ceil}
        any_pad = any(p or q for p, q in pads)
        if border == "ignore":
            args["count_include_pad"] = not any_pad
        elif border == "constant":
            args["count_include_pad"] = True
            if ceil:  # NNEF counts the overhang as zeros: divide by the full window
                if n == 1:
                    raise lf.error("avg_pool with a zero border and asymmetric padding "
                                   "has no 1-d PyTorch equivalent")
                args["divisor_override"] = int(math.prod(k))
        else:
            raise lf.error(f"avg_pool border {border!r} is not supported")
        layer_type = f"AvgPool{n}d"
    layer_id = lf.layer_id(_out(op), [])
    return lf.add_layer(layer_id, layer_type, args, [_input(lf, op, "input")], _out(op))
