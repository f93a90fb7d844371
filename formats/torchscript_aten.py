"""aten operations of TorchScript graphs -> catalogue functions (the lifter's op table).

Each entry of :data:`_ATEN` converts one aten op (in-place variants ``relu_`` share the
entry of ``relu``) given its arguments by schema name; :func:`_scalar_op` evaluates
arithmetic on constants that constant propagation left over.
"""

from __future__ import annotations

import operator
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from petab_sciml.catalogue import TRIGONOMETRIC
from petab_sciml.formats.graph_building import Tensor
from petab_sciml.formats.torchscript_graph import (
    _UNKNOWN,
    INT64_MAX,
    TRAINING,
    _Full,
    _Size,
    _SizeProd,
    _Sizes,
    _Tuple,
)

if TYPE_CHECKING:
    from petab_sciml.formats.torchscript import _Lifter


_SCALAR_OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "neg": operator.neg, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "__not__": operator.not_, "__is__": operator.is_, "__isnot__": operator.is_not,
    "__and__": operator.and_, "__or__": operator.or_, "len": len,
    "__contains__": lambda container, item: item in container,
    "__getitem__": operator.getitem,
}


def _scalar_op(kind: str, values: list[Any]) -> Any:
    """Evaluate an op on Python constants (what constant propagation left over)."""
    name = kind.split("::", 1)[-1]
    fn = _SCALAR_OPS.get(name)
    if fn is None or not values:
        return _UNKNOWN
    if not all(v is None or isinstance(v, (bool, int, float, str, list, tuple, dict))
               for v in values):
        return _UNKNOWN
    try:
        return fn(*values)
    except Exception:  # noqa: BLE001
        return _UNKNOWN

# ----------------------------------------------------------------------------- op table
def _t(lifter: _Lifter, value: Any, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise lifter.error(f"{what}: expected a tensor, got {value!r}")
    return value


def _unary(function: str):
    return lambda lf, a: lf.call(function, {"input": _t(lf, a["self"], function)})


def _with(function: str, **renames: str):
    """Handler passing ``self`` as ``input`` and the named aten args (aten name ->
    catalogue name)."""

    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
        values = {"input": a["self"]}
        for aten_name, name in renames.items():
            if aten_name in a:
                values[name] = a[aten_name]
        return lf.call(function, values)

    return handler


def _elu(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    if a.get("scale", 1) != 1 or a.get("input_scale", 1) != 1:
        raise lf.error("aten::elu with scale or input_scale other than 1 is not supported")
    return lf.call("elu", {"input": a["self"], "alpha": a["alpha"]})


def _softmax(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
        if a.get("dtype") is not None:
            raise lf.error(f"{function} with a dtype is not supported")
        return lf.call(function, {"input": a["self"], "dim": a["dim"]})

    return handler


def _binary(function: str, alpha: bool = False):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
        values = {"input": a["self"], "other": a["other"]}
        if alpha and a.get("alpha", 1) != 1:
            values["alpha"] = a["alpha"]
        return lf.call(function, values)

    return handler


def _rsub(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    values = {"input": a["other"], "other": a["self"]}
    if a.get("alpha", 1) != 1:
        values["alpha"] = a["alpha"]
    return lf.call("sub", values)


def _div(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    values = {"input": a["self"], "other": a["other"]}
    if a.get("rounding_mode") is not None:
        values["rounding_mode"] = a["rounding_mode"]
    return lf.call("div", values)


def _full(value: float | None):
    """aten::zeros / ones / full (and new_zeros...): made where it is used (dropped as a
    recurrent layer's zero initial state, else a constant of static sizes)."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        sizes = a.get("size")
        if not isinstance(sizes, (list, tuple)):
            raise lf.error(f"a filled tensor of sizes {sizes!r} is not supported")
        fill = a.get("fill_value") if value is None else value
        if not isinstance(fill, (int, float)) or isinstance(fill, bool):
            raise lf.error(f"a tensor filled with {fill!r} is not supported")
        if a.get("dtype") not in (None, 6, 7):  # float32, float64
            raise lf.error("a filled tensor of a non-float dtype is not supported")
        return _Full(tuple(sizes), float(fill))

    return handler


def _pool(function: str, names: tuple[str, ...]):
    """aten pools -> the catalogue's functional pools (``stride=[]`` means the kernel)."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        values: dict[str, Any] = {"input": _t(lf, a["self"], function)}
        for name in names:
            if name in a:
                value = a[name]
                if name == "stride" and value == []:
                    value = None
                if name == "output_size" and isinstance(value, list):
                    value = [None if isinstance(v, _Size) else v for v in value]
                values[name] = value
        out = lf.call(function, values)
        return [out, _UNKNOWN] if function.startswith("adaptive_max") else out

    return handler


def _clamp(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    values = {"input": a["self"]}
    for key in ("min", "max"):
        if a.get(key) is not None:
            if isinstance(a[key], Tensor):
                raise lf.error("clamp with tensor bounds is not supported")
            values[key] = float(a[key])
    return lf.call("clamp", values)


def _reshape(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "reshape")
    shape = a.get("shape", a.get("size"))
    shape = list(shape) if isinstance(shape, (list, tuple)) else shape
    if isinstance(shape, _Sizes) and shape.tensor == x.name:
        return x
    if isinstance(shape, list) and any(isinstance(s, (_Size, _SizeProd)) for s in shape):
        lowered = _symbolic_reshape(lf, x, shape)
        if lowered is not None:
            return lowered
    if isinstance(shape, _Sizes) or (isinstance(shape, list) and any(
            isinstance(s, _Size) for s in shape)):
        static = _traced_shape(lf, shape)
        if static is not None:
            return lf.call("reshape", {"input": x, "shape": static})
        root = lf.same_shape.get(x.name, x.name)
        if isinstance(shape, _Sizes):
            if lf.same_shape.get(shape.tensor, shape.tensor) == root:
                return x
            raise lf.error("reshape to the sizes of another tensor is not supported")
        dynamic = [i for i, s in enumerate(shape) if isinstance(s, _Size)]
        if any(lf.same_shape.get(shape[i].tensor, shape[i].tensor) != root for i in dynamic):
            return _reshape_as_sizes(lf, x, shape)
        ones = [i for i, s in enumerate(shape) if s == 1]
        rest = [s for s in shape if s != 1]
        lead = [i for i, s in enumerate(rest) if isinstance(s, _Size)]
        if ones and lead == list(range(len(lead))) and all(
                rest[i].dim == i for i in lead) and rest[len(lead):] == [-1]:
            # x.view(x.size(0), 1, x.size(1), -1): flatten the tail, insert the 1s
            y = lf.call("flatten", {"input": x, "start_dim": len(lead)})
            for i in ones:
                y = lf.call("unsqueeze", {"input": y, "dim": i})
            return y
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


def _monomial(dim: Any) -> tuple[Fraction, tuple] | None:
    """A size as coefficient and symbols (sizes of tensors), for comparing products."""
    if isinstance(dim, _Size):
        return Fraction(dim.num, dim.den), ((dim.tensor, dim.dim),)
    if isinstance(dim, _SizeProd):
        return _product(list(dim.factors))
    if isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
        return Fraction(dim), ()
    return None


def _product(dims: list) -> tuple[Fraction, tuple] | None:
    coef, syms = Fraction(1), []
    for d in dims:
        m = _monomial(d)
        if m is None:
            return None
        coef *= m[0]
        syms += list(m[1])
    return coef, tuple(sorted(syms))


def _symbolic_reshape(lf: _Lifter, x: Tensor, shape: list) -> Any:
    """A reshape to run-time sizes as flatten/unflatten, found by matching products of
    the symbolic sizes of ``x`` (from ``h, w = x.shape`` or the sizes the shape uses) with
    the target's: ``x.view(b, g, c // g, h, w)`` splits ``c``, ``y.view(b, c, h, w)``
    merges two dimensions back (torchvision's channel shuffle)."""
    dims = lf.sym.get(x.name, lf.sym.get(lf.same_shape.get(x.name, x.name)))
    if dims is None:  # the target names sizes of x only: then those are all of them
        used = [f for s in shape for f in (s.factors if isinstance(s, _SizeProd) else (s,))
                if isinstance(f, _Size)]
        if not used or {s.tensor for s in used} != {x.name}:
            return None
        dims = [_Size(x.name, i) for i in range(max(s.dim for s in used) + 1)]
    if -1 in shape:
        return None
    total_in, total_out = _product(dims), _product(shape)
    if total_in is None or total_out is None or total_in != total_out:
        return None
    groups, i, j = [], 0, 0  # (input dims [i, i2), target dims [j, j2))
    while i < len(dims) and j < len(shape):
        i2, j2 = i + 1, j + 1
        while _product(dims[i:i2]) != _product(shape[j:j2]):
            left, right = _product(dims[i:i2]), _product(shape[j:j2])
            if i2 < len(dims) and (j2 >= len(shape) or len(left[1]) <= len(right[1])
                                   and left[0] <= right[0]):
                i2 += 1
            elif j2 < len(shape):
                j2 += 1
            else:
                return None
        if i2 - i > 1 and j2 - j > 1:
            return None
        groups.append((i, i2, j, j2))
        i, j = i2, j2
    if i != len(dims) or j != len(shape):
        return None
    y = x
    for i, i2, j, j2 in reversed(groups):
        if i2 - i > 1:
            y = lf.call("flatten", {"input": y, "start_dim": i, "end_dim": i2 - 1})
        elif j2 - j > 1:
            sizes = [s if isinstance(s, int) else -1 for s in shape[j:j2]]
            if sizes.count(-1) > 1:
                return None
            y = lf.call("unflatten", {"input": y, "dim": i, "sizes": sizes})
    lf.sym[y.name] = list(shape)
    return y


def _reshape_as_sizes(lf: _Lifter, x: Tensor, shape: list) -> Tensor:
    """``x.view(t.size(0), ..., t.size(n-1))``, another tensor's sizes in order: the
    traced form of ``x.view(t.size())`` (F.local_response_norm's ``div.view(sizes)``),
    lifted as ``x.reshape_as(t)`` (if ``t`` had more dimensions, PyTorch's view would
    differ; traces write ``t.size()`` as every size of ``t``)."""
    tensors = {s.tensor for s in shape if isinstance(s, _Size)}
    if len(tensors) == 1 and all(isinstance(s, _Size) and s.dim == i
                                 for i, s in enumerate(shape)):
        (other,) = tensors
        return lf.call("reshape_as", {"input": x, "other": Tensor(other)})
    raise lf.error(f"reshape of {x.name!r} to sizes of another tensor {shape!r} is not "
                   "supported")


def _traced_shape(lf: _Lifter, shape: Any) -> list[int] | None:
    """A traced graph's reshape to run-time sizes, from the sizes its trace recorded:
    static, except the batch size (a leading ``x.size(0)``), which stays -1."""
    node = getattr(lf, "current", None)
    tp = node.output().type() if node is not None else None
    sizes = tp.sizes() if tp is not None and hasattr(tp, "sizes") else None
    if not sizes or any(d is None for d in sizes):
        return None
    batch = (isinstance(shape, _Sizes)
             or (shape and isinstance(shape[0], _Size) and shape[0].dim == 0))
    if not batch:
        return None
    return [-1] + [int(d) for d in sizes[1:]]


def _getitem(lf: _Lifter, x: Tensor, dim: int, item: Any) -> Tensor:
    full = {"slice": [None, None, None]}
    if dim >= 0:
        index = [full] * dim + [item]
    else:
        index = ["..."] + [item] + [full] * (-dim - 1)
    return lf.call("getitem", {"input": x, "index": index})


def _slice(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    x = _t(lf, a["self"], "slice")
    start, end, step = a.get("start"), a.get("end"), a.get("step", 1)
    if end is not None and isinstance(end, int) and end >= INT64_MAX:
        end = None
    if any(not (v is None or isinstance(v, int)) for v in (start, end, step)):
        raise lf.error("slices with run-time bounds are not supported")
    if start in (None, 0) and end is None and step in (None, 1):
        return x
    return _getitem(lf, x, a["dim"], {"slice": [start, end, None if step == 1 else step]})


def _dim_size(lf: _Lifter, x: Tensor, dim: int, what: str) -> int:
    """The static size of ``x`` along ``dim``: from the traced graph's type of the
    current node's input, else from the sizes the reader knows."""
    node = getattr(lf, "current", None)
    tp = node.inputsAt(0).type() if node is not None else None
    sizes = tp.sizes() if tp is not None and hasattr(tp, "sizes") else None
    if not sizes:
        known = lf.sym.get(x.name, lf.sym.get(lf.same_shape.get(x.name, x.name)))
        sizes = list(known) if known is not None else None
    size = sizes[dim] if sizes is not None and -len(sizes) <= dim < len(sizes) else None
    if not isinstance(size, int):
        raise lf.error(f"{what} needs the size of dimension {dim} of {x.name!r}, which the "
                       "graph does not give (a scripted module): trace the module, or "
                       "give the sizes (torch.split(x, [2, 3], dim))")
    return size


def _split(lf: _Lifter, a: dict[str, Any]) -> list[Tensor]:
    """``split`` (a piece size, or a list of sizes), ``split_with_sizes``: one slice per
    piece."""
    x = _t(lf, a["self"], "split")
    dim = int(a.get("dim", 0))
    sizes = a.get("split_size", a.get("split_sizes"))
    if isinstance(sizes, int):
        total = _dim_size(lf, x, dim, "split into pieces of one size")
        sizes = [min(sizes, total - start) for start in range(0, total, sizes)]
    if not isinstance(sizes, list) or not all(isinstance(s, int) for s in sizes):
        raise lf.error("split with run-time sizes is not supported")
    pieces, start = [], 0
    for size in sizes:
        pieces.append(_getitem(lf, x, dim, {"slice": [start, start + size, None]}))
        start += size
    return pieces


def _unbind(lf: _Lifter, a: dict[str, Any]) -> list[Tensor]:
    x = _t(lf, a["self"], "unbind")
    dim = int(a.get("dim", 0))
    return [_getitem(lf, x, dim, k) for k in range(_dim_size(lf, x, dim, "unbind"))]


def _select(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    x = _t(lf, a["self"], "select")
    if not isinstance(a["index"], int):
        raise lf.error("select with a run-time index is not supported")
    return _getitem(lf, x, a["dim"], a["index"])


def _reduce(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
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
    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
        values: dict[str, Any] = {"input": a["self"], "dim": list(a.get("dim") or [])}
        values["keepdim"] = bool(a.get("keepdim", False))
        return lf.call(function, values)

    return handler


def _prod(lf: _Lifter, a: dict[str, Any]) -> Tensor:
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
    def handler(lf: _Lifter, a: dict[str, Any]) -> Tensor:
        pad = a.get("pad", a.get("padding"))
        if not isinstance(pad, (list, tuple)) or not all(isinstance(p, int) for p in pad):
            raise lf.error("padding with run-time sizes is not supported")
        values: dict[str, Any] = {"input": a["self"], "pad": list(pad),
                                  "mode": mode or a.get("mode") or "constant"}
        if values["mode"] == "constant" and a.get("value") is not None:
            values["value"] = float(a["value"])
        return lf.call("pad", values)

    return handler


def _squeeze(lf: _Lifter, a: dict[str, Any]) -> Tensor:
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


def _size_arith(op: str):
    """aten::floordiv / mul / floor_divide / div on a size and an int: a size expression
    (traced graphs hold sizes as 0-d tensors)."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        size, other = a.get("self", a.get("a")), a.get("other", a.get("b"))
        if isinstance(size, _Size) and isinstance(other, int) and not isinstance(other, bool):
            if op == "mul":
                return size.scaled(other, 1)
            return size.scaled(1, other)
        if isinstance(other, _Size) and isinstance(size, int) and op == "mul":
            return other.scaled(size, 1)
        if op == "mul" and all(isinstance(v, (_Size, _SizeProd)) for v in (size, other)):
            return _SizeProd(tuple(f for v in (size, other) for f in (
                v.factors if isinstance(v, _SizeProd) else (v,))))
        if "self" not in a:  # int arithmetic (a, b) on run-time sizes
            raise lf.error(f"aten::{op} of sizes known only at run time ({size!r}, "
                           f"{other!r}) is not supported")
        return _SIZE_FALLBACK[op](lf, a)
    return handler


def _size(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "size")
    if a.get("dim") is None:
        return _Sizes(x.name)
    return _Size(x.name, a["dim"])


def _unsupported(message: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        raise lf.error(message)

    return handler


def _linear(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    """F.linear outside nn.Linear: input @ weight.T (+ bias)."""
    x = _t(lf, a["input"], "linear")
    w = lf.call("transpose", {"input": _t(lf, a["weight"], "linear"), "dim0": 0, "dim1": 1})
    y = lf.call("matmul", {"input": x, "other": w})
    return y if a.get("bias") is None else lf.call("add", {"input": y, "other": a["bias"]})


def _baddbmm(lf: _Lifter, a: dict[str, Any]) -> Tensor:
    """beta * self + alpha * batch1 @ batch2."""
    product = lf.call("matmul", {"input": a["batch1"], "other": a["batch2"]})
    if a.get("alpha", 1) != 1:
        product = lf.call("mul", {"input": product, "other": float(a["alpha"])})
    base = a["self"]
    if a.get("beta", 1) != 1:
        base = lf.call("mul", {"input": base, "other": float(a["beta"])})
    return lf.call("add", {"input": base, "other": product})


def _no_floordiv(lf: _Lifter, a: dict[str, Any]) -> Any:
    raise lf.error("aten::floordiv of values known only at run time is not supported "
                   "(sizes divided by a constant are)")


_SIZE_FALLBACK = {
    "floor_divide": _binary("floor_divide"),
    "floordiv": _no_floordiv,
    "mul": _binary("mul"),
    "div": _div,
}


_POOL_ARGS = {
    "max_pool": ("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
    "avg_pool": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                 "divisor_override"),
    "adaptive_avg_pool": ("output_size",),
    "adaptive_max_pool": ("output_size",),
}


_ATEN: dict[str, Any] = {
    **{f"{kind}{n}d": _pool(f"{kind}{n}d", names if (kind, n) != ("avg_pool", 1)
                                          else names[:-1])
       for kind, names in _POOL_ARGS.items() for n in (1, 2, 3)},
    **{f"_adaptive_avg_pool{n}d": _pool(f"adaptive_avg_pool{n}d", ("output_size",))
       for n in (2, 3)},
    **{f"max_pool{n}d_with_indices": lambda lf, a, n=n: [
        _pool(f"max_pool{n}d", _POOL_ARGS["max_pool"])(lf, a), _UNKNOWN] for n in (1, 2, 3)},
    "zeros": _full(0.0),
    "ones": _full(1.0),
    "full": _full(None),
    "new_zeros": _full(0.0),
    "new_ones": _full(1.0),
    "new_full": _full(None),
    "floor_divide": _size_arith("floor_divide"),
    "floordiv": _size_arith("floordiv"),
    "remainder": _binary("remainder"),
    "floor": _unary("floor"),
    "ceil": _unary("ceil"),
    "trunc": _unary("trunc"),
    "fix": _unary("trunc"),
    "round": lambda lf, a: lf.call("round", {"input": a["self"],
                                             "decimals": a.get("decimals", 0)}),
    "split": _split,
    "split_with_sizes": _split,
    "unbind": _unbind,
    "chunk": lambda lf, a: _Tuple(
        lf.call("chunk", {"input": a["self"], "chunks": a["chunks"], "dim": a["dim"]}).name,
        tuple((k,) for k in range(int(a["chunks"])))),
    "unflatten": lambda lf, a: lf.call("unflatten", {"input": a["self"], "dim": a["dim"],
                                                     "sizes": list(a["sizes"])}),
    "reshape_as": lambda lf, a: lf.call("reshape_as", {"input": a["self"],
                                                       "other": a["other"]}),
    "view_as": lambda lf, a: lf.call("reshape_as", {"input": a["self"], "other": a["other"]}),
    "cumsum": lambda lf, a: lf.call("cumsum", {"input": a["self"], "dim": a["dim"]}),
    "local_response_norm": lambda lf, a: lf.call("local_response_norm", {
        "input": a["input"], "size": a["size"], "alpha": a.get("alpha", 1e-4),
        "beta": a.get("beta", 0.75), "k": a.get("k", 1.0)}),
    **{name: _unary(fn) for name, fn in {
        "relu": "relu", "relu6": "relu6", "tanh": "tanh", "sigmoid": "sigmoid",
        "selu": "selu", "silu": "silu", "hardswish": "hardswish",
        "hardsigmoid": "hardsigmoid", "mish": "mish", "log_sigmoid": "logsigmoid",
        "exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg",
        "erf": "erf", "special_erf": "erf", "sign": "sign", "sin": "sin", "cos": "cos",
        **{name: name for name in TRIGONOMETRIC},
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
    "mul": _size_arith("mul"),
    "div": _size_arith("div"),
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
    "bmm": _binary("matmul"),
    "linear": _linear,
    "baddbmm": _baddbmm,
}
