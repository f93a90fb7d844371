"""Operations that may start a pattern completed later: ``relu``, ``abs``, ``sign`` and
``erf`` leave markers (:class:`~.lifter._Marker`) that :func:`_patterns` completes:
``sign(a) * relu(abs(a)) = a`` and the erf chain of GELU."""

from __future__ import annotations

import math
from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .lifter import _input, _Lifter, _Marker, _out, _plain
from .registry import handles


@handles("relu")
def _relu(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    if isinstance(x, _Marker) and x.kind == "abs":
        return _Marker("relu_abs", x.of, lf.call("relu", {"input": Tensor(x.node)},
                                                     base=_out(op)).name)
    return lf.call("relu", {"input": x}, base=_out(op))


@handles("abs")
def _abs(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    node = lf.call("abs", {"input": x}, base=_out(op))
    return _Marker("abs", x, node.name) if isinstance(x, Tensor) else node


@handles("sign")
def _sign(lf: _Lifter, op: Any) -> Any:
    # computed now (pruned if only the sign(x) * relu(abs(x)) = x identity uses it)
    x = _input(lf, op, "x")
    node = lf.call("sign", {"input": x}, base=_out(op))
    return _Marker("sign", x, node.name) if isinstance(x, Tensor) else node


@handles("erf")
def _erf(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    node = lf.call("erf", {"input": x}, base=_out(op))
    if isinstance(x, _Marker) and x.kind == "div_sqrt2":
        return _Marker("erf", x.of, node.name)
    return node


def _is_number(value: Any, target: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(
        float(value) - target) <= 1e-6 * max(1.0, abs(target))


def _patterns(lf: _Lifter, function: str, x: Any, y: Any, base: str) -> Any:
    """Partial patterns: sign(a) * relu(abs(a)) = a; x * (erf(x/sqrt 2) + 1) * 0.5 = gelu.
    Partial results are computed too (pruned when the pattern completes), so that other
    uses of them are ordinary values."""

    def mark(kind: str, of: Any) -> _Marker:
        other = "other" if function != "pow" else "exponent"
        node = lf.call(function, {"input": _plain(lf, x), other: _plain(lf, y)}, base=base)
        return _Marker(kind, of, node.name)

    pairs = [(x, y), (y, x)] if function in ("mul", "add") else [(x, y)]
    for a, b in pairs:
        if function == "div" and isinstance(a, Tensor) and _is_number(b, math.sqrt(2.0)):
            return mark("div_sqrt2", a)
        if function == "mul" and isinstance(a, Tensor) and _is_number(b, 1 / math.sqrt(2.0)):
            return mark("div_sqrt2", a)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "sign" and isinstance(
                b, _Marker) and b.kind in ("abs", "relu_abs") and b.of == a.of:
            return a.of
        if function == "add" and isinstance(a, _Marker) and a.kind == "erf" and _is_number(b, 1):
            return mark("erf1", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1" and b == a.of:
            return mark("gelu2", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1" and _is_number(
                b, 0.5):
            return mark("erf1_half", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1_half" and b == a.of:
            return lf.call("gelu", {"input": a.of})
        if function == "mul" and isinstance(a, _Marker) and a.kind == "gelu2" and _is_number(
                b, 0.5):
            return lf.call("gelu", {"input": a.of})
        if function == "div" and isinstance(a, _Marker) and a.kind == "gelu2" and _is_number(
                b, 2.0):
            return lf.call("gelu", {"input": a.of})
    return None
