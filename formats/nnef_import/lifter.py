"""The NNEF lifter: the walk over the graph's operations (each converted by the handler
registered for it, :mod:`.registry`), the values handlers pass around (tensors, lazy
variables, partial patterns), naming, layers and the network at the end.
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
from petab_sciml.formats.graph_building import GraphBuilder, Tensor, call_arguments, drop_unused
from petab_sciml.network import ID_PATTERN, FreeParameter, Network

from .registry import HANDLERS

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
            handler = HANDLERS.get(op.name)
            if handler is None:
                raise self.error(f"NNEF operation {op.name!r} is not supported (supported: "
                                 f"{', '.join(sorted(HANDLERS.handlers))})")
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


# ----------------------------------------------------------------- helpers of the handlers


def _input(lf: _Lifter, op: Any, name: str) -> Any:
    return lf.value(op.inputs[name])


def _rank(lf: _Lifter, op: Any, name: str = "input") -> int | None:
    shape = lf.shape(op.inputs.get(name))
    return None if shape is None else len(shape)


def _out(op: Any) -> str:
    return str(next(iter(op.outputs.values())))


def _plain(lf: _Lifter, value: Any) -> Any:
    """A marker used as an ordinary value: its computed node (abs, relu(abs))."""
    if isinstance(value, _Marker) and value.node:
        return Tensor(value.node)
    return value


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


def _axes(lf: _Lifter, axes: Sequence[int], rank: int | None) -> list[int]:
    out = []
    for a in axes:
        if a < 0:
            if rank is None:
                raise lf.error(f"negative axis {a} with an unknown rank")
            a += rank
        out.append(int(a))
    return out


# ----------------------------------------------------------------------------- the network


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
    # variables whose .dat data was read are held by the archive, not only declared
    backed = sum(int(data.size) for name, (data, _) in lifter.variables.items()
                 if name not in lifter.missing_data)
    network = Network.build(net_id, inputs, list(lifter.layers.values()), nodes, free,
                            source=source, backed_elements=backed)
    return network, params
