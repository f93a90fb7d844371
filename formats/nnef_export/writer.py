"""The NNEF writer's driver: walks the network, asks the registered writer of each layer
and function for its NNEF operations (:mod:`.registry`), and holds the helpers they emit
with (fresh names, operations, variables, operands of equal rank).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from petab_sciml.errors import NetworkError
from petab_sciml.network import Network, Ref

from ..export_common import ELEMENT_MOVING_FUNCTIONS, activation_bound
from .fragments import FRAGMENTS
from .registry import FUNCTIONS, LAYERS

KEYWORDS = {"version", "extension", "fragment", "graph", "tensor", "integer", "scalar",
            "logical", "string", "true", "false", "for", "in", "if", "else", "yield",
            "length_of", "shape_of", "range_of"}
"""Words of the NNEF syntax: never tensor or graph names."""


@dataclass(frozen=True)
class _Ident:
    """An NNEF tensor name (written bare, unlike a string)."""

    name: str


def _fmt(value: Any) -> str:
    """``value`` in NNEF syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        text = repr(v)
        return text if ("." in text or "e" in text or "n" in text) else text + ".0"
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, _Ident):
        return value.name
    raise TypeError(f"cannot write {value!r} in NNEF")


@dataclass(frozen=True)
class _Call:
    """A function call that is not an IR node of its own (an activation layer's)."""

    name: str
    function: str
    bound: Mapping[str, Any]


@dataclass(frozen=True)
class LayerCall:
    """What a layer writer is called with: the layer (or a functional pool as a
    :class:`~petab_sciml.formats.export_common.PoolLayer`), the name ``base`` of its
    result, its first input ``x`` with shape ``in_shape``, the result's shape
    ``out_shape`` (None for a tuple result) and the node's input references."""

    layer: Any
    base: str
    x: _Ident
    in_shape: Sequence[int]
    out_shape: Sequence[int] | None
    inputs: tuple = ()


def _names(value: Any) -> Any:
    """The NNEF tensor name(s) of a writer's result (nested tuples for tuple results)."""
    return value.name if isinstance(value, _Ident) else tuple(_names(v) for v in value)


class _Writer:
    """Emits NNEF text for a network whose node shapes are known."""

    def __init__(self, network: Network, params: Mapping[str, Mapping[str, np.ndarray]],
                 shapes: Mapping[str, tuple[int, ...]], input_shapes: Sequence[Sequence[int]]):
        self.network = network
        self.params = params
        self.shapes = dict(shapes)
        self.input_shapes = [list(s) for s in input_shapes]
        self.lines: list[str] = []
        self.taken: set[str] = set(KEYWORDS)
        self.names: dict[str, Any] = {}  # IR node -> NNEF tensor (a tuple for tuples)
        self.variables: dict[str, str] = {}  # IR target group.array@shape -> NNEF tensor
        self.files: dict[str, np.ndarray] = {}  # label -> data
        self.fragments: set[str] = set()
        self.logical: set[str] = set()  # NNEF tensors of type logical (comparisons)
        self.casts: dict[str, str] = {}  # logical tensor -> its cast<scalar>
        self.keep_logical = False
        self.where = ""

    # ------------------------------------------------------------------ emitting
    def error(self, message: str) -> NetworkError:
        return NetworkError(f"cannot write NNEF: {message}", file=self.network.source,
                            entry=self.where or None)

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base) or "t"
        if base[0].isdigit():
            base = f"t_{base}"
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def op(self, base: str, name: str, *args: Any, **attrs: Any) -> _Ident:
        """Write ``out = name(args, attrs)`` with a fresh ``out`` named after ``base``."""
        out = self.fresh(base)
        parts = [_fmt(a) for a in args] + [f"{k} = {_fmt(v)}" for k, v in attrs.items()]
        self.lines.append(f"    {out} = {name}({', '.join(parts)});")
        return _Ident(out)

    def variable(self, target: str, data: np.ndarray, shape: Sequence[int] | None = None
                 ) -> _Ident:
        """A variable holding ``data`` (reshaped to ``shape``), written once per shape;
        its label is ``target`` (plus the shape for a second shape of the same array)."""
        data = np.asarray(data, dtype=np.float32)
        if shape is not None:
            data = data.reshape(tuple(shape))
        key = f"{target}@{'x'.join(map(str, data.shape))}"
        if key in self.variables:
            return _Ident(self.variables[key])
        label = target
        if label in self.files:  # the same array in another shape (bias as [1, C] and [C])
            label = f"{target}.{'x'.join(map(str, data.shape)) or 'scalar'}"
        name = self.fresh(target.replace(".", "_"))
        self.lines.append(f"    {name} = variable<scalar>(shape = {_fmt(list(data.shape))}, "
                          f"label = {_fmt(label)});")
        self.files[label] = data
        self.variables[key] = name
        return _Ident(name)

    def array(self, layer_id: str, name: str, shape: Sequence[int] | None = None) -> _Ident:
        """The variable of the parameter array ``layer_id.name``."""
        try:
            data = np.asarray(self.params[layer_id][name])
        except KeyError:
            raise self.error(f"no values for array {layer_id}.{name}") from None
        return self.variable(f"{layer_id}.{name}", data, shape)

    def filled(self, base: str, shape: Sequence[int], value: float) -> _Ident:
        return self.op(base, "constant<scalar>", shape=list(shape), value=[float(value)])

    def slice_axis(self, base: str, x: _Ident, axis: int, start: int, stop: int) -> _Ident:
        return self.op(base, "slice", x, axes=[axis], begin=[start], end=[stop])

    def rank(self, name: str) -> int:
        return len(self.shapes[name])

    def axis(self, dim: int, rank: int) -> int:
        return dim + rank if dim < 0 else dim

    def value(self, ref: Any, logical: bool = False) -> Any:
        """The NNEF operand of an IR value.  Comparisons give logical tensors, which NNEF
        arithmetic does not take: they are cast to scalar (once) unless ``logical``."""
        if isinstance(ref, Ref):
            name = self.names[ref.name]
            if name in self.logical and not (logical or self.keep_logical):
                if name not in self.casts:
                    self.casts[name] = self.op(f"{name}_scalar", "cast<scalar>",
                                               _Ident(name)).name
                return _Ident(self.casts[name])
            return _Ident(name)
        if isinstance(ref, bool):
            raise self.error(f"boolean operand {ref!r}")
        if isinstance(ref, (int, float)):
            return float(ref)
        raise self.error(f"unsupported operand {ref!r}")

    def is_logical(self, ref: Any) -> bool:
        return isinstance(ref, Ref) and self.names[ref.name] in self.logical

    def operands(self, base: str, a: Any, b: Any) -> tuple[Any, Any]:
        """Binary operands of equal rank (see :meth:`aligned`)."""
        left, right = self.aligned(base, [a, b])
        return left, right

    def aligned(self, base: str, refs: Sequence[Any], logical: int | None = None
                ) -> list[Any]:
        """Operands of equal rank: NNEF broadcasts singleton dimensions only between
        tensors of the same rank (PyTorch aligns trailing dimensions), so lower-rank
        tensors are unsqueezed at the front.  Operand ``logical`` must be and stays
        logical (a select condition)."""
        out = []
        for i, ref in enumerate(refs):
            value = self.value(ref, logical=i == logical)
            if i == logical and value.name not in self.logical:
                raise self.error("a where condition that is not a comparison (NNEF select "
                                 "takes a logical tensor)")
            out.append(value)
        ranks = [len(self.shapes[r.name]) if isinstance(r, Ref) else None for r in refs]
        top = max((r for r in ranks if r is not None), default=None)
        for i, rank in enumerate(ranks):
            if rank is not None and rank < top:
                out[i] = self.op(f"{base}_broadcast", "unsqueeze", out[i],
                                 axes=list(range(top - rank)))
        return out

    def batched(self, call: LayerCall, write: Callable[[_Writer, LayerCall], _Ident]
                ) -> _Ident:
        """``write(self, call)``, on a batch of one where the input has no batch axis
        (rank spatial + 1) and the NNEF operation needs one."""
        n = call.layer.spec.spatial_dims
        if len(call.in_shape) != n + 1:
            return write(self, call)
        base = call.base
        x = self.op(f"{base}_batched", "unsqueeze", call.x, axes=[0])
        y = write(self, replace(call, base=f"{base}_unbatched", x=x,
                                in_shape=[1, *call.in_shape], out_shape=[1, *call.out_shape]))
        return self.op(base, "squeeze", y, axes=[0])

    # ------------------------------------------------------------------ the graph
    def run(self, net_id: str) -> str:
        """The text of ``graph.nnef``; the variables' data is in :attr:`files`."""
        inputs: list[str] = []
        outputs: list[str] = []
        shapes = iter(self.input_shapes)
        for name in self.network.order:
            node = self.network.node_map[name]
            self.where = f"forward node {name!r}"
            if node.op == "placeholder":
                ident = self.fresh(name)
                self.lines.append(f"    {ident} = external<scalar>(shape = "
                                  f"{_fmt(next(shapes))});")
                self.names[name] = ident
                inputs.append(ident)
            elif node.op == "output":
                outputs = self.outputs(node, inputs)
            else:
                self.names[name] = self.node_value(node)
        self.where = ""
        self.keep_unused_arrays()
        return self.text(net_id, inputs, outputs)

    def node_value(self, node: Any) -> Any:
        """The NNEF tensor name (or tuple of names) of a node that computes."""
        b = node.bound
        if node.op == "get_attr":
            return self.array(b["group"], b["array"]).name
        if node.op == "call_module":
            layer = self.network.layers[node.target]
            if layer.spec.function is not None:  # an activation module
                call = _Call(node.name, layer.spec.function,
                             activation_bound(layer, b["inputs"][0]))
                return self.function(call).name
            return _names(self.layer(node, layer))
        if node.function == "getitem" and isinstance(self.names.get(b["input"].name), tuple):
            return self.names[b["input"].name][b["index"]]
        refs = b.get("tensors") or [b.get("input")]
        # shape functions of comparisons stay logical (a select condition)
        self.keep_logical = node.function in ELEMENT_MOVING_FUNCTIONS and all(
            self.is_logical(r) for r in refs)
        try:
            result = _names(self.function(node))
            if self.keep_logical:
                self.logical.add(result)
        finally:
            self.keep_logical = False
        return result

    def layer(self, node: Any, layer: Any) -> Any:
        """The result of a layer's writer (an identifier, or a tuple of them)."""
        writer = LAYERS.get(layer.type)
        if writer is None:
            raise self.error(f"layer type {layer.type} has no NNEF equivalent")
        first = node.bound["inputs"][0]
        return writer(self, LayerCall(layer, node.name, _Ident(self.names[first.name]),
                                      self.shapes[first.name], self.shapes.get(node.name),
                                      tuple(node.bound["inputs"])))

    def function(self, node: Any) -> Any:
        """The result of a function's writer, called with the node (or :class:`_Call`)
        and the operand of its ``input`` (None where that is not a tensor)."""
        writer = FUNCTIONS.get(node.function)
        b = node.bound
        x = self.value(b.get("input")) if isinstance(b.get("input"), Ref) else None
        if writer is None:
            raise self.error(f"function {node.function} has no NNEF equivalent")
        return writer(self, node, x)

    def outputs(self, node: Any, inputs: list[str]) -> list[str]:
        """The graph's outputs: a copy where an output is an input or another output."""
        outputs: list[str] = []
        for ref in node.bound["outputs"]:
            ident = self.names[ref.name]
            if ident in inputs or ident in outputs:
                ident = self.op(f"{ref.name}_out", "copy", _Ident(ident)).name
            outputs.append(ident)
        return outputs

    def keep_unused_arrays(self) -> None:
        """Write the trainable arrays the graph does not use as variables too."""
        written = {key.split("@")[0] for key in self.variables}
        for group, arrays in self.network.parameter_arrays().items():
            for array, info in arrays.items():
                if f"{group}.{array}" not in written and info.dtype is None:
                    self.array(group, array)

    def text(self, net_id: str, inputs: list[str], outputs: list[str]) -> str:
        head = []
        if self.fragments:
            head += ["extension KHR_enable_fragment_definitions;",
                     "extension KHR_enable_operator_expressions;", ""]
            head += [text for name, text in FRAGMENTS.items() if name in self.fragments]
        graph_name = net_id if net_id not in KEYWORDS else f"{net_id}_graph"
        text = ["version 1.0;", "", *head,
                f"graph {graph_name}( {', '.join(inputs)} ) -> ( {', '.join(outputs)} )",
                "{", *self.lines, "}", ""]
        return "\n".join(text)
