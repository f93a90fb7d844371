"""Element-wise maths: the unary ops (Neg, Exp, Log, ...), Add/Sub/Mul/Div/Pow (with
``alpha``), Max/Min, the comparisons (bool results), Where, and PyTorch's rounding
(round with decimals, trunc, div with a rounding mode, floor_divide, remainder)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from petab_sciml.catalogue import TRIGONOMETRIC
from petab_sciml.network import Ref

from .exporter import COMPARE_OPS, _Exporter
from .registry import function

_UNARY = {"neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "abs": "Abs",
          "erf": "Erf", "sign": "Sign", "sin": "Sin", "cos": "Cos", "floor": "Floor",
          "ceil": "Ceil", **{name: name.capitalize() for name in TRIGONOMETRIC}}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow"}


@function(*_UNARY)
def _unary(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op(_UNARY[fn], [ex.input(b)])


def _arith(ex: _Exporter, op: str, b: Mapping[str, Any]) -> str:
    """``op(input, alpha * other)`` (``other`` is ``exponent`` for pow)."""
    a = ex.operand(b["input"])
    other_v = b["other"] if "other" in b else b["exponent"]
    alpha = b.get("alpha", 1)
    if alpha != 1 and not isinstance(other_v, Ref):
        other = ex.const(float(other_v) * float(alpha))
    else:
        other = ex.operand(other_v)
        if alpha != 1:
            other = ex.op("Mul", [other, ex.const(float(alpha))])
    return ex.op(op, [a, other])


@function(*_BINARY)
def _binary(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _arith(ex, _BINARY[fn], b)


@function("maximum", "minimum")
def _extremum(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Max" if fn == "maximum" else "Min", [ex.input(b), ex.operand(b["other"])])


@function(*COMPARE_OPS)
def _compare(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op(COMPARE_OPS[fn], [ex.operand(b["input"]), ex.operand(b["other"])])


@function("where")
def _where(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    cond = ex.value[b["condition"].name]
    if cond not in ex.bools:
        raise ex.error("the condition of where must be a comparison (a bool tensor)")
    return ex.op("Where", [cond, ex.operand(b["input"]), ex.operand(b["other"])])


@function("div", "floor_divide")
def _divide(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    """Div, then Floor (``floor``, floor_divide) or sign(q) * floor(|q|) (``trunc``)."""
    rounding_mode = b["rounding_mode"] if fn == "div" else "floor"
    q = _arith(ex, "Div", b)
    if rounding_mode == "floor":
        return ex.op("Floor", [q])
    if rounding_mode == "trunc":
        return _trunc(ex, q)
    return q


def _trunc(ex: _Exporter, q: str) -> str:
    return ex.op("Mul", [ex.op("Sign", [q]), ex.op("Floor", [ex.op("Abs", [q])])])


@function("trunc")
def _trunc_function(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _trunc(ex, ex.input(b))


@function("round")
def _round(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    if not b["decimals"]:
        return ex.op("Round", [x])  # half to even, as PyTorch
    scale = ex.const(10.0 ** int(b["decimals"]))
    return ex.op("Div", [ex.op("Round", [ex.op("Mul", [x, scale])]), scale])


@function("remainder")
def _remainder(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    """PyTorch's remainder (the sign of the divisor): a - b * floor(a / b)."""
    a, d = ex.operand(b["input"]), ex.operand(b["other"])
    return ex.op("Sub", [a, ex.op("Mul", [d, ex.op("Floor", [ex.op("Div", [a, d])])])])
