"""Conv and ConvTranspose -> Conv1d/2d/3d and ConvTranspose1d/2d/3d layers (computed
weights: :mod:`.computed_conv`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .computed_conv import computed_conv, computed_conv_transpose
from .importer import _Importer
from .registry import handles


# ---------------------------------------------------------------- convolutions
def _conv_geometry(im: _Importer, node: Any, x: Any, kernel: Sequence[int],
                   transpose: bool = False) -> dict[str, Any]:
    at = im.attrs(node)
    n = len(kernel)
    strides = [int(s) for s in at.get("strides", [1] * n)]
    dil = [int(d) for d in at.get("dilations", [1] * n)]
    pads = [int(p) for p in at.get("pads", [0] * (2 * n))]
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER") and not transpose:
        shape = im.shape(x)
        spatial = None if shape is None else shape[-n:]
        if spatial is None or any(d is None for d in spatial):
            if all(s == 1 for s in strides) and auto == "SAME_UPPER":
                return {"strides": strides, "dil": dil, "same": True, "n": n,
                        "begins": [0] * n, "ends": [0] * n}
            raise im.error(node, f"auto_pad={auto} needs static input sizes")
        pads_b, pads_e = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dil):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        pads = pads_b + pads_e
    elif auto == "VALID":
        pads = [0] * (2 * n)
    return {"strides": strides, "dil": dil, "same": False, "n": n,
            "begins": pads[:n], "ends": pads[n:]}


def _layer_source(im: _Importer, node: Any, v: Any, what: str) -> tuple[np.ndarray, Any]:
    a = im.array(v)
    if a is None:
        raise im.error(node, f"the {what} is computed from the network inputs; only "
                       "initializer (or constant) weights are supported")
    return a, v


def _computed(im: _Importer, w: Any, b: Any) -> bool:
    """Whether the weight or the bias is computed by the network (no layer then)."""
    return im.array(w) is None or (b is not None and im.array(b) is None)


@handles("Conv")
def _conv(im: _Importer, node: Any, ins: list) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    if _computed(im, w, b):
        w_shape = im.static_shape(w)
        kernel = [] if w_shape is None else [int(k) for k in w_shape[2:]]
        g = _conv_geometry(im, node, x, kernel)
        if w_shape is None or g["same"]:
            raise im.error(node, "a convolution with a computed weight needs the static "
                           "shapes of its input and weight")
        im.bind(node, 0, computed_conv(
            im, node, x, w, b, strides=g["strides"], dilations=g["dil"], begins=g["begins"],
            ends=g["ends"], group=int(im.attrs(node).get("group", 1)),
            name=im.out_name(node)))
        return
    weight, wsrc = _layer_source(im, node, w, "weight")
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise im.error(node, f"{n}-D convolution is not supported (1-D to 3-D are)")
    kernel = [int(k) for k in weight.shape[2:]]
    g = _conv_geometry(im, node, x, kernel)
    group = int(im.attrs(node).get("group", 1))
    ref = im.tensor(x, node)
    sym = [min(b_, e_) for b_, e_ in zip(g["begins"], g["ends"])]
    extra_b = [b_ - s for b_, s in zip(g["begins"], sym)]
    extra_e = [e_ - s for e_, s in zip(g["ends"], sym)]
    if any(extra_b) or any(extra_e):  # zero-pad the asymmetric rest explicitly
        ref = im.pad(node, ref, im.shape(x), [0, 0] + extra_b, [0, 0] + extra_e)
    args: dict[str, Any] = {
        "in_channels": int(weight.shape[1] * group), "out_channels": int(weight.shape[0]),
        "kernel_size": kernel, "stride": g["strides"],
        "padding": "same" if g["same"] else sym, "dilation": g["dil"], "groups": group,
        "bias": b is not None,
    }
    arrays = {"weight": (weight, wsrc, "")}
    if b is not None:
        arrays["bias"] = (*_layer_source(im, node, b, "bias"), "")
    im.bind(node, 0, im.add_layer(node, f"Conv{n}d", args, arrays, [ref]))


@handles("ConvTranspose")
def _conv_transpose(im: _Importer, node: Any, ins: list) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    computed = _computed(im, w, b)
    if computed:
        w_shape = im.static_shape(w)
        if w_shape is None:
            raise im.error(node, "a transposed convolution with a computed weight needs the "
                           "static shape of its weight")
        weight, wsrc = np.zeros(w_shape), None
    else:
        weight, wsrc = _layer_source(im, node, w, "weight")
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise im.error(node, f"{n}-D transposed convolution is not supported")
    at = im.attrs(node)
    kernel = [int(k) for k in weight.shape[2:]]
    group = int(at.get("group", 1))
    g = _conv_geometry(im, node, x, kernel, transpose=True)
    out_pad = [int(p) for p in at.get("output_padding", [0] * n)]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = im.static_shape(x)
        if shape is None:
            raise im.error(node, "output_shape/auto_pad needs static input sizes")
        spatial = shape[-n:]
        target = [int(t) for t in at["output_shape"]][-n:] if "output_shape" in at else \
            [s * st for s, st in zip(spatial, g["strides"])]
        begins, ends = [], []
        for i in range(n):
            full = g["strides"][i] * (spatial[i] - 1) + out_pad[i] + \
                (kernel[i] - 1) * g["dil"][i] + 1
            total = full - target[i]
            if total < 0:
                out_pad[i] += -total
                total = 0
            if auto == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                ends.append(total // 2)
                begins.append(total - total // 2)
        g["begins"], g["ends"] = begins, ends
    if computed:
        im.bind(node, 0, computed_conv_transpose(
            im, node, x, w, b, strides=g["strides"], dilations=g["dil"], begins=g["begins"],
            ends=g["ends"], output_padding=out_pad, group=group, name=im.out_name(node)))
        return
    for i in range(n):
        if out_pad[i] and out_pad[i] >= max(g["strides"][i], g["dil"][i]):
            raise im.error(node, f"output_padding {out_pad[i]} must be smaller than the stride "
                           "or the dilation (a PyTorch restriction)")
    sym = [min(b_, e_) for b_, e_ in zip(g["begins"], g["ends"])]
    args: dict[str, Any] = {
        "in_channels": int(weight.shape[0]), "out_channels": int(weight.shape[1] * group),
        "kernel_size": kernel, "stride": g["strides"], "padding": sym,
        "output_padding": out_pad, "groups": group, "bias": b is not None,
        "dilation": g["dil"],
    }
    arrays = {"weight": (weight, wsrc, "")}
    if b is not None:
        arrays["bias"] = (*_layer_source(im, node, b, "bias"), "")
    ref = im.add_layer(node, f"ConvTranspose{n}d", args, arrays, [im.tensor(x, node)])
    # Asymmetric pads: crop the rest from the output.
    for i in range(n):
        cb, ce = g["begins"][i] - sym[i], g["ends"][i] - sym[i]
        if cb or ce:
            ref = im.slice_axis(ref, node, 2 + i, cb or None, -ce if ce else None, n + 2)
    im.bind(node, 0, ref)
