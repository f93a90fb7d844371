"""Activations with arguments or layers: ``elu``, ``leaky_relu``, ``selu``, ``softmax``,
``clamp`` and ``prelu`` (a PReLU layer where alpha is one value or one per channel)."""

from __future__ import annotations

from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .lifter import _aligned, _Array, _input, _Lifter, _out, _plain
from .registry import handles

_ATTRIBUTES = {"elu": {"alpha": "alpha"}, "leaky_relu": {"alpha": "negative_slope"}}
"""Activations whose NNEF attributes are catalogue arguments: NNEF name -> argument."""


@handles(*_ATTRIBUTES)
def _with_attrs(lf: _Lifter, op: Any) -> Tensor:
    function, attrs = op.name, _ATTRIBUTES[op.name]
    values = {"input": _plain(lf, _input(lf, op, "x"))}
    for nnef_name, name in attrs.items():
        if nnef_name in op.attribs:
            values[name] = float(op.attribs[nnef_name])
    return lf.call(function, values, base=_out(op))


@handles("selu")
def _selu(lf: _Lifter, op: Any) -> Tensor:
    alpha, lam = op.attribs.get("alpha", 1.67326319), op.attribs.get("lambda", 1.05070102)
    if abs(alpha - 1.6732632423543772) > 1e-6 or abs(lam - 1.0507009873554805) > 1e-6:
        raise lf.error("selu with non-default alpha or lambda is not supported")
    return lf.call("selu", {"input": _input(lf, op, "x")}, base=_out(op))


@handles("softmax")
def _softmax(lf: _Lifter, op: Any) -> Tensor:
    axes = list(op.attribs.get("axes", [1]))
    if len(axes) != 1:
        raise lf.error(f"softmax over several axes {axes} is not supported")
    return lf.call("softmax", {"input": _input(lf, op, "x"), "dim": axes[0]}, base=_out(op))


@handles("clamp")
def _clamp(lf: _Lifter, op: Any) -> Tensor:
    x, a, b = _input(lf, op, "x"), _input(lf, op, "a"), _input(lf, op, "b")
    for bound in (a, b):
        if isinstance(bound, _Array) and bound.data.size == 1:
            continue
        if not isinstance(bound, (int, float)):
            raise lf.error("clamp with tensor bounds is not supported")
    a = float(a.data.reshape(())) if isinstance(a, _Array) else float(a)
    b = float(b.data.reshape(())) if isinstance(b, _Array) else float(b)
    return lf.call("clamp", {"input": x, "min": a, "max": b}, base=_out(op))


@handles("prelu")
def _prelu(lf: _Lifter, op: Any) -> Tensor:
    x, alpha = _input(lf, op, "x"), _input(lf, op, "alpha")
    shape = lf.shape(op.inputs["x"])
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return lf.call("leaky_relu", {"input": x, "negative_slope": float(alpha)},
                       base=_out(op))
    if isinstance(alpha, _Array) and shape is not None and alpha.data.ndim <= len(shape):
        c = int(alpha.data.size)
        wide = [i for i, d in enumerate(alpha.data.shape) if d != 1]
        # PyTorch's PReLU: one weight, or one per channel on axis 1
        if c == 1 or (wide == [1] and shape[1] == c):
            args = {"num_parameters": c}
            owner = lf.shared([alpha])
            if owner is not None:
                return lf.reuse(owner, "PReLU", args, [x], _out(op))
            layer_id = lf.layer_id(_out(op), [alpha.base])
            lf.claim(alpha, layer_id, "weight", (c,))
            return lf.add_layer(layer_id, "PReLU", args, [x], _out(op))
    # NNEF's definition: select(x < 0, alpha * x, x)
    x, alpha = _aligned(lf, op, ("x", "alpha"))
    negative = lf.call("lt", {"input": x, "other": 0.0})
    scaled = lf.call("mul", {"input": alpha, "other": x})
    return lf.call("where", {"condition": negative, "input": scaled, "other": x},
                   base=_out(op))
