"""Activations: Relu and the other unary maths, Elu, Celu, LeakyRelu, Selu, HardSigmoid,
Gelu (also the Erf chain exporters write for it), Clip, Softmax, LogSoftmax, Hardmax,
Shrink and PRelu (a PReLU layer where the slope is a parameter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from petab_sciml.catalogue import TRIGONOMETRIC

from .importer import _Importer
from .registry import handles
from .values import _C, _P, _T, _close, _f32, _Lazy

_UNARY = {
    "Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Abs": "abs", "Neg": "neg", "Softsign": "softsign", "Softplus": "softplus",
    "HardSwish": "hardswish", "Mish": "mish", "Sin": "sin", "Cos": "cos",
    "Floor": "floor", "Ceil": "ceil", "Round": "round",
    **{name.capitalize(): name for name in TRIGONOMETRIC},
}
_SELU_ALPHA = 1.6732632423543772
_SELU_GAMMA = 1.0507009873554805


@handles(*_UNARY)
def _unary(im: _Importer, node: Any, ins: list) -> None:
    x = im.tensor(ins[0], node)
    im.bind(node, 0, im.emit(_UNARY[node.op_type], [x], name=im.out_name(node)))


@handles("Shrink")
def _shrink(im: _Importer, node: Any, ins: list) -> None:
    """``x - bias`` above ``lambd``, ``x + bias`` below ``-lambd``, 0 between."""
    at = im.attrs(node)
    lambd, bias = _f32(at.get("lambd", 0.5)), _f32(at.get("bias", 0.0))
    x = im.tensor(ins[0], node)
    low = im.emit("where", [im.emit("lt", [x, -lambd]), im.emit("add", [x, bias]), 0.0])
    im.bind(node, 0, im.emit("where", [im.emit("gt", [x, lambd]), im.emit("sub", [x, bias]),
                                       low], name=im.out_name(node)))


@handles("Elu", "Celu")
def _elu(im: _Importer, node: Any, ins: list) -> None:
    alpha = _f32(im.attrs(node).get("alpha", 1.0))
    im.bind(node, 0, im.emit(node.op_type.lower(), [im.tensor(ins[0], node)],
                             {"alpha": alpha}, name=im.out_name(node)))


@handles("LeakyRelu")
def _leaky(im: _Importer, node: Any, ins: list) -> None:
    alpha = _f32(im.attrs(node).get("alpha", 0.01))
    im.bind(node, 0, im.emit("leaky_relu", [im.tensor(ins[0], node)],
                             {"negative_slope": alpha}, name=im.out_name(node)))


@handles("Selu")
def _selu(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    alpha, gamma = a.get("alpha", _SELU_ALPHA), a.get("gamma", _SELU_GAMMA)
    x = im.tensor(ins[0], node)
    if _close(alpha, _SELU_ALPHA, 1e-6) and _close(gamma, _SELU_GAMMA, 1e-6):
        im.bind(node, 0, im.emit("selu", [x], name=im.out_name(node)))
        return
    e = im.emit("elu", [x], {"alpha": _f32(alpha)})
    im.bind(node, 0, im.emit("mul", [e, _f32(gamma)], name=im.out_name(node)))


@handles("HardSigmoid")
def _hardsigmoid(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    alpha, beta = a.get("alpha", 0.2), a.get("beta", 0.5)
    x = im.tensor(ins[0], node)
    if _close(alpha, 1 / 6, 1e-6) and _close(beta, 0.5, 1e-6):
        im.bind(node, 0, im.emit("hardsigmoid", [x], name=im.out_name(node)))
        return
    y = im.emit("add", [im.emit("mul", [x, _f32(alpha)]), _f32(beta)])
    im.bind(node, 0, im.emit("clamp", [y], {"min": 0.0, "max": 1.0}, name=im.out_name(node)))


@handles("Gelu")
def _gelu(im: _Importer, node: Any, ins: list) -> None:
    approx = im.attrs(node).get("approximate", "none")
    im.bind(node, 0, im.emit("gelu", [im.tensor(ins[0], node)], {"approximate": approx},
                             name=im.out_name(node)))


@handles("Clip")
def _clip(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    if im.opset < 11:
        lo, hi = a.get("min"), a.get("max")
    elif any(_computed(im, node, i) for i in (1, 2)):
        _clip_computed(im, node, ins)
        return
    else:
        lo = im.static(node, 1, "min")
        hi = im.static(node, 2, "max")
    lo = None if lo is None else _f32(np.asarray(lo).reshape(()).item())
    hi = None if hi is None else _f32(np.asarray(hi).reshape(()).item())
    x = ins[0]
    if lo is None and hi is None:
        im.alias(node, 0, x)
        return
    # the activations PyTorch exports as Clip (mobilenet's relu6): in the specification's
    # function list, so the network stays portable, where a clamp is not
    named = {(0.0, 6.0): "relu6", (0.0, None): "relu"}.get((lo, hi))
    if named is not None:
        im.bind(node, 0, im.emit(named, [im.tensor(x, node)], name=im.out_name(node)))
        return
    im.bind(node, 0, im.emit("clamp", [im.tensor(x, node)], {"min": lo, "max": hi},
                             name=im.out_name(node)))


def _computed(im: _Importer, node: Any, index: int) -> bool:
    """Whether input ``index`` of ``node`` is present and computed from network inputs."""
    if index >= len(node.input) or not node.input[index]:
        return False
    return im.array(im.value(node.input[index], node)) is None


def _clip_computed(im: _Importer, node: Any, ins: list) -> None:
    """Clip with a bound computed by the network: ``min(max(x, lo), hi)`` as ONNX defines
    it, each bound a ``clamp`` where it is a constant and ``maximum``/``minimum`` where
    it is computed."""
    t = im.tensor(ins[0], node)
    for index, (name, fn, key) in {1: ("min", "maximum", "min"),
                                   2: ("max", "minimum", "max")}.items():
        if index >= len(node.input) or not node.input[index]:
            continue
        last = index == 2 or len(node.input) < 3 or not node.input[2]
        out = {"name": im.out_name(node)} if last else {}
        if _computed(im, node, index):
            t = im.emit(fn, [t, im.tensor(ins[index], node)], **out)
        else:
            bound = _f32(np.asarray(im.static(node, index, name)).reshape(()).item())
            t = im.emit("clamp", [t], {key: bound}, **out)
    im.bind(node, 0, t)


@handles("Softmax", "LogSoftmax")
def _softmax(im: _Importer, node: Any, ins: list) -> None:
    fn = "softmax" if node.op_type == "Softmax" else "log_softmax"
    x = ins[0]
    rank = im.rank(x)
    axis = im.attrs(node).get("axis", -1 if im.opset >= 13 else 1)
    ref = im.tensor(x, node)
    if im.opset >= 13:
        im.bind(node, 0, im.emit(fn, [ref], {"dim": axis}, name=im.out_name(node)))
        return
    # Opsets < 13: softmax over the input coerced to 2-D at ``axis`` (over all axes from
    # ``axis`` on, jointly).
    if rank is None:
        raise im.error(node, f"{node.op_type} before opset 13 needs the input rank")
    axis = im.norm_axis(node, axis, rank)
    if axis == rank - 1:
        im.bind(node, 0, im.emit(fn, [ref], {"dim": -1}, name=im.out_name(node)))
        return
    shape = im.static_shape(x)
    if shape is not None:
        flat = im.emit("flatten", [ref], {"start_dim": axis, "end_dim": -1})
        s = im.emit(fn, [flat], {"dim": -1})
        im.bind(node, 0, im.emit("reshape", [s], {"shape": list(shape)},
                                 name=im.out_name(node)))
        return
    # Sizes known only at run time: the same maths with reductions over those axes.
    dims = list(range(axis, rank))
    shifted = im.emit("sub", [ref, im.emit("amax", [ref], {"dim": dims, "keepdim": True})])
    total = im.emit("sum", [im.emit("exp", [shifted])], {"dim": dims, "keepdim": True})
    if fn == "softmax":
        out = im.emit("div", [im.emit("exp", [shifted]), total], name=im.out_name(node))
    else:
        out = im.emit("sub", [shifted, im.emit("log", [total])], name=im.out_name(node))
    im.bind(node, 0, out)


@handles("Hardmax")
def _hardmax(im: _Importer, node: Any, ins: list) -> None:
    """1.0 at the first maximum along ``axis`` (before opset 13: over all axes from
    ``axis`` on, flattened), 0.0 elsewhere."""
    x = ins[0]
    rank = im.rank(x)
    axis = im.attrs(node).get("axis", -1 if im.opset >= 13 else 1)
    if rank is None:
        raise im.error(node, "Hardmax needs the input rank")
    axis = im.norm_axis(node, axis, rank)
    ref = im.tensor(x, node)
    shape = None
    if im.opset < 13 and axis < rank - 1:
        shape = im.static_shape(x)
        if shape is None:
            raise im.error(node, "Hardmax before opset 13 over several axes needs a static "
                           "input shape")
        ref = im.emit("flatten", [ref], {"start_dim": axis, "end_dim": -1})
        axis = -1
    peak = im.emit("eq", [ref, im.emit("amax", [ref], {"dim": [axis], "keepdim": True})])
    ones = im.emit("where", [peak, 1.0, 0.0])
    first = im.emit("eq", [im.emit("cumsum", [ones], {"dim": axis}), 1.0])
    out = im.emit("where", [first, ones, 0.0],
                  name=None if shape is not None else im.out_name(node))
    if shape is not None:
        out = im.emit("reshape", [out], {"shape": list(shape)}, name=im.out_name(node))
    im.bind(node, 0, out)


@handles("Erf")
def _erf(im: _Importer, node: Any, ins: list) -> None:
    """GELU as exporters decompose it: x * 0.5 * (1 + erf(x / sqrt(2))), any order."""
    v = ins[0]
    x = None
    p = im.prov.get(v.ref) if isinstance(v, _T) else None
    if p and p[0] == "div" and isinstance(p[1][0], str) and not isinstance(p[1][1], str) \
            and _close(p[1][1], math.sqrt(2), 1e-4):
        x = p[1][0]
    elif p and p[0] == "mul":
        a, b = p[1]
        if isinstance(a, str) and not isinstance(b, str) and _close(b, 1 / math.sqrt(2), 1e-4):
            x = a
        elif isinstance(b, str) and not isinstance(a, str) \
                and _close(a, 1 / math.sqrt(2), 1e-4):
            x = b
    chain = _gelu_chain(im, node, x) if x is not None else None
    if chain is None:
        im.bind(node, 0, im.emit("erf", [im.tensor(v, node)], name=im.out_name(node)))
        return
    last, consumed = chain
    im.done.update(consumed)
    ref = im.emit("gelu", [x], {"approximate": "none"}, name=last.output[0])
    im.env[last.output[0]] = _T(ref, im.shapes.get(last.output[0]))


def _gelu_chain(im: _Importer, erf: Any, x: str) -> tuple[Any, list[int]] | None:
    nxt = im.sole_consumer(erf.output[0])
    if not nxt or nxt[1].op_type != "Add":
        return None
    i_add, add = nxt
    other = [n for n in add.input if n != erf.output[0]]
    if len(other) != 1 or not _is_const(im, other[0], 1.0):
        return None
    cur, consumed, need = add, [i_add], {"x", "half"}
    while need:
        nxt = im.sole_consumer(cur.output[0])
        if not nxt or nxt[1].op_type != "Mul":
            break
        i, mul = nxt
        other = [n for n in mul.input if n != cur.output[0]]
        if len(other) != 1:
            return None
        o = other[0]
        if "half" in need and _is_const(im, o, 0.5):
            need.discard("half")
        elif "x" in need and isinstance(im.env.get(o), _T) and im.env[o].ref == x:
            need.discard("x")
        else:
            return None
        consumed.append(i)
        cur = mul
    if need:
        return None
    return cur, consumed


def _is_const(im: _Importer, name: str, value: float) -> bool:
    """Whether ``name`` is a size-1 constant equal to ``value`` (looking ahead at
    Constant nodes that come later in the graph)."""
    v = im.env.get(name)
    if v is None:
        node = next((n for n in im.graph.node if name in n.output), None)
        if node is None or node.op_type != "Constant":
            return False
        a = im.attrs(node)
        raw = a.get("value", a.get("value_float", a.get("value_int")))
        if raw is None:
            return False
        v = _C(np.asarray(raw))
    return isinstance(v, _C) and v.value.size == 1 and _close(float(v.value.reshape(())), value)


@handles("PRelu")
def _prelu(im: _Importer, node: Any, ins: list) -> None:
    """A PReLU layer when the slope is an initializer (or constant) of one value or one per
    channel (axis 1, PyTorch's layout); else where(x > 0, x, slope * x)."""
    x, slope = ins
    rank = im.rank(x)
    value = im.array(slope)
    if value is not None and value.dtype.kind == "f":
        c = int(value.size)
        ok = c == 1
        if not ok and rank is not None and rank >= 2:
            if im.opset < 7 and value.ndim == 1:  # legacy: a 1-d slope is per channel
                ok = True
            elif value.ndim <= rank:
                ok = (1,) * (rank - value.ndim) + tuple(value.shape) == \
                    (1, c) + (1,) * (rank - 2)
            dim = (im.shape(x) or (None, None))[1]
            ok = ok and (dim is None or dim == c)
        if ok:
            src = slope.args[0] if isinstance(slope, _Lazy) else slope
            how = "" if value.ndim == 1 else "reshaped"
            ref = im.add_layer(node, "PReLU", {"num_parameters": c},
                               {"weight": (value.reshape(c), src, how)},
                               [im.tensor(x, node)], out_hint=im.out_name(node))
            im.bind(node, 0, ref)
            return
    ref = im.tensor(x, node)
    s = im.operand(slope, node, x)
    s_shape = im.shape(slope)
    if isinstance(s, str) and im.opset < 7 and s_shape is not None and len(s_shape) == 1 \
            and s_shape[0] != 1:
        if rank is None:
            raise im.error(node, "channel-wise PRelu needs the input rank")
        s = im.emit("reshape", [s], {"shape": [int(s_shape[0])] + [1] * (rank - 2)})
    im.bind(node, 0, im.emit("where", [im.emit("gt", [ref, 0.0]), ref,
                                       im.emit("mul", [ref, s])], name=im.out_name(node)))


def _prelu_slope(im: _Importer, node: Any, x: Any, shape: Sequence[int]) -> bool:
    """Keep ``Reshape``/``Unsqueeze`` of a parameter that only feeds a PRelu slope lazy
    (exporters reshape PyTorch's (C,) weight to (C, 1, ...)), so that PRelu can lift it to
    a PReLU layer with the parameter's name and layout."""
    if not isinstance(x, _P):
        return False
    user = im.sole_consumer(node.output[0])
    if user is None or user[1].op_type != "PRelu" or list(user[1].input[1:2]) != \
            [node.output[0]]:
        return False
    im.env[node.output[0]] = _Lazy("reshape", (x, tuple(int(d) for d in shape)), node)
    return True
