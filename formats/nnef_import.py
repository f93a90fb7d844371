"""NNEF graph -> network IR: the lifter behind :func:`petab_sciml.formats.nnef.read`.

Each NNEF operation has a handler in ``_OPS`` that turns it into layers (where a pattern
matches: ``linear`` -> ``Linear``, ``conv`` -> ``ConvNd`` ...) or catalogue functions,
with variables claimed as layer arrays or kept as free parameters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, LAYERS
from petab_sciml.errors import NetworkError
from petab_sciml.formats.graph_building import (
    GraphBuilder,
    Tensor,
    call_arguments,
    drop_unused,
)
from petab_sciml.network import ID_PATTERN, FreeParameter, Network

_GENERIC_LABEL = re.compile(r"^variable\d*$")


def _source_names(mapping: Mapping[str, str] | None) -> dict[str, str]:
    """NNEF tensor name -> source name (inverse of a tensor-mapping JSON)."""
    out: dict[str, str] = {}
    for src, dst in (mapping or {}).items():
        if isinstance(src, str) and isinstance(dst, str):
            out.setdefault(dst, src)
    return out


def _scope_path(source: str) -> str | None:
    """Module path of an ONNX value name ``/block/block.0/Gemm_output_0`` (``block.0``)."""
    parts = [p for p in source.split("/") if p]
    if len(parts) >= 2 and re.search(r"_output_\d+$", parts[-1]):
        return parts[-2]
    return None


def _module_path_id(path: str) -> str:
    from petab_sciml.formats.torch_fx import module_path_id

    return module_path_id(path)


@dataclass
class _Array:
    """A variable or constant, possibly unsqueezed or reshaped, not yet a graph value."""

    data: np.ndarray
    base: str
    """NNEF tensor name of the variable."""
    ops: tuple[tuple[str, Any], ...] = ()
    constant: bool = False


@dataclass(frozen=True)
class _Marker:
    """A partial pattern (``sign(x)``, ``erf(x / sqrt 2)`` ...) awaiting its completion."""

    kind: str
    of: Any
    node: str = ""


@dataclass
class _Lifter(GraphBuilder):
    nnef: Any
    graph: Any
    source: Path
    shapes: dict[str, list[int]]
    names: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    free: dict[str, FreeParameter] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    env: dict[str, Any] = field(default_factory=dict)
    var_target: dict[str, str] = field(default_factory=dict)
    attr_nodes: dict[str, Tensor] = field(default_factory=dict)
    variables: dict[str, tuple[np.ndarray, bool]] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    missing_data: list[str] = field(default_factory=list)
    logical: set[str] = field(default_factory=set)
    """IR values that are bool tensors (comparisons): a cast to scalar must convert them."""
    where: str = ""

    def error(self, message: str) -> NetworkError:
        return NetworkError(message, file=self.source, entry=self.where or None)

    # ------------------------------------------------------------------ naming
    def source_name(self, tensor: str) -> str | None:
        """The source name of an NNEF tensor (mapping JSON, else a non-generic label)."""
        if tensor in self.names:
            return self.names[tensor]
        label = self.labels.get(tensor)
        if label and not _GENERIC_LABEL.match(label):
            return label.replace("/", ".")
        return None

    def layer_id(self, op_output: str, arrays: Sequence[str]) -> str:
        """An id for the layer computing ``op_output`` with variables ``arrays``."""
        candidates = []
        for var in arrays:
            src = self.source_name(var)
            if src and "." in src:
                candidates.append(src.rsplit(".", 1)[0])
        src = self.names.get(op_output)
        scope = _scope_path(src) if src else None
        if scope:
            candidates.append(scope)
        candidates.append(op_output)
        for path in candidates:
            ident = _module_path_id(path)
            if ident not in self.layers and not any(p.split(".")[0] == ident
                                                    for p in self.free):
                return ident
        base = _module_path_id(candidates[-1])
        i = 1
        while f"{base}_{i}" in self.layers:
            i += 1
        return f"{base}_{i}"

    # ------------------------------------------------------------------ values
    def value(self, v: Any) -> Any:
        if isinstance(v, self.nnef.Identifier) or (isinstance(v, str) and v in self.env):
            if v not in self.env:
                raise self.error(f"tensor {v!r} is used before it is defined")
            return self.env[v]
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, (bool, int, float)):
            return v
        raise self.error(f"unsupported argument {v!r}")

    def tensor(self, value: Any, what: str) -> Any:
        """``value`` as something a catalogue function accepts (tensor or number)."""
        if isinstance(value, Tensor) or isinstance(value, (int, float)) and not isinstance(
                value, bool):
            return value
        if isinstance(value, _Array):
            if value.data.size == 1 and not value.ops and value.constant:
                return float(value.data.reshape(()))
            return self.materialize(value)
        if isinstance(value, _Marker) and value.node:
            return Tensor(value.node)
        if isinstance(value, _Marker):
            raise self.error(f"{what}: the {value.kind} pattern is used in an unsupported "
                             "way")
        raise self.error(f"{what}: expected a tensor, got {value!r}")

    def materialize(self, array: _Array) -> Tensor:
        """A get_attr node of the array's variable (then its unsqueeze/reshape ops)."""
        target = self.var_target.get(array.base)
        if target is None:
            target = self.free_target(array.base)
        if target not in self.attr_nodes:
            self.attr_nodes[target] = self.emit("get_attr", target, [],
                                                base=target.replace(".", "_"))
        node: Any = self.attr_nodes[target]
        for op, arg in array.ops:
            if op == "unsqueeze":
                for axis in sorted(arg):
                    node = self.call("unsqueeze", {"input": node, "dim": axis})
            elif op == "reshape":
                node = self.call("reshape", {"input": node, "shape": list(arg)})
            elif op == "squeeze":
                node = self.call("squeeze", {"input": node, "dim": list(arg)})
        return node

    def free_target(self, var: str) -> str:
        from petab_sciml.formats.torch_fx import ROOT_GROUP

        src = self.source_name(var)
        if src and "." in src:
            group, array = src.rsplit(".", 1)
            group = _module_path_id(group)
        else:
            group, array = ROOT_GROUP, re.sub(r"\W", "_", src or var)
        if not ID_PATTERN.match(array):
            array = f"v_{array}"
        base_group = group
        i = 0
        while group in self.layers or f"{group}.{array}" in self.free:
            i += 1
            group = f"{base_group}_{i}"
        target = f"{group}.{array}"
        data = self.var_data(var)
        constant = self.var_constant(var)
        self.free[target] = FreeParameter(target, tuple(data.shape), not constant)
        self.params.setdefault(group, {})[array] = data
        self.var_target[var] = target
        return target

    def var_data(self, var: str) -> np.ndarray:
        return self.variables[var][0]

    def var_constant(self, var: str) -> bool:
        return self.variables[var][1]

    def array(self, value: Any, what: str) -> _Array | None:
        """``value`` as an array (None for a literal 0.0 bias)."""
        if isinstance(value, _Array):
            return value
        raise self.error(f"{what} must be a variable, got {value!r}")

    def claim(self, array: _Array, layer_id: str, name: str, shape: Sequence[int]) -> None:
        """Make ``array`` the layer's array ``name`` (reshaped to ``shape``)."""
        data = np.asarray(array.data)
        if data.size != math.prod(shape):
            raise self.error(f"{name} has {data.size} values; the layer needs shape "
                             f"{tuple(shape)}")
        target = f"{layer_id}.{name}"
        previous = self.var_target.get(array.base)
        if previous is not None and previous != target:
            raise self.error(f"variable {array.base!r} is used by two layers or as a free "
                             "parameter and a layer array")
        self.var_target[array.base] = target
        self.params.setdefault(layer_id, {})[name] = data.reshape(tuple(shape)).copy()

    # ------------------------------------------------------------------ emitting
    def call(self, function: str, values: Mapping[str, Any], base: str | None = None) -> Tensor:
        spec = FUNCTIONS[function]
        values = dict(values)
        for p in spec.params:
            if p.name in values and p.kind in ("tensor", "tensor|number"):
                values[p.name] = self.tensor(values[p.name], function)
            elif p.name in values and p.kind == "tensors":
                values[p.name] = [self.tensor(v, function) for v in values[p.name]]
        args, kwargs = call_arguments(spec, values, lambda p, v: v != p.default)
        return self.emit("call_function", function, args, kwargs, base=base or function)

    def shared(self, arrays: Sequence[Any]) -> str | None:
        """The layer that already owns all of ``arrays`` (a layer applied twice)."""
        owners = set()
        for a in arrays:
            if isinstance(a, _Array):
                target = self.var_target.get(a.base)
                owners.add(target.split(".")[0] if target else None)
        if len(owners) == 1:
            owner = owners.pop()
            return owner if owner in self.layers else None
        return None

    def reuse(self, layer_id: str, layer_type: str, args: dict[str, Any],
              inputs: Sequence[Any], node_name: str) -> Tensor:
        """Call an existing layer again (its arguments must agree)."""
        known = self.layers[layer_id]
        spec = LAYERS[layer_type]
        same = known["layer_type"] == layer_type and spec.resolve_args(
            known["args"]) == spec.resolve_args(args)
        if not same:
            raise self.error(f"variables of layer {layer_id!r} are used by a different "
                             "operation")
        tensors = [self.tensor(x, layer_type) for x in inputs]
        return self.emit("call_module", layer_id, tensors, base=node_name)

    def add_layer(self, layer_id: str, layer_type: str, args: dict[str, Any],
                  inputs: Sequence[Any], node_name: str) -> Tensor:
        spec = LAYERS[layer_type]
        try:
            config = spec.resolve_args(args, file=self.source, entry=f"layer {layer_id!r}")
        except NetworkError as exc:
            raise self.error(f"cannot express this as {layer_type}: {exc.message}") from None
        self.layers[layer_id] = {"layer_id": layer_id, "layer_type": layer_type,
                                 "args": {a.name: args[a.name] for a in spec.args
                                          if a.name in args}}
        for name in spec.array_shapes(config):
            arrays = self.params.get(layer_id, {})
            if name not in arrays:
                if name == "num_batches_tracked":
                    self.params.setdefault(layer_id, {})[name] = np.zeros((), np.int64)
                else:  # pragma: no cover - handlers claim every array
                    raise self.error(f"internal: array {name!r} of {layer_type} not set")
        tensors = [self.tensor(x, layer_type) for x in inputs]
        return self.emit("call_module", layer_id, tensors, base=node_name)

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        for op in self.graph.operations:
            outputs = list(op.outputs.values())
            self.where = f"operation {op.name} -> {', '.join(map(str, outputs))}"
            handler = _OPS.get(op.name)
            if handler is None:
                raise self.error(f"NNEF operation {op.name!r} is not supported (supported: "
                                 f"{', '.join(sorted(_OPS))})")
            result = handler(self, op)
            if len(outputs) == 1:
                self.env[outputs[0]] = result
            else:
                for name, value in zip(outputs, result):
                    self.env[name] = value
        self.where = ""

    def shape(self, tensor: Any) -> list[int] | None:
        if isinstance(tensor, str):
            return self.shapes.get(tensor)
        return None


# ----------------------------------------------------------------------------- op handlers
def _input(lf: _Lifter, op: Any, name: str) -> Any:
    return lf.value(op.inputs[name])


def _rank(lf: _Lifter, op: Any, name: str = "input") -> int | None:
    shape = lf.shape(op.inputs.get(name))
    return None if shape is None else len(shape)


def _out(op: Any) -> str:
    return str(next(iter(op.outputs.values())))


def _external(lf: _Lifter, op: Any) -> Tensor:
    name = _out(op)
    src = lf.names.get(name)
    node = lf.fresh(src if src and ID_PATTERN.match(src) else name)
    lf.nodes.append({"name": node, "op": "placeholder", "target": node})
    lf.placeholders.append(node)
    return Tensor(node)


def _variable(lf: _Lifter, op: Any) -> _Array:
    name = _out(op)
    tensor = lf.graph.tensors[name]
    lf.labels[name] = op.attribs.get("label", name)
    data = tensor.data
    if data is None:
        from petab_sciml import limits

        shape = [int(d) for d in op.attribs["shape"]]
        limits.check("max_elements", f"variable {name!r} of shape {shape}: elements",
                     math.prod(shape), file=lf.source, entry=f"variable {name!r}")
        data = np.zeros(shape, np.float32)
        lf.missing_data.append(name)
    data = np.asarray(data)
    if data.dtype == np.float64:
        data = data.astype(np.float32)
    lf.variables[name] = (data, False)
    return _Array(data, name)


def _constant(lf: _Lifter, op: Any) -> Any:
    shape = list(op.attribs["shape"])
    value = list(op.attribs["value"])
    if math.prod(shape) in (0, 1) and len(value) == 1 and not shape:
        return float(value[0]) if isinstance(value[0], (int, float)) else value[0]
    data = np.asarray(value, np.float32)
    data = np.broadcast_to(data, shape).copy() if data.size == 1 else data.reshape(shape)
    name = _out(op)
    lf.labels[name] = name
    lf.variables[name] = (data, True)
    return _Array(data, name, constant=True)


def _copy(lf: _Lifter, op: Any) -> Any:
    return _input(lf, op, "x" if "x" in op.inputs else next(iter(op.inputs)))


def _cast(lf: _Lifter, op: Any) -> Any:
    name = op.inputs[next(iter(op.inputs))]
    value = _plain(lf, lf.value(name))
    tensor = lf.graph.tensors.get(name) if isinstance(name, str) else None
    logical = isinstance(value, bool) or isinstance(value, Tensor) and (
        value.name in lf.logical or getattr(tensor, "dtype", None) == "logical")
    if op.dtype == "logical":
        if not logical:
            raise lf.error("cast<logical> of a non-logical value is not supported")
        return value
    if isinstance(value, (int, float)):
        return float(value) if op.dtype != "integer" else float(int(value))
    if logical:  # bool tensors stay bool under +, so make a float tensor now
        return lf.call("mul", {"input": value, "other": 1.0}, base=_out(op))
    if op.dtype == "integer":  # scalar -> integer drops the fraction (toward zero)
        return lf.call("trunc", {"input": value}, base=_out(op))
    return value


def _unary(function: str):
    def handler(lf: _Lifter, op: Any) -> Tensor:
        x = _input(lf, op, next(iter(op.inputs)))
        return lf.call(function, {"input": x}, base=_out(op))

    return handler


def _relu(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    if isinstance(x, _Marker) and x.kind == "abs":
        return _Marker("relu_abs", x.of, lf.call("relu", {"input": Tensor(x.node)},
                                                     base=_out(op)).name)
    return lf.call("relu", {"input": x}, base=_out(op))


def _abs(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    node = lf.call("abs", {"input": x}, base=_out(op))
    return _Marker("abs", x, node.name) if isinstance(x, Tensor) else node


def _sign(lf: _Lifter, op: Any) -> Any:
    # computed now (pruned if only the sign(x) * relu(abs(x)) = x identity uses it)
    x = _input(lf, op, "x")
    node = lf.call("sign", {"input": x}, base=_out(op))
    return _Marker("sign", x, node.name) if isinstance(x, Tensor) else node


def _erf(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    node = lf.call("erf", {"input": x}, base=_out(op))
    if isinstance(x, _Marker) and x.kind == "div_sqrt2":
        return _Marker("erf", x.of, node.name)
    return node


def _plain(lf: _Lifter, value: Any) -> Any:
    """A marker used as an ordinary value: its computed node (abs, relu(abs))."""
    if isinstance(value, _Marker) and value.node:
        return Tensor(value.node)
    return value


def _binary(function: str):
    def handler(lf: _Lifter, op: Any) -> Any:
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

    return handler


def _operand_shape(lf: _Lifter, op: Any, name: str, value: Any) -> tuple[int, ...] | None:
    if isinstance(value, _Array):
        return tuple(value.data.shape)
    shape = lf.shape(op.inputs[name]) if isinstance(value, Tensor) else None
    return None if shape is None else tuple(shape)


def _aligned(lf: _Lifter, op: Any, names: Sequence[str]) -> list[Any]:
    """The operands ``names``, NNEF broadcasting made explicit: NNEF gives a lower rank
    trailing singleton dimensions where PyTorch would add leading ones."""
    values = [_plain(lf, _input(lf, op, n)) for n in names]
    shapes = [_operand_shape(lf, op, n, v) for n, v in zip(names, values)]
    rank = max((len(s) for s in shapes if s is not None), default=0)
    out = []
    for value, shape in zip(values, shapes):
        if shape is not None and len(shape) < rank and any(d != 1 for d in shape):
            out.append(_extend(lf, value, len(shape), rank))
        else:
            out.append(value)
    return out


def _extend(lf: _Lifter, value: Any, rank: int, target: int) -> Any:
    """``value`` of rank ``rank`` with trailing singleton dimensions up to ``target``."""
    if isinstance(value, _Array):
        data = value.data.reshape(value.data.shape + (1,) * (target - rank))
        return _Array(data, value.base, value.ops + (("unsqueeze", list(range(rank, target))),),
                      value.constant)
    for _ in range(target - rank):
        value = lf.call("unsqueeze", {"input": value, "dim": -1})
    return value


def _compare(function: str):
    def handler(lf: _Lifter, op: Any) -> Tensor:
        x, y = _aligned(lf, op, ("x", "y"))
        node = lf.call(function, {"input": x, "other": y}, base=_out(op))
        lf.logical.add(node.name)
        return node

    return handler


def _logical(function: str):
    """``or`` / ``and`` of logical tensors: PyTorch's bool + bool / bool * bool."""
    def handler(lf: _Lifter, op: Any) -> Tensor:
        x, y = _aligned(lf, op, ("x", "y"))
        for v in (x, y):
            if not (isinstance(v, Tensor) and v.name in lf.logical):
                raise lf.error(f"{op.name} of a value that is not a comparison")
        node = lf.call(function, {"input": x, "other": y}, base=_out(op))
        lf.logical.add(node.name)
        return node

    return handler


def _select(lf: _Lifter, op: Any) -> Any:
    condition, a, b = _aligned(lf, op, ("condition", "true_value", "false_value"))
    if isinstance(condition, bool):
        return a if condition else b
    node = lf.call("where", {"condition": condition, "input": a, "other": b}, base=_out(op))
    if all(isinstance(v, Tensor) and v.name in lf.logical for v in (a, b)):
        lf.logical.add(node.name)
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


def _with_attrs(function: str, **attrs: str):
    def handler(lf: _Lifter, op: Any) -> Tensor:
        values = {"input": _plain(lf, _input(lf, op, "x"))}
        for nnef_name, name in attrs.items():
            if nnef_name in op.attribs:
                values[name] = float(op.attribs[nnef_name])
        return lf.call(function, values, base=_out(op))

    return handler


def _selu(lf: _Lifter, op: Any) -> Tensor:
    alpha, lam = op.attribs.get("alpha", 1.67326319), op.attribs.get("lambda", 1.05070102)
    if abs(alpha - 1.6732632423543772) > 1e-6 or abs(lam - 1.0507009873554805) > 1e-6:
        raise lf.error("selu with non-default alpha or lambda is not supported")
    return lf.call("selu", {"input": _input(lf, op, "x")}, base=_out(op))


def _softmax(lf: _Lifter, op: Any) -> Tensor:
    axes = list(op.attribs.get("axes", [1]))
    if len(axes) != 1:
        raise lf.error(f"softmax over several axes {axes} is not supported")
    return lf.call("softmax", {"input": _input(lf, op, "x"), "dim": axes[0]}, base=_out(op))


def _rcp(lf: _Lifter, op: Any) -> Tensor:
    return lf.call("div", {"input": 1.0, "other": _input(lf, op, "x")}, base=_out(op))


def _sqr(lf: _Lifter, op: Any) -> Tensor:
    return lf.call("pow", {"input": _input(lf, op, "x"), "exponent": 2.0}, base=_out(op))


def _rsqrt(lf: _Lifter, op: Any) -> Tensor:
    root = lf.call("sqrt", {"input": _input(lf, op, "x")})
    return lf.call("div", {"input": 1.0, "other": root}, base=_out(op))


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


def _axes(lf: _Lifter, axes: Sequence[int], rank: int | None) -> list[int]:
    out = []
    for a in axes:
        if a < 0:
            if rank is None:
                raise lf.error(f"negative axis {a} with an unknown rank")
            a += rank
        out.append(int(a))
    return out


def _reduce(function: str):
    def handler(lf: _Lifter, op: Any) -> Any:
        axes = _axes(lf, op.attribs["axes"], _rank(lf, op))
        if not axes:  # NNEF reduces nothing; PyTorch would reduce every dimension
            return _input(lf, op, "input")
        return lf.call(function, {"input": _input(lf, op, "input"), "dim": axes,
                                  "keepdim": True}, base=_out(op))

    return handler


def _squeeze(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = _axes(lf, op.attribs["axes"], _rank(lf, op))
    if isinstance(x, _Array):
        return _Array(np.squeeze(x.data, tuple(axes)), x.base, x.ops + (("squeeze", axes),),
                      x.constant)
    if not axes:
        return x
    return lf.call("squeeze", {"input": x, "dim": axes if len(axes) > 1 else axes[0]},
                   base=_out(op))


def _unsqueeze(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = list(op.attribs["axes"])
    if isinstance(x, _Array):
        data = x.data
        for a in sorted(axes):
            data = np.expand_dims(data, a)
        return _Array(data, x.base, x.ops + (("unsqueeze", axes),), x.constant)
    out = x
    shape_out = lf.shape(_out(op))
    rank = None if shape_out is None else len(shape_out)
    for a in sorted(_axes(lf, axes, rank)):
        out = lf.call("unsqueeze", {"input": out, "dim": a})
    return out


def _transpose(lf: _Lifter, op: Any) -> Tensor:
    axes = list(op.attribs["axes"])
    rank = _rank(lf, op)
    if rank is not None and len(axes) < rank:
        axes += list(range(len(axes), rank))
    return lf.call("permute", {"input": _input(lf, op, "input"), "dims": axes}, base=_out(op))


def _reshape(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    shape = [int(s) for s in op.attribs["shape"]]
    start = int(op.attribs.get("axis_start", 0))
    count = int(op.attribs.get("axis_count", -1))
    in_shape = lf.shape(op.inputs["input"])
    if isinstance(x, _Array):
        out_shape = lf.shape(_out(op))
        if out_shape is None:
            raise lf.error("reshape of a variable needs known shapes")
        return _Array(x.data.reshape(out_shape), x.base, x.ops + (("reshape", out_shape),),
                      x.constant)
    if start != 0 or count != -1:
        if in_shape is None:
            raise lf.error("reshape with axis_start/axis_count needs known shapes")
        end = len(in_shape) if count == -1 else start + count
        if shape == [-1] and end > start:
            return lf.call("flatten", {"input": x, "start_dim": start, "end_dim": end - 1},
                           base=_out(op))
        shape = [0] * start + shape + [0] * (len(in_shape) - end)
        shape = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)] if end == len(
            in_shape) else None
        if shape is None:
            shape = lf.shape(_out(op))
        if shape is None:
            raise lf.error("cannot resolve this reshape")
    zeros = [i for i, s in enumerate(shape) if s == 0]
    k = len(zeros)
    if zeros == list(range(k)) and shape[k:] == [-1]:
        return lf.call("flatten", {"input": x, "start_dim": k}, base=_out(op))
    if k == 1 and -1 not in shape:
        shape[zeros[0]] = -1
    elif k:
        if in_shape is None:
            raise lf.error(f"reshape to {shape} (0 copies a dimension) needs known shapes")
        shape = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return lf.call("reshape", {"input": x, "shape": shape}, base=_out(op))


def _concat(function: str):
    def handler(lf: _Lifter, op: Any) -> Tensor:
        values = _input(lf, op, "values")
        axis = int(op.attribs["axis"])
        return lf.call(function, {"tensors": values, "dim": axis}, base=_out(op))

    return handler


def _slice(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = list(op.attribs["axes"])
    begin, end = list(op.attribs["begin"]), list(op.attribs["end"])
    stride = list(op.attribs.get("stride") or [1] * len(axes))
    if not axes:
        return x
    shape = lf.shape(op.inputs["input"])
    axes = _axes(lf, axes, None if shape is None else len(shape))
    full = {"slice": [None, None, None]}
    index: list[Any] = [full] * (max(axes) + 1)
    flips = []
    for a, b, e, s in zip(axes, begin, end, stride):
        if s == 0:
            raise lf.error("slice with stride 0 is not supported")
        if s > 0:
            stop = None if (e == 0 and s == 1) else int(e)
            index[a] = {"slice": [int(b) if b else None, stop, None if s == 1 else int(s)]}
            continue
        if shape is None:
            raise lf.error("slice with a negative stride needs known shapes")
        flips.append(a)
        index[a] = _reversed_slice(int(shape[a]), int(b), int(e), -int(s))
    if flips:
        last = all(i == full for i in index)
        x = lf.call("flip", {"input": x, "dims": flips}, base=_out(op) if last else None)
        if last:
            return x
    return lf.call("getitem", {"input": x, "index": index}, base=_out(op))


def _reversed_slice(n: int, b: int, e: int, k: int) -> dict[str, list[Any]]:
    """The index, into the axis flipped, of NNEF's slice ``begin=b, end=e, stride=-k``
    (as the nnef_tools interpreter: b, b-k, ... while above e, after adding ``n`` to
    negative bounds and clamping them to [-1, n]; an element at n is out of range)."""
    b, e = (min(max(v + n if v < 0 else v, -1), n) for v in (b, e))
    if b == n:
        b -= k
    # element i of the axis is element n-1-i of the flipped axis
    start, stop = n - 1 - b, max(n - 1 - e, 0)
    return {"slice": [start or None, None if stop >= n else stop, None if k == 1 else k]}


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


_PAD_MODES = ("constant", "reflect", "replicate")


def _pad(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    padding = [(int(p), int(q)) for p, q in op.attribs["padding"]]
    border = op.attribs.get("border", "constant")
    if border == "reflect-even" and all(p <= 1 and q <= 1 for p, q in padding):
        border = "replicate"  # mirroring one element repeats the edge
    if border not in _PAD_MODES:
        raise lf.error(f"pad border {border!r} is not supported (PyTorch pads with "
                       f"{', '.join(map(repr, _PAD_MODES))})")
    shape = lf.shape(op.inputs["input"])
    rank = len(shape) if shape is not None else len(padding)
    if len(padding) != rank:
        raise lf.error(f"pad has {len(padding)} padding pairs for a rank-{rank} input")
    k = next((rank - i for i, p in enumerate(padding) if p != (0, 0)), 0)
    if not k:
        return x
    if border == "constant":
        value = float(op.attribs.get("value", 0.0))
        pad = [v for p, q in reversed(padding[rank - k:]) for v in (p, q)]
        return lf.call("pad", {"input": x, "pad": pad, "value": value or None}, base=_out(op))
    # PyTorch pads the last k = 1, 2 or 3 dimensions of a rank k+1 or k+2 input
    k = max(k, rank - 2)
    if k > 3:
        raise lf.error(f"pad with border {border!r} of {k} dimensions is not supported "
                       "(PyTorch pads at most the last 3 dimensions)")
    batch = k == rank
    if batch:
        x = lf.call("unsqueeze", {"input": x, "dim": 0})
    pads = [v for pair in reversed(padding[rank - k:]) for v in pair]
    crop = any(v < 0 for v in pads)
    x = lf.call("pad", {"input": x, "pad": [max(v, 0) for v in pads], "mode": border},
                base=None if batch or crop else _out(op))
    if crop:  # NNEF crops after padding (a constant pad by negative amounts crops)
        x = lf.call("pad", {"input": x, "pad": [min(v, 0) for v in pads]},
                    base=None if batch else _out(op))
    return lf.call("squeeze", {"input": x, "dim": 0}, base=_out(op)) if batch else x


def _matmul(lf: _Lifter, op: Any) -> Tensor:
    a, b = _input(lf, op, "A"), _input(lf, op, "B")
    a, b = lf.tensor(a, "matmul"), lf.tensor(b, "matmul")
    if op.attribs.get("transposeA"):
        a = lf.call("transpose", {"input": a, "dim0": -2, "dim1": -1})
    if op.attribs.get("transposeB"):
        b = lf.call("transpose", {"input": b, "dim0": -2, "dim1": -1})
    return lf.call("matmul", {"input": a, "other": b}, base=_out(op))


def _bias(lf: _Lifter, value: Any, layer_id: str, n: int) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != 0:
            raise lf.error(f"a constant bias {value} is not supported")
        return False
    array = lf.array(value, "bias")
    lf.claim(array, layer_id, "bias", (n,))
    return True


def _linear(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "linear filter")
    if weight.data.ndim != 2:
        raise lf.error(f"linear filter must be 2-d, got shape {weight.data.shape}")
    out_f, in_f = weight.data.shape
    bias_value = _input(lf, op, "bias")
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, "Linear", {"in_features": int(in_f), "out_features": int(
            out_f), "bias": isinstance(bias_value, _Array)}, [_input(lf, op, "input")],
            _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", (out_f, in_f))
    has_bias = _bias(lf, bias_value, layer_id, out_f)
    return lf.add_layer(layer_id, "Linear", {"in_features": int(in_f),
                                            "out_features": int(out_f), "bias": has_bias},
                        [_input(lf, op, "input")], _out(op))


def _window(lf: _Lifter, op: Any, n: int) -> tuple[list[int], list[int], list[int], list[tuple]]:
    """Spatial stride, dilation (defaults 1) and padding pairs of a conv-like op."""
    stride = list(op.attribs.get("stride") or [1] * n)
    dilation = list(op.attribs.get("dilation") or [1] * n)
    padding = [tuple(p) for p in op.attribs.get("padding") or []]
    return stride, dilation, padding


def _auto_padding(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                  dilation: Sequence[int]) -> list[tuple[int, int]]:
    """NNEF's automatic padding (TF 'SAME': extra element at the end)."""
    out = []
    for size, k, s, d in zip(sizes, kernel, stride, dilation):
        total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
        out.append((total // 2, total - total // 2))
    return out


def _conv(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "conv filter")
    n = weight.data.ndim - 2
    if n not in (1, 2, 3):
        raise lf.error(f"conv with {n} spatial dimensions is not supported")
    stride, dilation, padding = _window(lf, op, n)
    kernel = list(weight.data.shape[2:])
    groups = int(op.attribs.get("groups", 1))
    in_shape = lf.shape(op.inputs["input"])
    out_ch, in_per_group = weight.data.shape[:2]
    if groups == 0:
        groups = int(in_shape[1]) if in_shape else out_ch
    if not padding:
        if stride == [1] * n:
            pad: Any = "same"
        elif in_shape is None:
            raise lf.error("automatic conv padding with strides needs known shapes")
        else:
            padding = _auto_padding(in_shape[2:], kernel, stride, dilation)
    if padding:
        if all(p == q for p, q in padding):
            pad = [p for p, _ in padding]
        elif stride == [1] * n and all(
                (p, q) == (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                for (p, q), k, d in zip(padding, kernel, dilation)):
            pad = "same"
        else:
            raise lf.error(f"asymmetric conv padding {padding} is not supported")
    border = op.attribs.get("border", "constant")
    modes = {"constant": "zeros", "ignore": "zeros", "reflect": "reflect",
             "replicate": "replicate"}
    if border not in modes:
        raise lf.error(f"conv border {border!r} is not supported")
    bias_value = _input(lf, op, "bias")
    padded = pad == "same" or any(pad)
    args = {"in_channels": int(in_per_group * groups), "out_channels": int(out_ch),
            "kernel_size": _one(kernel), "stride": _one(stride), "padding": _one(pad),
            "dilation": _one(dilation), "groups": groups,
            "bias": isinstance(bias_value, _Array),
            "padding_mode": modes[border] if padded else "zeros"}
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    _bias(lf, bias_value, layer_id, out_ch)
    return lf.add_layer(layer_id, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))


def _one(values: Any) -> Any:
    """``[3, 3]`` -> ``3`` (PyTorch's spelling when all sizes agree)."""
    if isinstance(values, list) and values and all(v == values[0] for v in values):
        return int(values[0])
    return [int(v) for v in values] if isinstance(values, list) else values


def _deconv(lf: _Lifter, op: Any) -> Tensor:
    weight = lf.array(_input(lf, op, "filter"), "deconv filter")
    n = weight.data.ndim - 2
    stride, dilation, padding = _window(lf, op, n)
    groups = int(op.attribs.get("groups", 1))
    if groups == 0:
        raise lf.error("deconv with groups=0 is not supported")
    if op.attribs.get("output_shape"):
        raise lf.error("deconv with an explicit output_shape is not supported")
    if not padding:
        padding = [(0, 0)] * n
    if any(q > p for p, q in padding):
        raise lf.error(f"deconv padding {padding} (right above left) is not supported")
    in_ch, out_per_group = weight.data.shape[:2]
    bias_value = _input(lf, op, "bias")
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    has_bias = _bias(lf, bias_value, layer_id, out_per_group * groups)
    args = {"in_channels": int(in_ch), "out_channels": int(out_per_group * groups),
            "kernel_size": _one(list(weight.data.shape[2:])), "stride": _one(stride),
            "padding": _one([p for p, _ in padding]),
            "output_padding": _one([p - q for p, q in padding]), "groups": groups,
            "bias": has_bias, "dilation": _one(dilation)}
    return lf.add_layer(layer_id, f"ConvTranspose{n}d", args, [_input(lf, op, "input")],
                        _out(op))


def _torch_pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool(kind: str):
    def handler(lf: _Lifter, op: Any) -> Tensor:
        size = list(op.attribs["size"])
        rank = len(size)
        in_shape = lf.shape(op.inputs["input"])
        stride = list(op.attribs.get("stride") or [1] * rank)
        dilation = list(op.attribs.get("dilation") or [1] * rank)
        padding = [tuple(p) for p in op.attribs.get("padding") or []]
        if in_shape is not None and rank > len(in_shape):
            # nnef_tools writes windows of rank N+2 for unbatched inputs: drop the extra
            extra = rank - len(in_shape)
            if any(v != 1 for v in size[:extra] + stride[:extra] + dilation[:extra]):
                raise lf.error(f"pool window {size} does not fit an input of shape {in_shape}")
            size, stride, dilation = size[extra:], stride[extra:], dilation[extra:]
            padding = padding[-len(in_shape):] if padding else padding
            rank = len(in_shape)
        border = op.attribs.get("border", "constant")
        if not padding:
            if in_shape is None:
                raise lf.error("automatic pool padding needs known shapes")
            padding = _auto_padding(in_shape, size, stride, dilation)
        trivial = 0  # leading dimensions the window does not touch (batch, channel)
        while trivial < rank and size[trivial] == 1 and stride[trivial] == 1 and (
                dilation[trivial] == 1 and tuple(padding[trivial]) == (0, 0)):
            trivial += 1
        first = max(min(trivial, 2), rank - 3)
        n = rank - first
        if first < 1 or n < 1 or any(
                v != 1 for v in size[:first] + stride[:first] + dilation[:first]) or any(
                tuple(p) != (0, 0) for p in padding[:first]):
            raise lf.error("pooling over the batch or channel dimension is not supported")
        k, s, d = size[first:], stride[first:], dilation[first:]
        pads = padding[first:]
        ceil = any(p != q for p, q in pads)
        if any(q < p for p, q in pads):
            raise lf.error(f"pool padding {pads} (left above right) is not supported")
        if ceil:
            if in_shape is None:
                raise lf.error("asymmetric pool padding (ceil_mode) needs known shapes")
            for size_i, ki, si, di, (p, q) in zip(in_shape[first:], k, s, d, pads):
                nnef_out = (size_i + p + q - di * (ki - 1) - 1) // si + 1
                if _torch_pool_out(size_i, ki, si, p, di, True) != nnef_out:
                    raise lf.error(f"asymmetric pool padding {pads} is not PyTorch's "
                                   "ceil_mode for these sizes")
        pad = [p for p, _ in pads]
        layer_stride = None if s == k else _one(s)
        if kind == "max":
            if border not in ("ignore", "constant") or (border == "constant" and any(
                    p or q for p, q in pads)):
                raise lf.error(f"max_pool with border {border!r} and padding is not supported "
                               "(PyTorch pads with -inf: border 'ignore')")
            args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                    "dilation": _one(d), "ceil_mode": ceil}
            layer_type = f"MaxPool{n}d"
        else:
            if any(v != 1 for v in d):
                raise lf.error("avg_pool with dilation is not supported")
            args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                    "ceil_mode": ceil}
            any_pad = any(p or q for p, q in pads)
            if border == "ignore":
                args["count_include_pad"] = not any_pad
            elif border == "constant":
                args["count_include_pad"] = True
                if ceil:  # NNEF counts the overhang as zeros: divide by the full window
                    if n == 1:
                        raise lf.error("avg_pool with a zero border and asymmetric padding "
                                       "has no 1-d PyTorch equivalent")
                    args["divisor_override"] = int(math.prod(k))
            else:
                raise lf.error(f"avg_pool border {border!r} is not supported")
            layer_type = f"AvgPool{n}d"
        layer_id = lf.layer_id(_out(op), [])
        return lf.add_layer(layer_id, layer_type, args, [_input(lf, op, "input")], _out(op))

    return handler


def _vector(lf: _Lifter, value: Any, what: str, channels: int | None) -> _Array | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    array = lf.array(value, what)
    if array.constant and array.data.size and np.all(array.data == array.data.flat[0]):
        return float(array.data.flat[0])
    if channels is not None and array.data.size != channels:
        raise lf.error(f"{what} has {array.data.size} values; expected {channels}")
    return array


def _norm_rank(lf: _Lifter, op: Any) -> int:
    rank = _rank(lf, op)
    if rank is None:
        raise lf.error("normalization needs the input rank (shapes could not be inferred)")
    return rank


def _claim_affine(lf: _Lifter, op: Any, layer_id: str, scale: Any, offset: Any, c: int
                  ) -> None:
    """A norm's scale/offset as its weight/bias (a number where the other is a variable
    fills the array); numbers alone must be 1/0 (``affine=False``)."""
    if isinstance(scale, _Array) or isinstance(offset, _Array):
        for name, value in (("weight", scale), ("bias", offset)):
            if isinstance(value, _Array):
                lf.claim(value, layer_id, name, (c,))
            else:
                lf.params.setdefault(layer_id, {})[name] = np.full((c,), value, np.float32)
    elif scale != 1.0 or offset != 0.0:
        raise lf.error(f"{op.name} with constant scale/offset other than 1/0")


def _batch_norm(lf: _Lifter, op: Any) -> Tensor:
    rank = _norm_rank(lf, op)
    n = {2: 1, 3: 1, 4: 2, 5: 3}.get(rank)
    if n is None:
        raise lf.error(f"batch_normalization of a rank-{rank} tensor is not supported")
    mean = lf.array(_input(lf, op, "mean"), "batch_normalization mean")
    var = lf.array(_input(lf, op, "variance"), "batch_normalization variance")
    c = int(mean.data.size)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    affine = isinstance(offset, _Array) or isinstance(scale, _Array)
    arrays = [a.base for a in (scale, offset, mean, var) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    lf.claim(mean, layer_id, "running_mean", (c,))
    lf.claim(var, layer_id, "running_var", (c,))
    _claim_affine(lf, op, layer_id, scale, offset, c)
    args = {"num_features": c, "eps": float(op.attribs["epsilon"]), "affine": affine,
            "track_running_stats": True}
    return lf.add_layer(layer_id, f"BatchNorm{n}d", args, [_input(lf, op, "input")], _out(op))


def _mvn(lf: _Lifter, op: Any) -> Tensor:
    rank = _norm_rank(lf, op)
    axes = _axes(lf, op.attribs["axes"], rank)
    n = len(axes)
    # over the batch and spatial axes: a BatchNorm normalising with batch statistics
    batch = rank in (2, 3, 4, 5) and axes == [0, *range(2, rank)]
    if not batch and (n not in (1, 2, 3) or axes != list(range(rank - n, rank))
                      or rank not in (n + 1, n + 2)):
        raise lf.error(f"mean_variance_normalization over axes {axes} of a rank-{rank} "
                       "tensor is neither an instance norm nor a batch norm")
    shape = lf.shape(op.inputs["input"])
    c = int(shape[1] if batch else shape[rank - n - 1])
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    affine = isinstance(scale, _Array) or isinstance(offset, _Array)
    arrays = [a.base for a in (scale, offset) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    _claim_affine(lf, op, layer_id, scale, offset, c)
    args = {"num_features": c, "eps": float(op.attribs.get("epsilon", 1e-5)),
            "affine": affine, "track_running_stats": False}
    layer_type = f"BatchNorm{max(rank - 2, 1)}d" if batch else f"InstanceNorm{n}d"
    return lf.add_layer(layer_id, layer_type, args, [_input(lf, op, "input")], _out(op))


_OPS: dict[str, Any] = {
    "external": _external, "variable": _variable, "constant": _constant, "copy": _copy,
    "cast": _cast, "linear": _linear, "conv": _conv, "deconv": _deconv,
    "max_pool": _pool("max"), "avg_pool": _pool("avg"), "batch_normalization": _batch_norm,
    "mean_variance_normalization": _mvn, "reshape": _reshape, "squeeze": _squeeze,
    "unsqueeze": _unsqueeze, "transpose": _transpose, "concat": _concat("cat"),
    "stack": _concat("stack"), "slice": _slice, "matmul": _matmul,
    "relu": _relu, "abs": _abs, "sign": _sign, "erf": _erf, "prelu": _prelu, "pad": _pad,
    "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "exp": _unary("exp"),
    "log": _unary("log"), "sqrt": _unary("sqrt"), "neg": _unary("neg"),
    "gelu": _unary("gelu"), "silu": _unary("silu"), "softplus": _unary("softplus"),
    "elu": _with_attrs("elu", alpha="alpha"), "selu": _selu,
    "leaky_relu": _with_attrs("leaky_relu", alpha="negative_slope"),
    "softmax": _softmax, "rcp": _rcp, "sqr": _sqr, "rsqrt": _rsqrt, "clamp": _clamp,
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"),
    "div": _binary("div"), "pow": _binary("pow"), "min": _binary("min"),
    "max": _binary("max"), "mean_reduce": _reduce("mean"), "sum_reduce": _reduce("sum"),
    "max_reduce": _reduce("amax"), "min_reduce": _reduce("amin"),
    "sin": _unary("sin"), "cos": _unary("cos"), "floor": _unary("floor"),
    "ceil": _unary("ceil"), "round": _unary("round"), "gt": _compare("gt"), "lt": _compare("lt"),
    "ge": _compare("ge"), "le": _compare("le"), "eq": _compare("eq"), "select": _select,
    "or": _logical("add"), "and": _logical("mul"),
}


def lift_graph(nnef: Any, graph: Any, source: Path, shapes: dict[str, list[int]],
               mapping: Mapping[str, str] | None, *, net_id: str | None = None,
               input_ids: Sequence[str] | None = None, values: bool = True
               ) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """Lift a parsed NNEF graph (``shapes``: inferred tensor shapes; ``mapping``: a
    tensor-mapping JSON) to ``(network, {group: {array: ndarray}})``."""
    lifter = _Lifter(nnef, graph, source, shapes, _source_names(mapping))
    lifter.run()
    if lifter.missing_data and values:
        raise NetworkError(f"no values for variable(s) {', '.join(lifter.missing_data)} (a "
                           "bare graph.nnef has no .dat files: read the model folder)",
                           file=source)
    outputs = [lifter.env.get(name) for name in graph.outputs]
    out_names = []
    for name, value in zip(graph.outputs, outputs):
        value = _plain(lifter, value)
        if isinstance(value, _Array):
            value = lifter.materialize(value)
        if not isinstance(value, Tensor):
            raise NetworkError(f"graph output {name!r} is not a tensor", file=source)
        out_names.append(value.name)
    nodes = lifter.nodes + [{"name": "output", "op": "output", "target": "output",
                             "args": [out_names if len(out_names) > 1 else out_names[0]]}]
    nodes, free, params = drop_unused(nodes, lifter.free, lifter.params)
    inputs = list(lifter.placeholders)
    if input_ids is not None:
        if isinstance(input_ids, str) or len(input_ids) != len(inputs):
            raise NetworkError(f"input_ids lists {list(input_ids)!r} but the graph has "
                               f"{len(inputs)} input(s)", file=source, entry="input_ids")
        inputs = list(input_ids)
    if net_id is None:
        net_id = graph.name if ID_PATTERN.match(str(graph.name)) else "net"
    network = Network.build(net_id, inputs, list(lifter.layers.values()), nodes, free,
                            source=source)
    return network, params


