"""Element-wise arithmetic: Add, Sub, Mul, Div, Pow, Reciprocal, Sum/Mean/Max/Min,
comparisons, Sign, Where (with the softplus threshold pattern) and CumSum."""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _COMPARE, _Importer
from .registry import handles
from .values import _C, _T, _close, _f32, _Lazy

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


@handles("Reciprocal")
def _reciprocal(im: _Importer, node: Any, ins: list) -> None:
    im.bind(node, 0, im.emit("div", [1.0, im.tensor(ins[0], node)], name=im.out_name(node)))


@handles(*_BINARY)
def _binary(im: _Importer, node: Any, ins: list) -> None:
    a, b = ins[0], im.broadcast_old(node, ins[0], ins[1])
    if node.op_type == "Mul":
        for s, other in ((a, b), (b, a)):
            if isinstance(s, _Lazy) and s.kind == "sign" and _is_relu_abs(im, other, s.args[0]):
                im.alias(node, 0, s.args[0])  # sign(y) * relu(|y|) == y
                return
    fn = _BINARY[node.op_type]
    x = im.operand(a, node, b)
    y = im.operand(b, node, a)
    if not isinstance(x, str) and not isinstance(y, str):  # pragma: no cover - folded
        raise im.error(node, "both operands are numbers")
    im.bind(node, 0, im.emit(fn, [x, y], name=im.out_name(node)))


def _is_relu_abs(im: _Importer, v: Any, y: Any) -> bool:
    if not isinstance(v, _T) or not isinstance(y, _T):
        return False
    p = im.prov.get(v.ref)
    if not p or p[0] != "relu":
        return False
    q = im.prov.get(p[1][0])
    return bool(q) and q[0] == "abs" and q[1][0] == y.ref


@handles("Sum", "Mean", "Max", "Min")
def _variadic(im: _Importer, node: Any, ins: list) -> None:
    vals = [v for v in ins if v is not None]
    if len(vals) == 1:
        im.alias(node, 0, vals[0])
        return
    if node.op_type in ("Max", "Min"):  # numbers last: they become clamp bounds
        vals.sort(key=lambda v: isinstance(v, _C) and v.value.size == 1)
    acc = im.tensor(vals[0], node)
    for i, v in enumerate(vals[1:], start=1):
        last = i == len(vals) - 1 and node.op_type in ("Sum", "Max", "Min")
        name = im.out_name(node) if last else None
        other = im.operand(v, node, vals[0])
        if node.op_type in ("Sum", "Mean"):
            acc = im.emit("add", [acc, other], name=name)
        elif not isinstance(other, str):  # max(x, c) = clamp(x, min=c)
            bound = "min" if node.op_type == "Max" else "max"
            acc = im.emit("clamp", [acc], {bound: _f32(other)}, name=name)
        else:
            fn = "maximum" if node.op_type == "Max" else "minimum"
            acc = im.emit(fn, [acc, other], name=name)
    if node.op_type == "Mean":
        acc = im.emit("div", [acc, float(len(vals))], name=im.out_name(node))
    im.bind(node, 0, acc)


@handles(*_COMPARE)
def _compare(im: _Importer, node: Any, ins: list) -> None:
    b = im.broadcast_old(node, ins[0], ins[1])
    im.env[node.output[0]] = _Lazy("compare", (node.op_type, ins[0], b), node)


@handles("Sign")
def _sign(im: _Importer, node: Any, ins: list) -> None:
    im.env[node.output[0]] = _Lazy("sign", (ins[0],), node)


@handles("Where")
def _where(im: _Importer, node: Any, ins: list) -> None:
    cond, x, y = ins
    # softplus(x, beta, threshold) as PyTorch exporters write it:
    # Where(Greater(beta*x, threshold), x, Softplus(beta*x) / beta)
    if isinstance(cond, _Lazy) and cond.kind == "compare" and cond.args[0] == "Greater" \
            and isinstance(x, _T) and isinstance(y, _T):
        bx, thr = cond.args[1], im.array(cond.args[2])
        if isinstance(bx, _T) and thr is not None and thr.size == 1:
            beta = _softplus_beta(im, x.ref, bx.ref, y.ref)
            if beta is not None:
                im.bind(node, 0, im.emit("softplus", [x.ref], {
                    "beta": beta, "threshold": _f32(thr.reshape(()).item())},
                    name=im.out_name(node)))
                return
    if isinstance(cond, _C):  # a constant mask: a bool tensor from a float constant
        mask = _C(np.asarray(cond.value, dtype=np.float32), cond.name)
        c = im.emit("gt", [im.tensor(mask, node, hint="mask"), 0.5])
    else:
        c = im.tensor(cond, node)  # a comparison (or a bool tensor made of one)
    ranks = [r for r in (im.rank(cond), im.rank(x), im.rank(y)) if r is not None]
    top = _T("", (None,) * max(ranks)) if ranks else None
    a, b = im.operand(x, node, top), im.operand(y, node, top)
    im.bind(node, 0, im.emit("where", [c, a, b], name=im.out_name(node)))


def _softplus_beta(im: _Importer, x: str, bx: str, y: str) -> float | None:
    """beta if ``y`` is softplus(bx)/beta with bx = beta*x (beta = 1: either may be absent)."""
    mul_beta = 1.0
    if bx != x:
        p = im.prov.get(bx)
        if not p or p[0] != "mul" or x not in p[1]:
            return None
        other = [a for a in p[1] if a != x]
        if len(other) != 1 or isinstance(other[0], str):
            return None
        mul_beta = float(other[0])
    sp, div_beta = y, 1.0
    q = im.prov.get(y)
    if q and q[0] == "div" and not isinstance(q[1][1], str):
        sp, div_beta = q[1][0], float(q[1][1])
    r = im.prov.get(sp)
    if not r or r[0] != "softplus" or r[1][0] != bx or r[2] or not _close(mul_beta, div_beta):
        return None
    return _f32(mul_beta)


@handles("CumSum")
def _cumsum(im: _Importer, node: Any, ins: list) -> None:
    """CumSum; ``reverse`` on the flipped axis, ``exclusive`` minus the element itself."""
    at = im.attrs(node)
    axis = int(np.asarray(im.static(node, 1, "axis")).reshape(()))
    reverse, exclusive = bool(at.get("reverse")), bool(at.get("exclusive"))
    x = im.tensor(ins[0], node)
    name = im.out_name(node)
    src = im.emit("flip", [x], {"dims": [axis]}) if reverse else x
    y = im.emit("cumsum", [src], {"dim": axis}, name=None if reverse or exclusive else name)
    if exclusive:
        y = im.emit("sub", [y, src], name=None if reverse else name)
    if reverse:
        y = im.emit("flip", [y], {"dims": [axis]}, name=name)
    im.bind(node, 0, y)


@handles("Mod")
def _mod(im: _Importer, node: Any, ins: list) -> None:
    """Mod: ``fmod=0`` is PyTorch's ``remainder`` (the sign of the divisor), ``fmod=1``
    C's ``fmod`` (the sign of the dividend), ``x - trunc(x / y) * y``."""
    a, b = ins[0], ins[1]
    x, y = im.operand(a, node, b), im.operand(b, node, a)
    if not im.attrs(node).get("fmod", 0):
        im.bind(node, 0, im.emit("remainder", [x, y], name=im.out_name(node)))
        return
    quotient = im.emit("div", [x, y], {"rounding_mode": "trunc"})
    product = im.emit("mul", [quotient, y])
    im.bind(node, 0, im.emit("sub", [x, product], name=im.out_name(node)))
