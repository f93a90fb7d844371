"""DeformConv (2-D): a convolution whose taps sample the input at offsets the network
computes.

For each kernel tap and offset group, the sampling points (the tap's place in the padded,
strided, dilated grid plus the offsets ``(dy, dx)``) are read bilinearly with zeros
outside the input, as ONNX defines it (GridSample, linear, zeros, corner-aligned pixel
coordinates): per axis a weight matrix ``relu(1 - |p - j|)`` over the pixels ``j``,
contracted with the input (as in :mod:`.grid_sample`).  The sampled taps, times the
optional ``mask``, then meet the weight in one batched product per group, plus ``B``.
Gradients reach the input, the weight, the offsets, the mask and the bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C


def _tent(im: _Importer, node: Any, points: str, size: int) -> str:
    """``(N, P)`` pixel coordinates -> ``(N, P, size)`` bilinear weights (zero outside)."""
    grid = im.tensor(_C(np.arange(size, dtype=np.float64), "deform_positions"), node)
    distance = im.emit("abs", [im.emit("sub", [im.emit("unsqueeze", [points], {"dim": -1}),
                                               grid])])
    return im.emit("relu", [im.emit("sub", [1.0, distance])])


@handles("DeformConv")
def _deform_conv(im: _Importer, node: Any, ins: list) -> None:
    x_shape, w_shape = im.static_shape(ins[0]), im.static_shape(ins[1])
    o_shape = im.static_shape(ins[2])
    if x_shape is None or w_shape is None or o_shape is None or len(x_shape) != 4:
        raise im.error(node, "DeformConv needs the static shapes of X (N, C, H, W), W and "
                       "offset (2-D only, as ONNX's reference)")
    at = im.attrs(node)
    n, channels, height, width = x_shape
    out_channels, kh, kw = w_shape[0], w_shape[2], w_shape[3]
    group, offset_group = int(at.get("group", 1)), int(at.get("offset_group", 1))
    sh, sw = (int(s) for s in at.get("strides", [1, 1]))
    dh, dw = (int(d) for d in at.get("dilations", [1, 1]))
    top, left = (int(p) for p in at.get("pads", [0, 0, 0, 0])[:2])
    oh, ow = o_shape[2:]
    taps, points = kh * kw, oh * ow
    if channels != w_shape[1] * group or channels % offset_group or \
            o_shape[1] != offset_group * 2 * taps:
        raise im.error(node, f"X {list(x_shape)}, W {list(w_shape)} and offset "
                       f"{list(o_shape)} do not fit group={group}, offset_group={offset_group}")
    x = im.tensor(ins[0], node)
    offset = im.emit("reshape", [im.tensor(ins[2], node)],
                     {"shape": [n, offset_group, taps, 2, points]})
    mask = None
    if len(ins) > 4 and ins[4] is not None:
        mask = im.emit("reshape", [im.tensor(ins[4], node)],
                       {"shape": [n, offset_group, taps, points]})
    rows = np.repeat(np.arange(oh) * sh - top, ow).astype(np.float64)      # (P,)
    cols = np.tile(np.arange(ow) * sw - left, oh).astype(np.float64)
    per_group = channels // offset_group
    sampled_groups = []
    for g in range(offset_group):
        xg = im.emit("getitem", [x], {"index": [{"slice": [None, None, None]},
                                                {"slice": [g * per_group,
                                                           (g + 1) * per_group, None]}]})
        flat = im.emit("reshape", [xg], {"shape": [n, per_group * height, width]})
        tap_values = []
        for t in range(taps):
            i, j = divmod(t, kw)
            dy = im.emit("getitem", [offset], {"index": [{"slice": [None, None, None]}, g, t, 0]})
            dx = im.emit("getitem", [offset], {"index": [{"slice": [None, None, None]}, g, t, 1]})
            y = im.emit("add", [dy, im.tensor(_C(rows + i * dh, "deform_rows"), node)])
            xc = im.emit("add", [dx, im.tensor(_C(cols + j * dw, "deform_cols"), node)])
            along_w = im.emit("transpose", [_tent(im, node, xc, width)], {"dim0": 1, "dim1": 2})
            partial = im.emit("reshape", [im.emit("matmul", [flat, along_w])],
                              {"shape": [n, per_group, height, points]})     # (N, Cg, H, P)
            along_h = im.emit("transpose", [_tent(im, node, y, height)], {"dim0": 1, "dim1": 2})
            value = im.emit("sum", [im.emit("mul", [partial, im.emit(
                "unsqueeze", [along_h], {"dim": 1})])], {"dim": [2]})      # (N, Cg, P)
            if mask is not None:
                m = im.emit("getitem", [mask], {"index": [{"slice": [None, None, None]}, g, t]})
                value = im.emit("mul", [value, im.emit("unsqueeze", [m], {"dim": 1})])
            tap_values.append(value)
        sampled_groups.append(im.emit("stack", [tap_values], {"dim": 2}))   # (N, Cg, K, P)
    sampled = (sampled_groups[0] if offset_group == 1
               else im.emit("cat", [sampled_groups], {"dim": 1}))         # (N, C, K, P)
    columns = im.emit("reshape", [sampled], {"shape": [n, group, channels // group * taps,
                                                      points]})
    weight = im.emit("reshape", [im.tensor(ins[1], node)],
                     {"shape": [group, out_channels // group, channels // group * taps]})
    y_out = im.emit("reshape", [im.emit("matmul", [weight, columns])],
                    {"shape": [n, out_channels, oh, ow]})
    if len(ins) > 3 and ins[3] is not None:
        bias = im.emit("reshape", [im.tensor(ins[3], node)], {"shape": [out_channels, 1, 1]})
        y_out = im.emit("add", [y_out, bias], name=im.out_name(node))
    im.bind(node, 0, y_out, (n, out_channels, oh, ow))
