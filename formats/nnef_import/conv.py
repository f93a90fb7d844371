"""``conv`` -> ConvNd (automatic padding, ``same``, borders as padding modes) and
``deconv`` -> ConvTransposeNd (asymmetric padding as output padding)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .lifter import _Array, _input, _Lifter, _out
from .linear import _bias
from .registry import handles


def _window(lf: _Lifter, op: Any, n: int) -> tuple[list[int], list[int], list[tuple]]:
    """Spatial stride, dilation (defaults 1) and padding pairs of a conv-like op."""
    stride = list(op.attribs.get("stride") or [1] * n)
    dilation = list(op.attribs.get("dilation") or [1] * n)
    padding = [tuple(p) for p in op.attribs.get("padding") or []]
    return stride, dilation, padding


def _auto_padding(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                  dilation: Sequence[int]) -> list[tuple[int, int]]:
    """NNEF's automatic padding (TF 'SAME': extra element at the end)."""
    out = []
    for size, k, s, d in zip(sizes, kernel, stride, dilation):
        total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
        out.append((total // 2, total - total // 2))
    return out


@handles("conv")
def _conv(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "conv filter")
    n = weight.data.ndim - 2
    if n not in (1, 2, 3):
        raise lf.error(f"conv with {n} spatial dimensions is not supported")
    stride, dilation, padding = _window(lf, op, n)
    kernel = list(weight.data.shape[2:])
    groups = int(op.attribs.get("groups", 1))
    in_shape = lf.shape(op.inputs["input"])
    out_ch, in_per_group = weight.data.shape[:2]
    if groups == 0:
        groups = int(in_shape[1]) if in_shape else out_ch
    if not padding:
        if stride == [1] * n:
            pad: Any = "same"
        elif in_shape is None:
            raise lf.error("automatic conv padding with strides needs known shapes")
        else:
            padding = _auto_padding(in_shape[2:], kernel, stride, dilation)
    if padding:
        if all(p == q for p, q in padding):
            pad = [p for p, _ in padding]
        elif stride == [1] * n and all(
                (p, q) == (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                for (p, q), k, d in zip(padding, kernel, dilation)):
            pad = "same"
        else:
            raise lf.error(f"asymmetric conv padding {padding} is not supported")
    border = op.attribs.get("border", "constant")
    modes = {"constant": "zeros", "ignore": "zeros", "reflect": "reflect",
             "replicate": "replicate"}
    if border not in modes:
        raise lf.error(f"conv border {border!r} is not supported")
    bias_value = _input(lf, op, "bias")
    padded = pad == "same" or any(pad)
    args = {"in_channels": int(in_per_group * groups), "out_channels": int(out_ch),
            "kernel_size": _one(kernel), "stride": _one(stride), "padding": _one(pad),
            "dilation": _one(dilation), "groups": groups,
            "bias": isinstance(bias_value, _Array),
            "padding_mode": modes[border] if padded else "zeros"}
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    _bias(lf, bias_value, layer_id, out_ch)
    return lf.add_layer(layer_id, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))


def _one(values: Any) -> Any:
    """``[3, 3]`` -> ``3`` (PyTorch's spelling when all sizes agree)."""
    if isinstance(values, list) and values and all(v == values[0] for v in values):
        return int(values[0])
    return [int(v) for v in values] if isinstance(values, list) else values


@handles("deconv")
def _deconv(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "deconv filter")
    n = weight.data.ndim - 2
    stride, dilation, padding = _window(lf, op, n)
    groups = int(op.attribs.get("groups", 1))
    if groups == 0:
        raise lf.error("deconv with groups=0 is not supported")
    if op.attribs.get("output_shape"):
        raise lf.error("deconv with an explicit output_shape is not supported")
    if not padding:
        padding = [(0, 0)] * n
    if any(q > p for p, q in padding):
        raise lf.error(f"deconv padding {padding} (right above left) is not supported")
    in_ch, out_per_group = weight.data.shape[:2]
    bias_value = _input(lf, op, "bias")
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    has_bias = _bias(lf, bias_value, layer_id, out_per_group * groups)
    args = {"in_channels": int(in_ch), "out_channels": int(out_per_group * groups),
            "kernel_size": _one(list(weight.data.shape[2:])), "stride": _one(stride),
            "padding": _one([p for p, _ in padding]),
            "output_padding": _one([p - q for p, q in padding]), "groups": groups,
            "bias": has_bias, "dilation": _one(dilation)}
    return lf.add_layer(layer_id, f"ConvTranspose{n}d", args, [_input(lf, op, "input")],
                        _out(op))
