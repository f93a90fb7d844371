"""Conv and ConvTranspose whose weight (or bias) the network computes: a hypernetwork
writing another network's filters, or a filter that is a graph input.

Only initializers become PEtab parameters, so such a convolution is no layer; it still
runs, from the input's static shape: the (zero-padded) input's strided slices at every
kernel offset are stacked (``im2col``) and multiplied with the weight reshaped to a
matrix, one batched ``matmul`` per group.  A transposed convolution is the convolution of
the input with zeros inserted between its elements (a constant 0/1 matrix per axis),
padded by ``dilation * (kernel - 1)`` minus its pads, with the weight's channels swapped
per group and its taps flipped.  Gradients reach the input, the weight and the bias.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .importer import _Importer
from .resize import _along_axis


def computed_conv(im: _Importer, node: Any, x: Any, w: Any, b: Any, *, strides: Sequence[int],
                  dilations: Sequence[int], begins: Sequence[int], ends: Sequence[int],
                  group: int, name: str | None) -> str:
    """``conv(x, w) + b`` (ONNX Conv, zero padding ``begins``/``ends``), the weight and the
    bias runtime values or constants."""
    x_shape, w_shape = im.needed_shape(node, x, "the input"), im.needed_shape(node, w, "the weight")
    n = len(w_shape) - 2
    batch, channels, spatial = x_shape[0], x_shape[1], x_shape[2:]
    out_channels, kernel = w_shape[0], w_shape[2:]
    if channels != w_shape[1] * group or out_channels % group:
        raise im.error(node, f"weight {list(w_shape)} does not fit {channels} input channels "
                       f"in {group} group(s)")
    ref = im.pad(node, im.tensor(x, node), x_shape, [0, 0, *begins], [0, 0, *ends])
    padded = [s + b_ + e for s, b_, e in zip(spatial, begins, ends, strict=True)]
    out = [(p - d * (k - 1) - 1) // s + 1
           for p, d, k, s in zip(padded, dilations, kernel, strides, strict=True)]
    if any(o < 1 for o in out):
        raise im.error(node, f"the kernel {list(kernel)} (dilations {list(dilations)}) does not "
                       f"fit the padded input {padded}")
    taps = []
    for offset in itertools.product(*(range(k) for k in kernel)):
        index: list[Any] = [{"slice": [None, None, None]}] * 2
        for o, d, s, size in zip(offset, dilations, strides, out, strict=True):
            start = o * d
            index.append({"slice": [start, start + (size - 1) * s + 1, s]})
        taps.append(im.emit("getitem", [ref], {"index": index}))
    patches = taps[0] if len(taps) == 1 else im.emit("stack", [taps], {"dim": 2})
    taps_n, points = len(taps), math.prod(out)
    per_group = channels // group * taps_n
    patches = im.emit("reshape", [patches], {"shape": [batch, group, per_group, points]})
    weight = im.emit("reshape", [im.tensor(w, node)],
                     {"shape": [group, out_channels // group, per_group]})
    y = im.emit("matmul", [weight, patches])            # (N, G, M / G, P)
    shape = [batch, out_channels, *out]
    y = im.emit("reshape", [y], {"shape": shape}, name=None if b is not None else name)
    if b is not None:
        bias = im.emit("reshape", [im.tensor(b, node)], {"shape": [out_channels] + [1] * n})
        y = im.emit("add", [y, bias], name=name)
    return y


def computed_conv_transpose(im: _Importer, node: Any, x: Any, w: Any, b: Any, *,
                            strides: Sequence[int], dilations: Sequence[int],
                            begins: Sequence[int], ends: Sequence[int],
                            output_padding: Sequence[int], group: int, name: str | None
                            ) -> str:
    """ONNX ConvTranspose with a computed weight ``(C, M / G, k...)``: zeros inserted by
    ``strides``, padded, convolved with the flipped, channel-swapped weight."""
    x_shape, w_shape = im.needed_shape(node, x, "the input"), im.needed_shape(node, w, "the weight")
    n = len(w_shape) - 2
    channels, kernel = x_shape[1], w_shape[2:]
    if channels != w_shape[0] or channels % group:
        raise im.error(node, f"weight {list(w_shape)} does not fit {channels} input channels "
                       f"in {group} group(s)")
    ref = im.tensor(x, node)
    rank = n + 2
    for i, s in enumerate(strides):
        if s > 1:
            length = x_shape[2 + i]
            spread = np.zeros(((length - 1) * s + 1, length))
            spread[np.arange(length) * s, np.arange(length)] = 1.0
            ref = _along_axis(im, node, ref, 2 + i, rank, spread, None)
    spread_shape = (x_shape[0], channels,
                    *((L - 1) * s + 1 for L, s in zip(x_shape[2:], strides, strict=True)))
    reach = [d * (k - 1) for d, k in zip(dilations, kernel, strict=True)]
    pad_b = [r - p for r, p in zip(reach, begins, strict=True)]
    pad_e = [r - p + o for r, p, o in zip(reach, ends, output_padding, strict=True)]
    ref = im.pad(node, ref, spread_shape, [0, 0, *pad_b], [0, 0, *pad_e])
    padded_shape = (x_shape[0], channels,
                    *(s + pb + pe for s, pb, pe in zip(spread_shape[2:], pad_b, pad_e,
                                                       strict=True)))
    out_per_group = w_shape[1]
    weight = im.emit("reshape", [im.tensor(w, node)],
                     {"shape": [group, channels // group, out_per_group, *kernel]})
    weight = im.emit("transpose", [weight], {"dim0": 1, "dim1": 2})
    weight = im.emit("reshape", [weight], {"shape": [group * out_per_group,
                                                     channels // group, *kernel]})
    weight = im.emit("flip", [weight], {"dims": list(range(2, rank))})
    from .values import _T

    return computed_conv(im, node, _T(ref, padded_shape),
                         _T(weight, (group * out_per_group, channels // group, *kernel)), b,
                         strides=[1] * n, dilations=dilations, begins=[0] * n, ends=[0] * n,
                         group=group, name=name)
