"""Shape inference on the network IR, without a framework.

:func:`infer_shapes` propagates the shapes of the network inputs through the forward
graph with PyTorch's shape rules (unbatched or batched, as given), so that the validator
can check array inputs and mapping indices on network inputs and outputs without torch
or jax.  A node whose layer or function has no rule here makes the result unknown
(``None``): checks are then skipped, never guessed.  A rule that finds the shapes
inconsistent raises :class:`ShapeError` naming the node, as PyTorch would fail there.

A node that returns a tuple (a recurrent layer's ``output, h_n`` or ``output, (h_n,
c_n)``; ``chunk``) has a tuple of shapes as its value, read element-wise by ``getitem``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from petab_sciml.catalogue import LAYERS, POOL_FUNCTIONS, TRIGONOMETRIC, as_tuple
from petab_sciml.network import Network, Ref

Shape = tuple[int, ...]


class ShapeTuple(tuple):
    """The value of a node that returns a tuple: the shapes (or nested tuples) of its
    elements, as ``getitem`` reads them."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ShapeTuple({tuple(self)!r})"

__all__ = ["ShapeError", "ShapeTuple", "infer_shapes", "output_shapes"]


class ShapeError(Exception):
    """The shapes reaching ``node`` do not fit it; ``message`` says why."""

    def __init__(self, node: str, message: str):
        super().__init__(f"forward node {node!r}: {message}")
        self.node = node
        self.message = message


class _Unknown(Exception):
    """No shape rule for this node."""


def output_shapes(network: Network, input_shapes: Sequence[Shape]) -> list[Shape] | None:
    """Shapes of the network outputs for inputs of ``input_shapes``; None if unknown."""
    shapes = infer_shapes(network, input_shapes)
    if shapes is None:
        return None
    return [shapes[r.name] for r in network.output_node.bound["outputs"]]


def infer_shapes(network: Network, input_shapes: Sequence[Shape]
                 ) -> dict[str, Shape | ShapeTuple] | None:
    """Shape of every node's value for inputs of ``input_shapes`` (in ``network.inputs``
    order; a :class:`ShapeTuple` for nodes returning tuples); None when a node has no
    shape rule.  Raises :class:`ShapeError`."""
    nodes = network.node_map
    params = network.parameter_arrays()
    shapes: dict[str, Shape] = {}
    placeholders = iter(tuple(s) for s in input_shapes)
    for name in network.order:
        node = nodes[name]
        try:
            if node.op == "placeholder":
                shapes[name] = next(placeholders)
            elif node.op == "output":
                continue
            elif node.op == "get_attr":
                shapes[name] = tuple(params[node.bound["group"]][node.bound["array"]].shape)
            elif node.op == "call_module":
                layer = network.layers[node.target]
                ins = [_input_value(v, shapes) for v in node.bound["inputs"]]
                shapes[name] = _layer_shape(layer.type, layer.config, ins)
            else:
                rule = _FUNCTIONS.get(node.function or "")
                if rule is None:
                    return None
                shapes[name] = rule(_Args(node.bound, shapes))
        except _Unknown:
            return None
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as exc:
            raise ShapeError(name, str(exc)) from None
    return shapes


def _input_value(value: Any, shapes: Mapping[str, Any]) -> Any:
    """A layer input's shape; a tuple input (an LSTM's ``(h_0, c_0)``) as a ShapeTuple."""
    if isinstance(value, Ref):
        return shapes[value.name]
    return ShapeTuple(_input_value(v, shapes) for v in value)


class _Args:
    """A node's bound arguments with references replaced by shapes."""

    def __init__(self, bound: Mapping[str, Any], shapes: Mapping[str, Shape]):
        self.bound = bound
        self.shapes = shapes

    def shape(self, name: str) -> Shape | None:
        value = self.bound[name]
        if isinstance(value, Ref):
            return self.shapes[value.name]
        return None  # a number

    def shapes_of(self, name: str) -> list[Shape]:
        return [self.shapes[r.name] for r in self.bound[name]]

    def __getitem__(self, name: str) -> Any:
        return self.bound[name]


# --------------------------------------------------------------------------- helpers
def _dim(d: int, ndim: int) -> int:
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise IndexError(f"dimension {d} out of range for a {ndim}-d tensor")
    return d % ndim if ndim else 0


def _broadcast(*shapes: Shape | None) -> Shape:
    given = [s for s in shapes if s is not None]
    ndim = max((len(s) for s in given), default=0)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in given if axis - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(map(str, given))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _same(a: _Args) -> Shape:
    return a.shape("input")


def _reduce(a: _Args) -> Shape:
    shape = a.shape("input")
    dims = a["dim"]
    if dims is None or dims == () or dims == []:  # every dimension
        return (1,) * len(shape) if a.bound.get("keepdim") else ()
    dims = {_dim(d, len(shape)) for d in (dims if isinstance(dims, (list, tuple)) else [dims])}
    if a.bound.get("keepdim"):
        return tuple(1 if i in dims else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in dims)


def _flatten(shape: Shape, start: int, end: int) -> Shape:
    if not shape:
        return (1,)
    s, e = _dim(start, len(shape)), _dim(end, len(shape))
    if s > e:
        raise ValueError(f"flatten start_dim {start} comes after end_dim {end}")
    return shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]


def _reshape(a: _Args) -> Shape:
    shape = a.shape("input")
    target = a["shape"]
    target = list(target) if isinstance(target, (list, tuple)) else [target]
    size = math.prod(shape)
    if target.count(-1) > 1:
        raise ValueError("only one dimension can be -1")
    known = math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape {shape} into {tuple(target)}")
        target[target.index(-1)] = size // known
    elif known != size:
        raise ValueError(f"cannot reshape {shape} ({size} elements) into {tuple(target)}")
    return tuple(target)


def _permute(a: _Args) -> Shape:
    shape = a.shape("input")
    dims = [_dim(d, len(shape)) for d in a["dims"]]
    if sorted(dims) != list(range(len(shape))):
        raise ValueError(f"permute dims {a['dims']} do not match a {len(shape)}-d tensor")
    return tuple(shape[d] for d in dims)


def _transpose(a: _Args) -> Shape:
    shape = list(a.shape("input"))
    i, j = _dim(a["dim0"], len(shape)), _dim(a["dim1"], len(shape))
    shape[i], shape[j] = shape[j], shape[i]
    return tuple(shape)


def _squeeze(a: _Args) -> Shape:
    shape = a.shape("input")
    dims = a["dim"]
    if dims is None:
        return tuple(n for n in shape if n != 1)
    dims = {_dim(d, len(shape)) for d in (dims if isinstance(dims, (list, tuple)) else [dims])}
    return tuple(n for i, n in enumerate(shape) if not (i in dims and n == 1))


def _unsqueeze(a: _Args) -> Shape:
    shape = a.shape("input")
    d = _dim(a["dim"], len(shape) + 1)
    return shape[:d] + (1,) + shape[d:]


def _cat(a: _Args) -> Shape:
    shapes = a.shapes_of("tensors")
    first = shapes[0]
    d = _dim(a["dim"], len(first))
    for s in shapes[1:]:
        if len(s) != len(first) or any(x != y for i, (x, y) in enumerate(zip(s, first))
                                       if i != d):
            raise ValueError(f"cat of shapes {', '.join(map(str, shapes))} along dim {d}")
    return first[:d] + (sum(s[d] for s in shapes),) + first[d + 1:]


def _stack(a: _Args) -> Shape:
    shapes = a.shapes_of("tensors")
    if len(set(shapes)) != 1:
        raise ValueError(f"stack of different shapes {', '.join(map(str, shapes))}")
    d = _dim(a["dim"], len(shapes[0]) + 1)
    return shapes[0][:d] + (len(shapes),) + shapes[0][d:]


def _matmul(a: _Args) -> Shape:
    x, y = a.shape("input"), a.shape("other")
    if not x or not y:
        raise ValueError("matmul needs tensors of at least one dimension")
    x2 = (1,) + x if len(x) == 1 else x
    y2 = y + (1,) if len(y) == 1 else y
    if x2[-1] != y2[-2]:
        raise ValueError(f"matmul of {x} and {y}: inner sizes {x2[-1]} and {y2[-2]} differ")
    out = _broadcast(x2[:-2], y2[:-2]) + (x2[-2], y2[-1])
    if len(x) == 1:
        out = out[:-2] + out[-1:]
    if len(y) == 1:
        out = out[:-1]
    return out


def _softmax(a: _Args) -> Shape:
    shape = a.shape("input")
    if a["dim"] is not None:
        _dim(a["dim"], len(shape))
    return shape


def _pad(a: _Args) -> Shape:
    shape = list(a.shape("input"))
    pads = list(a["pad"])
    if len(pads) // 2 > len(shape):
        raise ValueError(f"pad of {len(pads) // 2} dimensions on a {len(shape)}-d tensor")
    for k in range(len(pads) // 2):
        shape[-1 - k] += pads[2 * k] + pads[2 * k + 1]
    return tuple(shape)


def _getitem(a: _Args) -> Shape | ShapeTuple:
    shape = a.shape("input")
    index = a["index"]
    if isinstance(shape, ShapeTuple):  # network.py admits only an integer index here
        if not -len(shape) <= index < len(shape):
            raise IndexError(f"index {index} out of range for a tuple of {len(shape)}")
        return shape[index]
    items = list(index) if isinstance(index, (list, tuple)) else [index]
    out: list[int] = []
    axis = 0
    for item in items:
        if item == "...":
            rest = len(shape) - axis - sum(1 for i in items if i not in ("...", None))
            out.extend(shape[axis:axis + rest])
            axis += rest
        elif item is None:
            out.append(1)
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -shape[axis] <= item < shape[axis]:
                raise IndexError(f"index {item} out of range for dimension {axis} of size "
                                 f"{shape[axis]}")
            axis += 1
        elif isinstance(item, Mapping) and "slice" in item:
            start, stop, step = (list(item["slice"]) + [None, None, None])[:3]
            out.append(len(range(*slice(start, stop, step).indices(shape[axis]))))
            axis += 1
        else:
            raise _Unknown
    return tuple(out) + shape[axis:]


def _reshape_as(a: _Args) -> Shape:
    shape, other = a.shape("input"), a.shape("other")
    if math.prod(shape) != math.prod(other):
        raise ValueError(f"cannot reshape {shape} ({math.prod(shape)} elements) as {other} "
                         f"({math.prod(other)} elements)")
    return other


def _unflatten(a: _Args) -> Shape:
    shape = a.shape("input")
    d = _dim(a["dim"], len(shape))
    sizes = list(a["sizes"]) if isinstance(a["sizes"], (list, tuple)) else [a["sizes"]]
    if sizes.count(-1) > 1:
        raise ValueError("only one size of unflatten can be -1")
    known = math.prod(n for n in sizes if n != -1)
    if -1 in sizes:
        if known == 0 or shape[d] % known:
            raise ValueError(f"sizes {tuple(sizes)} do not unflatten dimension {d} of size "
                             f"{shape[d]}")
        sizes[sizes.index(-1)] = shape[d] // known
    elif known != shape[d]:
        raise ValueError(f"sizes {tuple(sizes)} do not multiply to the size {shape[d]} of "
                         f"dimension {d}")
    return shape[:d] + tuple(sizes) + shape[d + 1:]


def _chunk(a: _Args) -> ShapeTuple:
    # torch.chunk: pieces of ceil(size / chunks) along dim, the last one smaller; fewer
    # than ``chunks`` pieces when the size does not allow more (then a getitem fails).
    shape, chunks = a.shape("input"), a["chunks"]
    if chunks < 1:
        raise ValueError(f"chunk expects chunks to be at least 1, got {chunks}")
    d = _dim(a["dim"], len(shape))
    size = shape[d]
    piece = -(-size // chunks)
    sizes = [min(piece, size - start) for start in range(0, size, piece)] if piece else \
        [0] * chunks
    return ShapeTuple(shape[:d] + (n,) + shape[d + 1:] for n in sizes)


def _cumsum(a: _Args) -> Shape:
    shape = a.shape("input")
    _dim(a["dim"], len(shape))
    return shape


def _pool_function(layer_type: str) -> Callable[[_Args], Shape]:
    """F.max_pool2d and friends: the layer's rule on the function's arguments."""
    return lambda a: _layer_shape(layer_type, a.bound, [a.shape("input")])


def _binary(*names: str) -> Callable[[_Args], Shape]:
    return lambda a: _broadcast(*(a.shape(n) for n in names))


_FUNCTIONS: dict[str, Callable[[_Args], Shape]] = {
    **{name: _same for name in (
        "relu", "relu6", "hardtanh", "hardswish", "selu", "silu", "leaky_relu", "gelu",
        "logsigmoid", "tanhshrink", "softsign", "softplus", "tanh", "sigmoid", "hardsigmoid",
        "mish", "elu", "celu", "neg", "exp", "log", "sqrt", "abs", "clamp", "erf", "sign",
        "sin", "cos", "contiguous", "flip", "floor", "ceil", "round", "trunc",
        *TRIGONOMETRIC)},
    **{name: _binary("input", "other") for name in (
        "add", "sub", "mul", "div", "floor_divide", "remainder", "maximum", "minimum", "gt",
        "lt", "ge", "le", "eq")},
    "pow": _binary("input", "exponent"),
    "where": _binary("condition", "input", "other"),
    "softmax": _softmax, "log_softmax": _softmax,
    "matmul": _matmul, "cat": _cat, "stack": _stack,
    "flatten": lambda a: _flatten(a.shape("input"), a["start_dim"], a["end_dim"]),
    "reshape": _reshape, "permute": _permute, "transpose": _transpose,
    "squeeze": _squeeze, "unsqueeze": _unsqueeze, "getitem": _getitem,
    "sum": _reduce, "mean": _reduce, "amax": _reduce, "amin": _reduce, "prod": _reduce,
    "pad": _pad, "reshape_as": _reshape_as, "unflatten": _unflatten, "chunk": _chunk,
    "cumsum": _cumsum,
    **{name: _pool_function(layer_type) for name, layer_type in POOL_FUNCTIONS.items()},
}


# --------------------------------------------------------------------------- layers
def _spatial(shape: Shape, n: int, channels: int | None, what: str) -> tuple[Shape, Shape]:
    """Split an (N,) C, *spatial input; check the channel count when given."""
    if len(shape) not in (n + 1, n + 2):
        raise ValueError(f"{what} needs a {n + 1}-d (unbatched) or {n + 2}-d (batched) "
                         f"input, got shape {shape}")
    if channels is not None and shape[-n - 1] != channels:
        raise ValueError(f"{what} expects {channels} channels (dimension {-n - 1}), got "
                         f"shape {shape}")
    return shape[:-n], shape[-n:]


def _window(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil: bool,
            what: str) -> int:
    span = dilation * (kernel - 1) + 1
    free = size + 2 * pad - span
    if free < 0:
        raise ValueError(f"{what}: input size {size} (padded {size + 2 * pad}) is smaller "
                         f"than the window {span}")
    out = (-(-free // stride) if ceil else free // stride) + 1
    if ceil and (out - 1) * stride >= size + pad:
        out -= 1  # PyTorch: the last window must start inside the input or left padding
    return out


def _conv(c: Mapping[str, Any], shape: Shape, n: int, what: str) -> Shape:
    lead, spatial = _spatial(shape, n, c["in_channels"], what)
    kernel = as_tuple(c["kernel_size"], n)
    stride = as_tuple(c["stride"], n)
    dilation = as_tuple(c["dilation"], n)
    padding = c["padding"]
    if padding == "same":
        return lead[:-1] + (c["out_channels"],) + spatial
    pads = (0,) * n if padding == "valid" else as_tuple(padding, n)
    out = tuple(_window(s, k, st, p, d, False, what)
                for s, k, st, p, d in zip(spatial, kernel, stride, pads, dilation))
    return lead[:-1] + (c["out_channels"],) + out


def _conv_transpose(c: Mapping[str, Any], shape: Shape, n: int, what: str) -> Shape:
    lead, spatial = _spatial(shape, n, c["in_channels"], what)
    k, st, p, op, d = (as_tuple(c[key], n) for key in
                       ("kernel_size", "stride", "padding", "output_padding", "dilation"))
    out = tuple((s - 1) * st[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1
                for i, s in enumerate(spatial))
    if min(out) <= 0:
        raise ValueError(f"{what}: output size {out} is not positive")
    return lead[:-1] + (c["out_channels"],) + out


def _pool(c: Mapping[str, Any], shape: Shape, n: int, what: str) -> Shape:
    lead, spatial = _spatial(shape, n, None, what)
    kernel = as_tuple(c["kernel_size"], n)
    stride = as_tuple(c["stride"] if c.get("stride") is not None else c["kernel_size"], n)
    pads = as_tuple(c.get("padding", 0), n)
    dilation = as_tuple(c.get("dilation", 1), n)
    out = tuple(_window(s, k, st, p, d, bool(c.get("ceil_mode")), what)
                for s, k, st, p, d in zip(spatial, kernel, stride, pads, dilation))
    return lead + out


def _adaptive(c: Mapping[str, Any], shape: Shape, n: int, what: str) -> Shape:
    lead, spatial = _spatial(shape, n, None, what)
    size = c["output_size"]
    size = as_tuple(size, n) if size is not None else spatial
    return lead + tuple(s if o is None else o for s, o in zip(spatial, size))


def _norm(c: Mapping[str, Any], shape: Shape, n: int, what: str, batch_norm: bool) -> Shape:
    # BatchNorm{n}d takes (N, C, *spatial) or, for n == 1, (N, C); InstanceNorm takes
    # (C, *spatial) or (N, C, *spatial).  The channel dimension must hold num_features.
    ndims = (2, 3) if batch_norm and n == 1 else ((n + 2,) if batch_norm else (n + 1, n + 2))
    if len(shape) not in ndims:
        raise ValueError(f"{what} needs a {' or '.join(f'{d}-d' for d in ndims)} input, got "
                         f"shape {shape}")
    channel = 1 if batch_norm else len(shape) - n - 1
    if (batch_norm or c.get("affine") or c.get("track_running_stats")) \
            and shape[channel] != c["num_features"]:
        raise ValueError(f"{what} expects {c['num_features']} features in dimension "
                         f"{channel}, got shape {shape}")
    return shape


def _recurrent(layer_type: str, c: Mapping[str, Any], ins: list[Any], what: str
               ) -> ShapeTuple:
    """RNN, GRU and LSTM as PyTorch documents them: input (L, H_in), (L, N, H_in) or, with
    batch_first, (N, L, H_in); output (..., D * H_out) in the input's layout; h_n
    (D * num_layers, [N,] H_out) and, for an LSTM, c_n (D * num_layers, [N,] hidden_size),
    where H_out is proj_size when set.  Given states must have exactly these shapes."""
    x = ins[0]
    if len(x) not in (2, 3):
        raise ValueError(f"{what} needs a 2-d (unbatched) or 3-d (batched) input, got shape "
                         f"{x}")
    if x[-1] != c["input_size"]:
        raise ValueError(f"{what} expects the last dimension to be {c['input_size']} "
                         f"(input_size), got shape {x}")
    directions = 2 if c["bidirectional"] else 1
    out_size = c.get("proj_size") or c["hidden_size"]
    lead: Shape = (directions * c["num_layers"],)
    if len(x) == 3:
        lead += (x[0] if c["batch_first"] else x[1],)
    states: tuple[Shape, ...] = (lead + (out_size,),)
    if layer_type == "LSTM":
        states += (lead + (c["hidden_size"],),)
    if len(ins) > 1:
        given = ins[1] if layer_type == "LSTM" else (ins[1],)
        for state, got, expected in zip(("h_0", "c_0"), given, states):
            if tuple(got) != expected:
                raise ValueError(f"{what} expects {state} of shape {expected} for an input "
                                 f"of shape {x}, got {tuple(got)}")
    output = x[:-1] + (directions * out_size,)
    return ShapeTuple((output, ShapeTuple(states) if layer_type == "LSTM" else states[0]))


def _layer_shape(layer_type: str, c: Mapping[str, Any], ins: list[Any]) -> Any:
    what = layer_type
    spec = LAYERS.get(layer_type)
    if spec is not None and spec.function is not None:  # activation modules (nn.ReLU...)
        rule = _FUNCTIONS.get(spec.function)
        if rule is None:
            raise _Unknown
        return rule(_Args({**c, "input": Ref("input")}, {"input": ins[0]}))
    if layer_type in ("RNN", "GRU", "LSTM"):
        return _recurrent(layer_type, c, ins, what)
    if layer_type == "LocalResponseNorm":
        if len(ins[0]) < 3:
            raise ValueError(f"LocalResponseNorm needs an input of at least 3 dimensions, "
                             f"got shape {ins[0]}")
        return ins[0]
    if layer_type == "Linear":
        x = ins[0]
        if not x or x[-1] != c["in_features"]:
            raise ValueError(f"Linear expects the last dimension to be {c['in_features']} "
                             f"(in_features), got shape {x}")
        return x[:-1] + (c["out_features"],)
    if layer_type == "Bilinear":
        x, y = ins
        if not x or x[-1] != c["in1_features"] or not y or y[-1] != c["in2_features"] \
                or x[:-1] != y[:-1]:
            raise ValueError(f"Bilinear expects shapes (..., {c['in1_features']}) and "
                             f"(..., {c['in2_features']}) with equal leading dimensions, got "
                             f"{x} and {y}")
        return x[:-1] + (c["out_features"],)
    if layer_type == "Flatten":
        return _flatten(ins[0], c["start_dim"], c["end_dim"])
    if layer_type in ("Dropout", "AlphaDropout", "PReLU"):
        return ins[0]
    if layer_type == "LayerNorm":
        norm = as_tuple(c["normalized_shape"], 1)
        if tuple(ins[0][len(ins[0]) - len(norm):]) != norm:
            raise ValueError(f"LayerNorm expects trailing dimensions {norm}, got shape "
                             f"{ins[0]}")
        return ins[0]
    n = _SPATIAL.get(layer_type[-2:]) if layer_type.endswith("d") else None
    if n is None:
        raise _Unknown
    base = layer_type[:-2]
    if base == "Dropout":
        _spatial(ins[0], n, None, what)
        return ins[0]
    if base == "Conv":
        return _conv(c, ins[0], n, what)
    if base == "ConvTranspose":
        return _conv_transpose(c, ins[0], n, what)
    if base in ("MaxPool", "AvgPool", "LPPool"):
        return _pool(c, ins[0], n, what)
    if base in ("AdaptiveMaxPool", "AdaptiveAvgPool"):
        return _adaptive(c, ins[0], n, what)
    if base in ("BatchNorm", "InstanceNorm"):
        return _norm(c, ins[0], n, what, base == "BatchNorm")
    raise _Unknown


_SPATIAL = {"1d": 1, "2d": 2, "3d": 3}


