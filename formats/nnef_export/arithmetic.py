"""Element-wise maths: NNEF's unary operations, add/sub (with ``alpha``), mul, div,
pow, maximum/minimum, the comparisons (logical results; ``or`` / ``and`` for PyTorch's
bool + and *), where (``select``), erf (a fragment) and PyTorch's rounding (round with
decimals, trunc, div with a rounding mode, floor_divide, remainder)."""

from __future__ import annotations

from typing import Any

from petab_sciml.catalogue import TRIGONOMETRIC

from .registry import function
from .writer import _Ident, _Writer

_UNARY = ("exp", "log", "sqrt", "abs", "neg", "sign", "sin", "cos", "floor", "ceil",
          *TRIGONOMETRIC)
"""Functions NNEF has under the same name, without arguments."""


@function(*_UNARY)
def _unary(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, node.function, x)


@function("erf")
def _erf(w: _Writer, node: Any, x: Any) -> _Ident:
    w.fragments.add("erf")
    return w.op(node.name, "erf", x)


@function("add", "sub", "mul")
def _add_sub_mul(w: _Writer, node: Any, x: Any) -> _Ident:
    base, b, f = node.name, node.bound, node.function
    if f != "sub" and w.is_logical(b["input"]) and w.is_logical(b["other"]):
        return _logical(w, node)
    left, right = w.operands(base, b["input"], b["other"])
    if f != "mul" and b["alpha"] != 1:
        right = w.op(f"{base}_alpha", "mul", right, float(b["alpha"]))
    return w.op(base, f, left, right)


def _logical(w: _Writer, node: Any) -> _Ident:
    """bool + bool is "or" in PyTorch, bool * bool "and"."""
    b = node.bound
    w.keep_logical = True
    try:
        left, right = w.operands(node.name, b["input"], b["other"])
    finally:
        w.keep_logical = False
    y = w.op(node.name, "or" if node.function == "add" else "and", left, right)
    w.logical.add(y.name)
    return y


@function("pow")
def _pow(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "pow", *w.operands(node.name, node.bound["input"],
                                             node.bound["exponent"]))


@function("maximum", "minimum")
def _extremum(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, node.function[:3], *w.operands(node.name, node.bound["input"],
                                                         node.bound["other"]))


@function("gt", "lt", "ge", "le", "eq")
def _compare(w: _Writer, node: Any, x: Any) -> _Ident:
    y = w.op(node.name, node.function, *w.operands(node.name, node.bound["input"],
                                                   node.bound["other"]))
    w.logical.add(y.name)
    return y


@function("where")
def _where(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    cond, a, c = w.aligned(node.name, [b["condition"], b["input"], b["other"]], logical=0)
    return w.op(node.name, "select", cond, a, c)


@function("round")
def _round(w: _Writer, node: Any, x: Any) -> _Ident:
    base = node.name
    if node.bound.get("decimals", 0) == 0:
        return w.op(base, "round", x)
    scale = 10.0 ** int(node.bound["decimals"])
    rounded = w.op(f"{base}_r", "round", w.op(f"{base}_s", "mul", x, scale))
    return w.op(base, "div", rounded, scale)


def _trunc(w: _Writer, base: str, x: Any) -> _Ident:
    """sign(x) * floor(|x|)."""
    floor = w.op(f"{base}_floor", "floor", w.op(f"{base}_abs", "abs", x))
    return w.op(base, "mul", w.op(f"{base}_sign", "sign", x), floor)


@function("trunc")
def _trunc_function(w: _Writer, node: Any, x: Any) -> _Ident:
    return _trunc(w, node.name, x)


@function("div", "floor_divide", "remainder")
def _divide(w: _Writer, node: Any, x: Any) -> _Ident:
    """a / d; floor (floor_divide, ``floor`` mode) or trunc of it; remainder
    a - d * floor(a / d) (the sign of the divisor, as PyTorch)."""
    base, b, f = node.name, node.bound, node.function
    if f == "div" and not b["rounding_mode"]:
        return w.op(base, "div", *w.operands(base, b["input"], b["other"]))
    a, d = w.operands(base, b["input"], b["other"])
    q = w.op(f"{base}_q", "div", a, d)
    if f == "remainder":
        floor = w.op(f"{base}_floor", "floor", q)
        return w.op(base, "sub", a, w.op(f"{base}_m", "mul", d, floor))
    if f == "div" and b["rounding_mode"] == "trunc":
        return _trunc(w, base, q)
    return w.op(base, "floor", q)
