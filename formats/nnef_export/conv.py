"""Conv1d/2d/3d (``conv``; circular padding as concatenated slices, NNEF has no such
border) and ConvTranspose1d/2d/3d (``deconv``, with output padding beyond the padding
as a zero ``pad`` plus the bias); unbatched inputs get a batch axis for the operation."""

from __future__ import annotations

from petab_sciml.catalogue import as_tuple

from ..export_common import conv_padding
from .indexing import pad_axis
from .registry import layer
from .writer import LayerCall, _Ident, _Writer

_BORDERS = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate"}
"""PyTorch padding modes -> NNEF borders (circular has none)."""


@layer("Conv1d", "Conv2d", "Conv3d")
def _conv_layer(w: _Writer, call: LayerCall) -> _Ident:
    return w.batched(call, _conv)


def _conv(w: _Writer, call: LayerCall) -> _Ident:
    lay, base, x, in_shape = call.layer, call.base, call.x, call.in_shape
    cfg, n = lay.config, lay.spec.spatial_dims
    d = list(as_tuple(cfg["dilation"], n))
    s = list(as_tuple(cfg["stride"], n))
    pad = conv_padding(cfg, n)
    border = _BORDERS.get(cfg["padding_mode"])
    if border is None:  # circular: wrap by concatenation
        size = list(in_shape)
        for i, (before, after) in enumerate(pad):
            axis = len(in_shape) - n + i
            x = pad_axis(w, f"{base}_wrap{i}", x, size, axis, before, after, "circular", 0.0)
            size[axis] += before + after
        border, pad = "constant", [(0, 0)] * n
    weight = w.array(lay.id, "weight")
    b = w.array(lay.id, "bias", (1, cfg["out_channels"])) if cfg["bias"] else 0.0
    return w.op(base, "conv", x, weight, b, border=border,
                padding=pad, stride=s, dilation=d, groups=cfg["groups"])


@layer("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
def _deconv_layer(w: _Writer, call: LayerCall) -> _Ident:
    return w.batched(call, _deconv)


def _deconv(w: _Writer, call: LayerCall) -> _Ident:
    lay, base, x = call.layer, call.base, call.x
    cfg, n = lay.config, lay.spec.spatial_dims
    p = list(as_tuple(cfg["padding"], n))
    op_ = list(as_tuple(cfg["output_padding"], n))
    weight = w.array(lay.id, "weight")
    c = cfg["out_channels"]
    attrs = {"stride": list(as_tuple(cfg["stride"], n)),
             "dilation": list(as_tuple(cfg["dilation"], n)), "groups": cfg["groups"]}
    if all(o <= pi for o, pi in zip(op_, p)):
        b = w.array(lay.id, "bias", (1, c)) if cfg["bias"] else 0.0
        return w.op(base, "deconv", x, weight, b, border="constant",
                    padding=[(pi, pi - o) for pi, o in zip(p, op_)], **attrs)
    # output_padding beyond the padding: positions past the full transposed
    # convolution, which get no input (zeros) but still the bias
    y = w.op(f"{base}_full", "deconv", x, weight, 0.0, border="constant",
             padding=[(pi, max(pi - o, 0)) for pi, o in zip(p, op_)], **attrs)
    lead = len(call.out_shape) - n
    y = w.op(base if not cfg["bias"] else f"{base}_padded", "pad", y,
             padding=[(0, 0)] * lead + [(0, max(o - pi, 0)) for pi, o in zip(p, op_)],
             border="constant", value=0.0)
    if cfg["bias"]:
        y = w.op(base, "add", y, w.array(lay.id, "bias", [1, c] + [1] * n))
    return y
