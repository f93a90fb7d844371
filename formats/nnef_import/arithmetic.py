"""Element-wise maths: the unary operations, ``add`` ... ``max`` (with the patterns of
:mod:`.patterns`; ``min`` / ``max`` with a number are ``clamp``), ``rcp``, ``sqr``,
``rsqrt``, the comparisons, ``or`` / ``and`` and ``select``."""

from __future__ import annotations

from typing import Any

from petab_sciml.catalogue import TRIGONOMETRIC
from petab_sciml.formats.graph_building import Tensor

from .lifter import _aligned, _input, _Lifter, _out
from .patterns import _patterns
from .registry import handles

_UNARY = ("sigmoid", "tanh", "exp", "log", "sqrt", "neg", "gelu", "silu", "softplus",
          "sin", "cos", "floor", "ceil", "round", *TRIGONOMETRIC)
"""NNEF operations with a catalogue function of the same name and one operand."""


@handles(*_UNARY)
def _unary(lf: _Lifter, op: Any) -> Tensor:
    x = _input(lf, op, next(iter(op.inputs)))
    return lf.call(op.name, {"input": x}, base=_out(op))


@handles("add", "sub", "mul", "div", "pow", "min", "max")
def _binary(lf: _Lifter, op: Any) -> Any:
    function = op.name
    special = _patterns(lf, function, _input(lf, op, "x"), _input(lf, op, "y"), _out(op))
    if special is not None:
        return special
    x, y = _aligned(lf, op, ("x", "y"))
    if function in ("min", "max"):
        x, y = lf.tensor(x, function), lf.tensor(y, function)
        numbers = [v for v in (x, y) if not isinstance(v, Tensor)]
        if len(numbers) == 2:
            return float(min(x, y) if function == "min" else max(x, y))
        if not numbers:
            return lf.call("minimum" if function == "min" else "maximum",
                           {"input": x, "other": y}, base=_out(op))
        other = y if numbers[0] is x else x
        key = "max" if function == "min" else "min"
        return lf.call("clamp", {"input": other, key: float(numbers[0])}, base=_out(op))
    return lf.call(function, {"input": x, "other" if function != "pow" else "exponent": y},
                   base=_out(op))


@handles("gt", "lt", "ge", "le", "eq")
def _compare(lf: _Lifter, op: Any) -> Tensor:
    function = op.name
    x, y = _aligned(lf, op, ("x", "y"))
    node = lf.call(function, {"input": x, "other": y}, base=_out(op))
    lf.logical.add(node.name)
    return node


_LOGICAL = {"or": "add", "and": "mul"}


@handles(*_LOGICAL)
def _logical(lf: _Lifter, op: Any) -> Tensor:
    """``or`` / ``and`` of logical tensors: PyTorch's bool + bool / bool * bool."""
    function = _LOGICAL[op.name]
    x, y = _aligned(lf, op, ("x", "y"))
    for v in (x, y):
        if not (isinstance(v, Tensor) and v.name in lf.logical):
            raise lf.error(f"{op.name} of a value that is not a comparison")
    node = lf.call(function, {"input": x, "other": y}, base=_out(op))
    lf.logical.add(node.name)
    return node


@handles("select")
def _select(lf: _Lifter, op: Any) -> Any:
    condition, a, b = _aligned(lf, op, ("condition", "true_value", "false_value"))
    if isinstance(condition, bool):
        return a if condition else b
    node = lf.call("where", {"condition": condition, "input": a, "other": b}, base=_out(op))
    if all(isinstance(v, Tensor) and v.name in lf.logical for v in (a, b)):
        lf.logical.add(node.name)
    return node


@handles("rcp")
def _rcp(lf: _Lifter, op: Any) -> Tensor:
    return lf.call("div", {"input": 1.0, "other": _input(lf, op, "x")}, base=_out(op))


@handles("sqr")
def _sqr(lf: _Lifter, op: Any) -> Tensor:
    return lf.call("pow", {"input": _input(lf, op, "x"), "exponent": 2.0}, base=_out(op))


@handles("rsqrt")
def _rsqrt(lf: _Lifter, op: Any) -> Tensor:
    root = lf.call("sqrt", {"input": _input(lf, op, "x")})
    return lf.call("div", {"input": 1.0, "other": root}, base=_out(op))
