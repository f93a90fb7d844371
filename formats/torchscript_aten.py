"""aten operations of TorchScript graphs -> catalogue functions (the lifter's op table).

Each entry of :data:`_ATEN` converts one aten op (in-place variants ``relu_`` share the
entry of ``relu``) given its arguments by schema name; :func:`_scalar_op` evaluates
arithmetic on constants that constant propagation left over.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from petab_sciml.formats.torchscript_graph import _T, _UNKNOWN, INT64_MAX, TRAINING, _Size, _Sizes

if TYPE_CHECKING:
    from petab_sciml.formats.torchscript import _Lifter

_SCALAR_OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "neg": operator.neg, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "__not__": operator.not_, "__is__": operator.is_, "__isnot__": operator.is_not,
    "__and__": operator.and_, "__or__": operator.or_, "len": len,
}

def _scalar_op(kind: str, values: list[Any]) -> Any:
    """Evaluate an op on Python constants (what constant propagation left over)."""
    name = kind.split("::", 1)[-1]
    fn = _SCALAR_OPS.get(name)
    if fn is None or not values:
        return _UNKNOWN
    if not all(v is None or isinstance(v, (bool, int, float, str, list, tuple))
               for v in values):
        return _UNKNOWN
    try:
        return fn(*values)
    except Exception:  # noqa: BLE001
        return _UNKNOWN

# ----------------------------------------------------------------------------- op table
def _t(lifter: _Lifter, value: Any, what: str) -> _T:
    if not isinstance(value, _T):
        raise lifter.error(f"{what}: expected a tensor, got {value!r}")
    return value

def _unary(function: str):
    return lambda lf, a: lf.call(function, {"input": _t(lf, a["self"], function)})

def _with(function: str, **renames: str):
    """Handler passing ``self`` as ``input`` and the named aten args (aten name ->
    catalogue name)."""

    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values = {"input": a["self"]}
        for aten_name, name in renames.items():
            if aten_name in a:
                values[name] = a[aten_name]
        return lf.call(function, values)

    return handler

def _elu(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("scale", 1) != 1 or a.get("input_scale", 1) != 1:
        raise lf.error("aten::elu with scale or input_scale other than 1 is not supported")
    return lf.call("elu", {"input": a["self"], "alpha": a["alpha"]})

def _softmax(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        if a.get("dtype") is not None:
            raise lf.error(f"{function} with a dtype is not supported")
        return lf.call(function, {"input": a["self"], "dim": a["dim"]})

    return handler

def _binary(function: str, alpha: bool = False):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values = {"input": a["self"], "other": a["other"]}
        if alpha and a.get("alpha", 1) != 1:
            values["alpha"] = a["alpha"]
        return lf.call(function, values)

    return handler

def _rsub(lf: _Lifter, a: dict[str, Any]) -> _T:
    values = {"input": a["other"], "other": a["self"]}
    if a.get("alpha", 1) != 1:
        values["alpha"] = a["alpha"]
    return lf.call("sub", values)

def _div(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("rounding_mode") is not None:
        raise lf.error("division with a rounding_mode is not supported")
    return lf.call("div", {"input": a["self"], "other": a["other"]})

def _clamp(lf: _Lifter, a: dict[str, Any]) -> _T:
    values = {"input": a["self"]}
    for key in ("min", "max"):
        if a.get(key) is not None:
            if isinstance(a[key], _T):
                raise lf.error("clamp with tensor bounds is not supported")
            values[key] = float(a[key])
    return lf.call("clamp", values)

def _reshape(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "reshape")
    shape = a.get("shape", a.get("size"))
    shape = list(shape) if isinstance(shape, (list, tuple)) else shape
    if isinstance(shape, _Sizes) and shape.tensor == x.name:
        return x
    if isinstance(shape, list) and any(isinstance(s, _Size) for s in shape):
        dynamic = [i for i, s in enumerate(shape) if isinstance(s, _Size)]
        if any(shape[i].tensor != x.name for i in dynamic):
            raise lf.error("reshape to sizes of another tensor is not supported")
        k = len(dynamic)
        if dynamic == list(range(k)) and all(shape[i].dim == i for i in dynamic):
            if shape[k:] == [-1]:
                return lf.call("flatten", {"input": x, "start_dim": k})
        if k == 1 and -1 not in shape:
            shape[dynamic[0]] = -1
        else:
            raise lf.error(f"reshape to a shape with run-time sizes {shape!r} is not "
                           "supported (one run-time size, or leading sizes then -1, are)")
    return lf.call("reshape", {"input": x, "shape": shape})

def _getitem(lf: _Lifter, x: _T, dim: int, item: Any) -> _T:
    full = {"slice": [None, None, None]}
    if dim >= 0:
        index = [full] * dim + [item]
    else:
        index = ["..."] + [item] + [full] * (-dim - 1)
    return lf.call("getitem", {"input": x, "index": index})

def _slice(lf: _Lifter, a: dict[str, Any]) -> _T:
    x = _t(lf, a["self"], "slice")
    start, end, step = a.get("start"), a.get("end"), a.get("step", 1)
    if end is not None and isinstance(end, int) and end >= INT64_MAX:
        end = None
    if any(not (v is None or isinstance(v, int)) for v in (start, end, step)):
        raise lf.error("slices with run-time bounds are not supported")
    if start in (None, 0) and end is None and step in (None, 1):
        return x
    return _getitem(lf, x, a["dim"], {"slice": [start, end, None if step == 1 else step]})

def _select(lf: _Lifter, a: dict[str, Any]) -> _T:
    x = _t(lf, a["self"], "select")
    if not isinstance(a["index"], int):
        raise lf.error("select with a run-time index is not supported")
    return _getitem(lf, x, a["dim"], a["index"])

def _reduce(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        if a.get("dtype") is not None:
            raise lf.error(f"{function} with a dtype is not supported")
        values: dict[str, Any] = {"input": a["self"]}
        dim = a.get("dim")
        if isinstance(dim, list) and not dim:
            dim = None
        if dim is not None:
            values["dim"] = dim
            values["keepdim"] = bool(a.get("keepdim", False))
        return lf.call(function, values)

    return handler

def _reduce_dims(function: str):
    """amax/amin: ``dim`` (a list, empty = every dimension) and ``keepdim``."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values: dict[str, Any] = {"input": a["self"], "dim": list(a.get("dim") or [])}
        values["keepdim"] = bool(a.get("keepdim", False))
        return lf.call(function, values)

    return handler

def _prod(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("dtype") is not None:
        raise lf.error("prod with a dtype is not supported")
    values: dict[str, Any] = {"input": a["self"]}
    if a.get("dim") is not None:
        values["dim"] = a["dim"]
        values["keepdim"] = bool(a.get("keepdim", False))
    return lf.call("prod", values)

def _pad(mode: str | None = None):
    """aten::pad (mode and value as arguments) and its lowerings: constant_pad_nd,
    reflection_padNd, replication_padNd, _pad_circular."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        pad = a.get("pad", a.get("padding"))
        if not isinstance(pad, (list, tuple)) or not all(isinstance(p, int) for p in pad):
            raise lf.error("padding with run-time sizes is not supported")
        values: dict[str, Any] = {"input": a["self"], "pad": list(pad),
                                  "mode": mode or a.get("mode") or "constant"}
        if values["mode"] == "constant" and a.get("value") is not None:
            values["value"] = float(a["value"])
        return lf.call("pad", values)

    return handler

def _squeeze(lf: _Lifter, a: dict[str, Any]) -> _T:
    values: dict[str, Any] = {"input": a["self"]}
    if a.get("dim") is not None:
        values["dim"] = a["dim"]
    return lf.call("squeeze", values)

def _dropout(layer_type: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        x = _t(lf, a["input"], layer_type)
        train = a.get("train")
        if train is False or a.get("p") == 0:
            return x
        if train is not TRAINING and train is not True:
            raise lf.error(f"dropout whose training flag is {train!r} is not supported")
        layer_id = lf.synthetic_layer(layer_type, {"p": float(a["p"])}, "dropout")
        return lf.call_layer(layer_id, [x])

    return handler

def _identity(lf: _Lifter, a: dict[str, Any]) -> Any:
    return a["self"]

def _size(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "size")
    if a.get("dim") is None:
        return _Sizes(x.name)
    return _Size(x.name, a["dim"])

def _unsupported(message: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        raise lf.error(message)

    return handler

_ATEN: dict[str, Any] = {
    **{name: _unary(fn) for name, fn in {
        "relu": "relu", "relu6": "relu6", "tanh": "tanh", "sigmoid": "sigmoid",
        "selu": "selu", "silu": "silu", "hardswish": "hardswish",
        "hardsigmoid": "hardsigmoid", "mish": "mish", "log_sigmoid": "logsigmoid",
        "exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg",
        "erf": "erf", "special_erf": "erf", "sign": "sign", "sin": "sin", "cos": "cos",
    }.items()},
    **{name: _binary(fn) for name, fn in {
        "gt": "gt", "greater": "gt", "lt": "lt", "less": "lt", "ge": "ge",
        "greater_equal": "ge", "le": "le", "less_equal": "le", "eq": "eq",
        "maximum": "maximum", "minimum": "minimum",
    }.items()},
    "where": lambda lf, a: lf.call("where", {"condition": a["condition"], "input": a["self"],
                                             "other": a["other"]}),
    "amax": _reduce_dims("amax"),
    "amin": _reduce_dims("amin"),
    "prod": _prod,
    "flip": lambda lf, a: lf.call("flip", {"input": a["self"], "dims": list(a["dims"])}),
    "pad": _pad(),
    "constant_pad_nd": _pad("constant"),
    **{f"reflection_pad{n}d": _pad("reflect") for n in (1, 2, 3)},
    **{f"replication_pad{n}d": _pad("replicate") for n in (1, 2, 3)},
    "_pad_circular": _pad("circular"),
    "hardtanh": _with("hardtanh", min_val="min_val", max_val="max_val"),
    "leaky_relu": _with("leaky_relu", negative_slope="negative_slope"),
    "gelu": _with("gelu", approximate="approximate"),
    "softplus": _with("softplus", beta="beta", threshold="threshold"),
    "celu": _with("celu", alpha="alpha"),
    "elu": _elu,
    "softmax": _softmax("softmax"),
    "log_softmax": _softmax("log_softmax"),
    "add": _binary("add", alpha=True),
    "sub": _binary("sub", alpha=True),
    "rsub": _rsub,
    "mul": _binary("mul"),
    "div": _div,
    "reciprocal": lambda lf, a: lf.call("div", {"input": 1.0, "other": a["self"]}),
    "pow": lambda lf, a: lf.call("pow", {"input": a["self"], "exponent": a["exponent"]}),
    "matmul": _binary("matmul"),
    "clamp": _clamp,
    "clip": _clamp,
    "clamp_min": lambda lf, a: _clamp(lf, {"self": a["self"], "min": a["min"]}),
    "clamp_max": lambda lf, a: _clamp(lf, {"self": a["self"], "max": a["max"]}),
    "cat": lambda lf, a: lf.call("cat", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "concat": lambda lf, a: lf.call("cat", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "stack": lambda lf, a: lf.call("stack", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "flatten": lambda lf, a: lf.call("flatten", {"input": a["self"],
                                                 "start_dim": a.get("start_dim", 0),
                                                 "end_dim": a.get("end_dim", -1)}),
    "reshape": _reshape,
    "view": _reshape,
    "permute": lambda lf, a: lf.call("permute", {"input": a["self"], "dims": a["dims"]}),
    "transpose": lambda lf, a: lf.call("transpose", {"input": a["self"], "dim0": a["dim0"],
                                                     "dim1": a["dim1"]}),
    "t": lambda lf, a: lf.call("transpose", {"input": a["self"], "dim0": 0, "dim1": -1}),
    "squeeze": _squeeze,
    "unsqueeze": lambda lf, a: lf.call("unsqueeze", {"input": a["self"], "dim": a["dim"]}),
    "slice": _slice,
    "select": _select,
    "sum": _reduce("sum"),
    "mean": _reduce("mean"),
    "dropout": _dropout("Dropout"),
    "alpha_dropout": _dropout("AlphaDropout"),
    "feature_dropout": _unsupported("functional channel dropout (F.dropout1d/2d/3d) outside "
                                    "a Dropout1d/2d/3d module is not supported"),
    "feature_alpha_dropout": _unsupported("functional feature alpha dropout is not "
                                          "supported"),
    "contiguous": _identity,
    "detach": _identity,
    "clone": _identity,
    "alias": _identity,
    "size": _size,
    "linear": _unsupported("functional linear (F.linear) outside an nn.Linear module is not "
                           "supported; use nn.Linear"),
}
