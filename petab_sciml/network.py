"""The framework-free network intermediate representation (IR).

A :class:`Network` has an id, ordered inputs, layers (id, type, args) and a forward graph
of :class:`Node` objects in the torch.fx style (``op``, ``target``, ``args``, ``kwargs``).
``get_attr`` nodes refer to :class:`FreeParameter` arrays that belong to no layer (used by
primitive graphs such as ONNX) or to a layer's array (``layer1.weight``).

Building a network with :meth:`Network.build` validates it completely; a ``Network``
object is therefore always well formed, and backends can build code from it without
re-checking.  Nodes keep their arguments exactly as written (``args``/``kwargs``, so
file -> IR -> file is lossless) and, separately, the arguments bound to the catalogue
signature with node references made explicit (``bound``), which is what backends run.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from petab_sciml.catalogue import (
    FUNCTIONS,
    SMOOTH_FUNCTIONS,
    FunctionSpec,
    LayerSpec,
    function_spec,
    layer_is_smooth,
    layer_spec,
)
from petab_sciml.errors import NetworkError

OPS = ("placeholder", "call_module", "call_function", "call_method", "get_attr", "output")
ID_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def unique_node_name(base: str, taken: set[str]) -> str:
    """A node name made from ``base`` (non-identifier characters replaced, no leading
    digit) that is not in ``taken`` and is not ``output``; adds it to ``taken``.

    Importers of primitive graphs (NNEF, TorchScript) use it to name the nodes they
    create."""
    base = re.sub(r"\W", "_", base) or "node"
    if base[0].isdigit():
        base = f"_{base}"
    name, i = base, 0
    while name in taken or name == "output":
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


@dataclass(frozen=True)
class Ref:
    """A reference to the value of the forward node called ``name``."""

    name: str


@dataclass(frozen=True)
class ArrayInfo:
    """Shape (PyTorch layout), trainability and fixed dtype (or None) of a parameter array."""

    shape: tuple[int, ...]
    trainable: bool = True
    dtype: str | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layer:
    """A layer: its id, catalogue type, arguments as written and resolved with defaults."""

    id: str
    type: str
    args: Mapping[str, Any]
    config: Mapping[str, Any]

    @property
    def spec(self) -> LayerSpec:
        return layer_spec(self.type)

    @property
    def stochastic(self) -> bool:
        """True if the layer draws random numbers in training mode (dropout)."""
        return self.spec.is_stochastic(self.config)

    def arrays(self) -> dict[str, ArrayInfo]:
        """The layer's parameter arrays, in catalogue order."""
        spec = self.spec
        out = {}
        for a in spec.array_specs(self.config):
            if a.present(self.config):
                out[a.name] = ArrayInfo(tuple(a.shape(self.config)), a.trainable, a.dtype)
        return out


@dataclass(frozen=True)
class FreeParameter:
    """A parameter array that belongs to no layer, addressed as ``group.array``."""

    id: str
    shape: tuple[int, ...]
    trainable: bool = True

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def array(self) -> str:
        return self.id.split(".", 1)[1]


@dataclass(frozen=True)
class Node:
    """One node of the forward graph.

    ``args``/``kwargs`` are as written in the source file.  ``function`` is the canonical
    catalogue name for call_function/call_method nodes.  ``bound`` holds what backends
    execute: for call_function/call_method the full signature with defaults and
    :class:`Ref` objects in tensor positions; for call_module ``{"inputs": (Ref, ...)}``;
    for output ``{"outputs": (Ref, ...)}``; for get_attr ``{"group", "array"}``.
    """

    name: str
    op: str
    target: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    function: str | None = None
    bound: Mapping[str, Any] = field(default_factory=dict)

    def refs(self) -> list[str]:
        """Names of the nodes this node reads."""
        found: list[str] = []
        _collect_refs(self.bound, found)
        return found


def _collect_refs(value: Any, found: list[str]) -> None:
    if isinstance(value, Ref):
        found.append(value.name)
    elif isinstance(value, Mapping):
        for v in value.values():
            _collect_refs(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_refs(v, found)


@dataclass(frozen=True)
class Network:
    """A validated network.  Build it with :meth:`Network.build`."""

    id: str
    inputs: tuple[str, ...]
    layers: Mapping[str, Layer]
    nodes: tuple[Node, ...]
    free_parameters: Mapping[str, FreeParameter] = field(default_factory=dict)
    source: str | None = None
    order: tuple[str, ...] = ()
    """Node names in execution (topological) order."""

    # ----------------------------------------------------------------- construction
    @classmethod
    def build(
        cls,
        id: str,
        inputs: Sequence[str],
        layers: Iterable[Mapping[str, Any] | Layer],
        nodes: Iterable[Mapping[str, Any] | Node],
        free_parameters: Iterable[Mapping[str, Any] | FreeParameter] = (),
        *,
        source: object | None = None,
        backed_elements: int = 0,
    ) -> Network:
        """Validate and build a network.

        ``layers`` items are ``{"layer_id", "layer_type", "args"}`` mappings (or
        :class:`Layer`), ``nodes`` items ``{"name", "op", "target", "args", "kwargs"}``
        mappings (or :class:`Node`), ``free_parameters`` items ``{"id", "shape",
        "trainable"}``.  Raises :class:`NetworkError` naming ``source`` and the entry.
        ``backed_elements``: parameter scalars whose values the source file holds (see
        :func:`petab_sciml.limits.check`).
        """
        file = None if source is None else str(source)
        if not isinstance(id, str) or not ID_PATTERN.match(id):
            raise NetworkError(
                f"network id must be a valid PEtab id (letters, digits, underscores, not "
                f"starting with a digit), got {id!r}", file=file, entry="nn_model_id",
            )
        input_ids = _check_inputs(inputs, file)
        built_layers = _build_layers(layers, file)
        free = _build_free_parameters(free_parameters, built_layers, file)
        _check_sizes(built_layers, free, file, backed_elements)
        built_nodes = _build_nodes(nodes, built_layers, free, file)
        order = _check_graph(built_nodes, input_ids, file)
        _check_tuple_values(built_nodes, built_layers, order, file)
        return cls(id, input_ids, built_layers, built_nodes, free, file, order)

    # ----------------------------------------------------------------- queries
    @property
    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @property
    def placeholders(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "placeholder")

    @property
    def output_node(self) -> Node:
        return next(n for n in self.nodes if n.op == "output")

    @property
    def n_outputs(self) -> int:
        return len(self.output_node.bound["outputs"])

    def parameter_arrays(self) -> dict[str, dict[str, ArrayInfo]]:
        """``{group: {array: ArrayInfo}}`` for every layer with arrays and every free
        parameter, layers first in declaration order.  Keys equal the torch ``state_dict``
        names ``group.array``."""
        out: dict[str, dict[str, ArrayInfo]] = {}
        for layer in self.layers.values():
            arrays = layer.arrays()
            if arrays:
                out[layer.id] = arrays
        for p in self.free_parameters.values():
            out.setdefault(p.group, {})[p.array] = ArrayInfo(p.shape, p.trainable)
        return out

    def parameter_count(self, *, trainable_only: bool = True) -> int:
        """Number of scalars in the network's (trainable) parameter arrays."""
        return sum(
            info.size
            for arrays in self.parameter_arrays().values()
            for info in arrays.values()
            if info.trainable or not trainable_only
        )

    @property
    def stochastic(self) -> bool:
        """True if a layer draws random numbers in training mode (dropout)."""
        return any(layer.stochastic for layer in self.layers.values())

    @property
    def smooth(self) -> bool:
        """True if every layer the graph calls and every function it applies is smooth
        (:data:`~petab_sciml.catalogue.SMOOTH_LAYERS`, ``SMOOTH_FUNCTIONS``): the network
        has no kinks (ReLU, max pooling, clamping, ...).  Solvers use it to decide where
        last-bit differences can change the steps they take."""
        for node in self.nodes:
            if node.op == "call_module":
                layer = self.layers.get(node.target)
                if layer is None or not layer_is_smooth(layer.type, layer.config):
                    return False
            elif node.op in ("call_function", "call_method") \
                    and node.function not in SMOOTH_FUNCTIONS:
                return False
        return True


# --------------------------------------------------------------------- validation
def _check_inputs(inputs: Sequence[str], file: str | None) -> tuple[str, ...]:
    if isinstance(inputs, str) or not isinstance(inputs, Sequence):
        raise NetworkError(f"inputs must be a list of input ids, got {inputs!r}",
                           file=file, entry="inputs")
    seen: set[str] = set()
    for i, input_id in enumerate(inputs):
        if not isinstance(input_id, str) or not ID_PATTERN.match(input_id):
            raise NetworkError(f"input id must be a valid PEtab id, got {input_id!r}",
                               file=file, entry=f"inputs[{i}]")
        if input_id in seen:
            raise NetworkError(f"duplicate input id {input_id!r}", file=file,
                               entry=f"inputs[{i}]")
        seen.add(input_id)
    return tuple(inputs)


def _build_layers(layers: Iterable[Mapping[str, Any] | Layer], file: str | None
                  ) -> dict[str, Layer]:
    out: dict[str, Layer] = {}
    for i, item in enumerate(layers):
        if isinstance(item, Layer):
            layer_id, layer_type, args = item.id, item.type, item.args
        else:
            if not isinstance(item, Mapping):
                raise NetworkError(f"a layer must be a mapping with layer_id, layer_type and "
                                   f"args, got {item!r}", file=file, entry=f"layers[{i}]")
            unknown = set(item) - {"layer_id", "layer_type", "args"}
            if unknown:
                raise NetworkError(f"unknown key {sorted(unknown)[0]!r}; expected layer_id, "
                                   f"layer_type, args", file=file, entry=f"layers[{i}]")
            if "layer_id" not in item:
                raise NetworkError("missing layer_id", file=file, entry=f"layers[{i}]")
            layer_id = item["layer_id"]
            layer_type = item.get("layer_type")
            args = item.get("args") or {}
        entry = f"layer {layer_id!r}"
        if not isinstance(layer_id, str) or not ID_PATTERN.match(layer_id):
            raise NetworkError(f"layer id must be a valid PEtab id, got {layer_id!r}",
                               file=file, entry=f"layers[{i}]")
        if layer_id in out:
            raise NetworkError(f"duplicate layer id {layer_id!r}", file=file, entry=entry)
        if layer_type is None:
            raise NetworkError("missing layer_type", file=file, entry=entry)
        spec = layer_spec(layer_type, file=file, entry=entry)
        config = spec.resolve_args(args, file=file, entry=entry)
        out[layer_id] = Layer(layer_id, layer_type, dict(args), config)
    return out


def _check_sizes(layers: Mapping[str, Layer], free: Mapping[str, FreeParameter],
                 file: str | None, backed: int = 0) -> None:
    """Every parameter array has a valid shape (non-negative sizes), and together they
    hold at most ``max_elements`` scalars (:mod:`petab_sciml.limits`): checked here, from
    the declared arguments, before anything anywhere allocates an array."""
    from petab_sciml import limits

    total = 0
    for layer in layers.values():
        entry = f"layer {layer.id!r}"
        try:
            arrays = layer.arrays()
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise NetworkError(f"the arguments of layer type {layer.type} give no valid "
                               f"parameter shapes: {type(exc).__name__}: {exc}", file=file,
                               entry=entry) from None
        for name, info in arrays.items():
            if any(d < 0 for d in info.shape):
                raise NetworkError(f"array {name!r} would have shape {tuple(info.shape)}: the "
                                   f"arguments of layer type {layer.type} must give "
                                   "non-negative sizes", file=file, entry=entry)
            total += info.size
            limits.check("max_elements", "parameter scalars the network declares", total,
                         file=file, entry=entry, backed=backed)
    for p in free.values():
        total += math.prod(p.shape)
        limits.check("max_elements", "parameter scalars the network declares", total,
                     file=file, entry=f"free parameter {p.id!r}", backed=backed)


def _build_free_parameters(items: Iterable[Mapping[str, Any] | FreeParameter],
                           layers: Mapping[str, Layer], file: str | None
                           ) -> dict[str, FreeParameter]:
    out: dict[str, FreeParameter] = {}
    for i, item in enumerate(items):
        if not isinstance(item, FreeParameter):
            if not isinstance(item, Mapping) or "id" not in item or "shape" not in item:
                raise NetworkError("a free parameter needs an id and a shape",
                                   file=file, entry=f"free_parameters[{i}]")
            shape = item["shape"]
            if not isinstance(shape, (list, tuple)) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
            ):
                raise NetworkError(f"shape must be a list of non-negative integers, got "
                                   f"{shape!r}", file=file, entry=f"free parameter {item['id']!r}")
            trainable = item.get("trainable", True)
            if not isinstance(trainable, bool):
                raise NetworkError(f"trainable must be true or false, got {trainable!r}",
                                   file=file, entry=f"free parameter {item['id']!r}")
            item = FreeParameter(item["id"], tuple(shape), trainable)
        pid = item.id
        parts = pid.split(".") if isinstance(pid, str) else []
        if len(parts) != 2 or not all(ID_PATTERN.match(p) for p in parts):
            raise NetworkError(f"free parameter id must read 'group.array' with two PEtab ids, "
                               f"got {pid!r}", file=file, entry=f"free_parameters[{i}]")
        if parts[0] in layers:
            raise NetworkError(f"free parameter group {parts[0]!r} clashes with a layer id",
                               file=file, entry=f"free parameter {pid!r}")
        if pid in out:
            raise NetworkError(f"duplicate free parameter {pid!r}", file=file,
                               entry=f"free parameter {pid!r}")
        out[pid] = item
    return out


def _as_ref(value: Any, kind: str) -> Any:
    if kind in ("tensor", "tensor|number") and isinstance(value, str):
        return Ref(value)
    if kind == "tensors":
        return tuple(Ref(v) for v in value)
    return value


def _bind_function(spec: FunctionSpec, op: str, args: Sequence[Any],
                   kwargs: Mapping[str, Any], file: str | None, entry: str) -> dict[str, Any]:
    bound = spec.bind(args, kwargs, method=op == "call_method", file=file, entry=entry)
    for param in spec.params:
        bound[param.name] = _as_ref(bound[param.name], param.kind)
    if not any(isinstance(bound[p.name], (Ref, tuple)) for p in spec.tensor_params()):
        raise NetworkError(f"function {spec.name} needs at least one tensor argument "
                           f"(the name of an earlier node)", file=file, entry=entry)
    return bound


def _build_nodes(items: Iterable[Mapping[str, Any] | Node], layers: Mapping[str, Layer],
                 free: Mapping[str, FreeParameter], file: str | None) -> tuple[Node, ...]:
    out: list[Node] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        if isinstance(item, Node):
            raw = {"name": item.name, "op": item.op, "target": item.target,
                   "args": list(item.args), "kwargs": dict(item.kwargs)}
        elif isinstance(item, Mapping):
            raw = dict(item)
        else:
            raise NetworkError(f"a forward node must be a mapping, got {item!r}",
                               file=file, entry=f"forward[{i}]")
        unknown = set(raw) - {"name", "op", "target", "args", "kwargs"}
        if unknown:
            raise NetworkError(f"unknown key {sorted(unknown)[0]!r}; expected name, op, "
                               f"target, args, kwargs", file=file, entry=f"forward[{i}]")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise NetworkError(f"node name must be a non-empty string, got {name!r}",
                               file=file, entry=f"forward[{i}]")
        entry = f"forward node {name!r}"
        if name in names:
            raise NetworkError(f"duplicate node name {name!r}", file=file, entry=entry)
        names.add(name)
        op = raw.get("op")
        if op not in OPS:
            raise NetworkError(f"op must be one of {', '.join(OPS)}, got {op!r}",
                               file=file, entry=entry)
        target = raw.get("target", name if op in ("placeholder", "output") else None)
        if not isinstance(target, str):
            raise NetworkError(f"target must be a string, got {target!r}", file=file,
                               entry=entry)
        args = raw.get("args") or []
        kwargs = raw.get("kwargs") or {}
        if not isinstance(args, (list, tuple)):
            raise NetworkError(f"args must be a list, got {args!r}", file=file, entry=entry)
        if not isinstance(kwargs, Mapping):
            raise NetworkError(f"kwargs must be a mapping, got {kwargs!r}", file=file,
                               entry=entry)
        function = None
        if op == "placeholder":
            if args or kwargs:
                raise NetworkError("a placeholder takes no args or kwargs", file=file,
                                   entry=entry)
            bound: dict[str, Any] = {}
        elif op == "call_module":
            if target not in layers:
                raise NetworkError(f"call_module target {target!r} is not a layer id "
                                   f"(layers: {', '.join(layers) or 'none'})", file=file,
                                   entry=entry)
            spec = layers[target].spec
            if kwargs:
                raise NetworkError(f"call_module of {target!r} takes no kwargs, got "
                                   f"{sorted(kwargs)}", file=file, entry=entry)
            bound = {"inputs": _layer_inputs(spec, target, args, file, entry)}
        elif op in ("call_function", "call_method"):
            spec_f = function_spec(op, target, file=file, entry=entry)
            function = spec_f.name
            bound = _bind_function(spec_f, op, args, kwargs, file, entry)
        elif op == "get_attr":
            if args or kwargs:
                raise NetworkError("get_attr takes no args or kwargs", file=file, entry=entry)
            bound = _bind_get_attr(target, layers, free, file, entry)
        else:  # output
            outputs = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
            if not outputs or not all(isinstance(a, str) for a in outputs):
                raise NetworkError(f"output args must name one or more nodes, got {args!r}",
                                   file=file, entry=entry)
            if kwargs:
                raise NetworkError("output takes no kwargs", file=file, entry=entry)
            bound = {"outputs": tuple(Ref(a) for a in outputs)}
        out.append(Node(name, op, target, tuple(args), dict(kwargs), function, bound))
    return tuple(out)


def _layer_inputs(spec: LayerSpec, target: str, args: Sequence[Any], file: str | None,
                  entry: str) -> tuple[Any, ...]:
    """The bound inputs of a call of layer ``target``: a :class:`Ref` per tensor input, a
    tuple of them for a tuple input (an LSTM's ``(h_0, c_0)``)."""
    if not spec.n_inputs <= len(args) <= spec.max_inputs:
        expected = (str(spec.n_inputs) if spec.max_inputs == spec.n_inputs
                    else f"{spec.n_inputs} to {spec.max_inputs}")
        raise NetworkError(f"layer {target!r} ({spec.type}) takes {expected} input(s), got "
                           f"{len(args)}", file=file, entry=entry)
    kinds = ("tensor",) * spec.n_inputs + spec.optional_inputs
    out: list[Any] = []
    for arg, kind in zip(args, kinds):
        if kind == "tensor":
            if not isinstance(arg, str):
                raise NetworkError(f"call_module args must be node names, got {args!r}",
                                   file=file, entry=entry)
            out.append(Ref(arg))
        else:  # tensors:K
            k = int(kind.partition(":")[2])
            if not (isinstance(arg, (list, tuple)) and len(arg) == k
                    and all(isinstance(a, str) for a in arg)):
                raise NetworkError(f"input {len(out) + 1} of layer {target!r} ({spec.type}) "
                                   f"must be a list of {k} node names, got {arg!r}",
                                   file=file, entry=entry)
            out.append(tuple(Ref(a) for a in arg))
    return tuple(out)


def _bind_get_attr(target: str, layers: Mapping[str, Layer],
                   free: Mapping[str, FreeParameter], file: str | None, entry: str
                   ) -> dict[str, Any]:
    if target in free:
        return {"group": free[target].group, "array": free[target].array}
    group, _, array = target.partition(".")
    if group in layers and array in layers[group].arrays():
        return {"group": group, "array": array}
    known = list(free) + [f"{lid}.{a}" for lid, layer in layers.items() for a in layer.arrays()]
    raise NetworkError(f"get_attr target {target!r} is neither a free parameter nor a layer "
                       f"array (known: {', '.join(known) or 'none'})", file=file, entry=entry)


def _check_graph(nodes: Sequence[Node], inputs: Sequence[str], file: str | None
                 ) -> tuple[str, ...]:
    by_name = {n.name: n for n in nodes}
    outputs = [n for n in nodes if n.op == "output"]
    if not outputs:
        raise NetworkError("the forward graph has no output node", file=file, entry="forward")
    if len(outputs) > 1:
        raise NetworkError(f"the forward graph has {len(outputs)} output nodes "
                           f"({', '.join(n.name for n in outputs)}); expected one",
                           file=file, entry="forward")
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise NetworkError(f"the forward graph has {len(placeholders)} placeholder node(s) "
                           f"but the network declares {len(inputs)} input(s) "
                           f"({', '.join(inputs)})", file=file, entry="forward")
    for node in nodes:
        for ref in node.refs():
            if ref not in by_name:
                raise NetworkError(f"uses undefined name {ref!r}", file=file,
                                   entry=f"forward node {node.name!r}")
            if by_name[ref].op == "output":
                raise NetworkError("cannot use the output node as an input", file=file,
                                   entry=f"forward node {node.name!r}")
    # Kahn's algorithm, stable with respect to the written order: of the nodes whose
    # inputs are placed, the one written first goes next (a heap of written positions).
    deps = {n.name: set(n.refs()) for n in nodes}
    users: dict[str, list[int]] = {}
    missing = []
    for i, n in enumerate(nodes):
        missing.append(len(deps[n.name]))
        for ref in deps[n.name]:
            users.setdefault(ref, []).append(i)
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    done: list[str] = []
    while ready:
        i = heapq.heappop(ready)
        done.append(nodes[i].name)
        for j in users.get(nodes[i].name, ()):
            missing[j] -= 1
            if missing[j] == 0:
                heapq.heappush(ready, j)
    if len(done) < len(nodes):
        placed = set(done)
        cycle = _find_cycle([n for n in nodes if n.name not in placed], deps)
        raise NetworkError(f"the forward graph has a cycle: {' -> '.join(cycle)}",
                           file=file, entry=f"forward node {cycle[0]!r}")
    return tuple(done)


def _find_cycle(pending: Sequence[Node], deps: Mapping[str, set[str]]) -> list[str]:
    names = {n.name for n in pending}
    start = pending[0].name
    path = [start]
    seen = {start}
    current = start
    while True:
        nxt = next(d for d in sorted(deps[current]) if d in names)
        if nxt in seen:
            # Reported in data-flow direction: each node feeds the next.
            return list(reversed(path[path.index(nxt):] + [nxt]))
        path.append(nxt)
        seen.add(nxt)
        current = nxt


def _describe(structure: Any) -> str:
    if structure == "tensor":
        return "a tensor"
    return "(" + ", ".join("tensor" if x == "tensor" else _describe(x) for x in structure) + ")"


def _check_tuple_values(nodes: Sequence[Node], layers: Mapping[str, Layer],
                        order: Sequence[str], file: str | None) -> None:
    """Layers and functions that return tuples (recurrent layers: ``output, h_n``;
    ``chunk``) may be read only by ``getitem`` with an integer index, as
    ``out, h = rnn(x)`` is traced."""
    by_name = {n.name: n for n in nodes}
    structure: dict[str, Any] = {}
    for name in order:
        node = by_name[name]
        tuples = [r for r in node.refs() if structure.get(r, "tensor") != "tensor"]
        if node.op == "call_module":
            structure[name] = layers[node.target].spec.output
        elif node.function is not None and FUNCTIONS[node.function].tuple_of is not None:
            structure[name] = FUNCTIONS[node.function].output(node.bound)
        if not tuples:
            continue
        ref = tuples[0]
        if node.op in ("call_function", "call_method") and node.function == "getitem" \
                and node.bound["input"] == Ref(ref) and len(tuples) == 1:
            index = node.bound["index"]
            items = structure[ref]
            if isinstance(index, int) and not isinstance(index, bool) \
                    and -len(items) <= index < len(items):
                structure[name] = items[index]
                continue
            raise NetworkError(f"{ref!r} is a tuple {_describe(items)}; index it with an "
                               f"integer in [-{len(items)}, {len(items)}), got {index!r}",
                               file=file, entry=f"forward node {name!r}")
        raise NetworkError(f"{ref!r} is a tuple {_describe(structure[ref])} (what its layer "
                           "returns); take one element with getitem (``out, h = rnn(x)``) "
                           "before using it", file=file, entry=f"forward node {name!r}")
