"""The ONNX exporter's driver: walks the network, asks the registered exporter of each
layer and function for its ONNX nodes (:mod:`.registry`), and holds the helpers they
emit with (nodes, constants, initializers, shape inference of the graph so far).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.catalogue import as_tuple
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import Network, Ref

from ..export_common import ELEMENT_MOVING_FUNCTIONS, activation_bound
from ..onnx_import.importer import META_LAYER, META_LAYER_TYPE
from .registry import FUNCTION_OPSETS, FUNCTIONS, LAYER_OPSETS, LAYERS, MIN_EXPORT_OPSET

INT64_MAX = 2**63 - 1
NETWORK_ID_KEY = "petab_sciml.network_id"
"""The model metadata entry that holds the exported network's id."""

_DTYPES = {"float32": (np.float32, 1), "float64": (np.float64, 11)}
COMPARE_OPS = {"gt": "Greater", "lt": "Less", "ge": "GreaterOrEqual", "le": "LessOrEqual",
               "eq": "Equal"}
"""Catalogue comparisons -> ONNX ops (their results are bool tensors)."""


def required_opset(network: Network) -> int:
    """The lowest opset with a native op for everything in ``network`` (at least
    :data:`MIN_EXPORT_OPSET`)."""
    need = MIN_EXPORT_OPSET
    for node in network.nodes:
        rule = FUNCTION_OPSETS.get(node.function) if node.function is not None else None
        if rule is not None:
            need = max(need, rule(node.bound))
    for layer in network.layers.values():
        rule = LAYER_OPSETS.get(layer.type)
        if rule is not None:
            need = max(need, rule(layer.config))
    return need


class _Exporter:
    """Builds the ONNX graph of one network; registered exporters emit through it."""

    def __init__(self, network: Network, params: Mapping[str, Mapping[str, Any]],
                 input_shapes: Mapping[str, Sequence[Any]] | None, opset: int, dtype: str):
        self.onnx = require("onnx", "onnx")
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.network = network
        self.params = params
        self.input_shapes = dict(input_shapes or {})
        self.opset = opset
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        self.np_dtype, self.elem = _DTYPES[dtype]
        self.nodes: list[Any] = []
        self.inits: dict[str, Any] = {}
        self.inputs: list[Any] = []
        self.used: set[str] = set()
        self.value: dict[str, Any] = {}
        self.meta: dict[str, str] = {}
        self.shape_cache: dict[str, tuple | None] = {}
        self.entry = ""
        self.entry_name = ""
        self.bools: set[str] = set()
        """ONNX values that are bool tensors (comparisons, and shape ops of them)."""
        self.keep_bool = False
        """Whether the function being exported takes bool operands as they are (else they
        are cast to the float type, as PyTorch promotes them in arithmetic)."""

    # ------------------------------------------------------------------ emitting
    def error(self, message: str) -> NetworkError:
        return NetworkError(f"cannot export to ONNX: {message}", file=self.network.source,
                            entry=self.entry)

    def fresh(self, base: str) -> str:
        out, k = base, 1
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, *, name: str = "",
           **attrs: Any) -> Any:
        """Add a node; returns its output name (or names when n_out > 1)."""
        base = name or (self.entry_name + "_" + op_type.lower())
        outs = [self.fresh(base if i == 0 else f"{base}_{i}") for i in range(n_out)]
        node = self.helper.make_node(op_type, list(inputs), outs,
                                     name=self.fresh(f"/{self.entry_name}/{op_type}"),
                                     **{k: v for k, v in attrs.items() if v is not None})
        for key, value in self.meta.items():
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
        self.nodes.append(node)
        self.shape_cache.clear()
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, *, dtype: Any = None, name: str = "c") -> str:
        arr = np.asarray(value, dtype=dtype or self.np_dtype)
        out = self.fresh(f"{self.entry_name}_{name}")
        node = self.helper.make_node("Constant", [], [out], name=self.fresh(f"/{out}/Constant"),
                                     value=self.numpy_helper.from_array(arr, out))
        self.nodes.append(node)
        return out

    def ints(self, values: Sequence[int], name: str = "axes") -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), dtype=np.int64, name=name)

    def operand(self, v: Any) -> str:
        """The ONNX value of an argument: a node's value (bool tensors cast to the float
        type unless :attr:`keep_bool`), or a number as a constant."""
        if isinstance(v, Ref):
            name = self.value[v.name]
            if name in self.bools and not self.keep_bool:
                return self.op("Cast", [name], to=self.elem)
            return name
        if isinstance(v, bool):
            raise self.error(f"boolean operand {v!r}")
        return self.const(v)

    def input(self, bound: Mapping[str, Any]) -> str:
        """The ONNX value of the bound argument ``input``."""
        return self.operand(bound["input"])

    def init(self, group: str, array: str) -> str:
        """The initializer ``group.array`` (added on first use)."""
        name = f"{group}.{array}"
        if name not in self.inits:
            try:
                value = np.asarray(self.params[group][array])
            except KeyError:
                raise self.error(f"no value for the parameter array {name}") from None
            if value.dtype.kind == "f" or value.dtype.kind in "iub":
                value = value.astype(self.np_dtype)
            self.inits[name] = self.numpy_helper.from_array(value, name)
            self.used.add(name)
        return name

    def unbatch(self, x: str, n_spatial: int, what: str) -> tuple[str, bool]:
        """Add a batch axis to an unbatched input (rank n+1); unknown rank = batched.
        Returns the batched value and whether the axis was added."""
        r = self.rank(x)
        if r is not None and r == n_spatial + 1:
            return self.op("Unsqueeze", [x, self.ints([0])]), True
        if r is not None and r != n_spatial + 2:
            raise self.error(f"{what} expects a {n_spatial + 1}-D or {n_spatial + 2}-D "
                             f"input, got rank {r}")
        return x, False

    def rebatch(self, y: str, added: bool) -> str:
        """Undo :meth:`unbatch` on a result."""
        return self.op("Squeeze", [y, self.ints([0])]) if added else y

    def reduce(self, op: str, x: str, axes: Sequence[int] | None, keep: bool) -> str:
        """ReduceSum/Mean/Max/... over ``axes`` (None: all), with the axes as an input
        where the opset wants it."""
        if axes is None:
            return self.op(op, [x], keepdims=int(keep))
        if op == "ReduceSum" or self.opset >= 18:
            return self.op(op, [x, self.ints(axes)], keepdims=int(keep))
        return self.op(op, [x], axes=list(axes), keepdims=int(keep))

    def channel(self, value: str, rank: int) -> str:
        """A (C,) array reshaped to broadcast over axis 1 of a rank-``rank`` tensor."""
        return self.op("Reshape", [value, self.ints([-1] + [1] * (rank - 2), "shape")])

    # ------------------------------------------------------------------ shapes
    def shape(self, value: str) -> tuple | None:
        """Shape of ``value`` by ONNX shape inference of the graph so far (None entries
        for unknown sizes; None if even the rank is unknown)."""
        if value in self.shape_cache:
            return self.shape_cache[value]
        onnx, helper = self.onnx, self.helper
        graph = helper.make_graph(self.nodes, "partial", self.inputs,
                                  [helper.make_tensor_value_info(value, self.elem, None)],
                                  list(self.inits.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:
            inferred = model
        self.shape_cache.clear()
        for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
                list(inferred.graph.output):
            tt = vi.type.tensor_type
            if tt.HasField("shape"):
                self.shape_cache[vi.name] = tuple(
                    int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim)
        for name, t in self.inits.items():
            self.shape_cache[name] = tuple(t.dims)
        return self.shape_cache.setdefault(value, None)

    def rank(self, value: str) -> int | None:
        s = self.shape(value)
        return None if s is None else len(s)

    def need_rank(self, value: str, what: str) -> int:
        r = self.rank(value)
        if r is None:
            raise self.error(f"{what} needs the input rank; pass input_shapes")
        return r

    # ------------------------------------------------------------------ the graph
    def run(self) -> Any:
        """The checked ``onnx.ModelProto`` of the network."""
        self.add_inputs()
        for name in self.network.order:
            node = self.network.node_map[name]
            if node.op not in ("placeholder", "output"):
                self.value[name] = self.export_node(node)
        self.meta = {}
        return self.finish(self.add_outputs())

    def add_inputs(self) -> None:
        network = self.network
        for ph, input_id in zip(network.placeholders, network.inputs):
            dims = self.input_shapes.get(input_id, self.input_shapes.get(ph.name))
            if dims is None:
                dims = _default_input_shape(network, ph.name, input_id)
            shape = [d if isinstance(d, (int, str)) else None for d in dims]
            self.inputs.append(self.helper.make_tensor_value_info(input_id, self.elem, shape))
            self.used.add(input_id)
            self.value[ph.name] = input_id

    def export_node(self, node: Any) -> Any:
        """The ONNX value (or tuple of values) of one forward node."""
        self.entry = f"forward node {node.name!r}"
        self.entry_name = _plain_name(node.name)
        self.meta = {}
        if node.op == "get_attr":
            return self.init(node.bound["group"], node.bound["array"])
        if node.op != "call_module":
            return self.export_function(node.function, node.bound)
        layer = self.network.layers[node.target]
        self.meta = {META_LAYER: layer.id, META_LAYER_TYPE: layer.type}
        if layer.spec.function is not None:  # an activation module
            return self.export_function(
                layer.spec.function, activation_bound(layer, node.bound["inputs"][0]))
        ins = [tuple(self.value[r.name] for r in x) if isinstance(x, tuple)
               else self.value[x.name] for x in node.bound["inputs"]]
        handler = LAYERS.get(layer.type)
        if handler is None:  # pragma: no cover - every catalogue layer has one
            raise self.error(f"layer type {layer.type} has no ONNX export")
        return handler(self, layer, ins)

    def is_bool(self, v: Any) -> bool:
        return isinstance(v, Ref) and self.value[v.name] in self.bools

    def export_function(self, fn: str, b: Mapping[str, Any]) -> Any:
        """A catalogue function's ONNX value.  Bool tensors pass unchanged through
        functions that only move elements (and ``eq`` / ``where``); elsewhere they are
        cast to the float type, as PyTorch promotes them."""
        handler = FUNCTIONS.get(fn)
        if handler is None:  # pragma: no cover - every catalogue function has one
            raise self.error(f"function {fn} has no ONNX export")
        refs = [v for p, v in b.items() if p != "condition"]
        refs = [r for v in refs for r in (v if isinstance(v, tuple) else (v,))
                if isinstance(r, Ref)]
        all_bool = bool(refs) and all(self.is_bool(r) for r in refs)
        if fn == "where":
            all_bool = self.is_bool(b["input"]) and self.is_bool(b["other"])
        moves = fn in ELEMENT_MOVING_FUNCTIONS
        self.keep_bool = all_bool and (moves or fn in ("eq", "where"))
        try:
            out = handler(self, fn, b)
        finally:
            self.keep_bool = False
        if not isinstance(out, tuple) and (fn in COMPARE_OPS or (
                all_bool and (moves or fn == "where"))):
            self.bools.add(out)
        return out

    def add_outputs(self) -> list[Any]:
        helper = self.helper
        outputs = []
        refs = self.network.output_node.bound["outputs"]
        for i, ref in enumerate(refs):
            out_name = "output" if len(refs) == 1 else f"output_{i}"
            out_name = self.fresh(out_name) if out_name in self.used else out_name
            self.used.add(out_name)
            self.nodes.append(helper.make_node("Identity", [self.value[ref.name]], [out_name],
                                               name=self.fresh(f"/{out_name}/Identity")))
            elem = self.onnx.TensorProto.BOOL if self.value[ref.name] in self.bools \
                else self.elem
            outputs.append(helper.make_tensor_value_info(out_name, elem, None))
        return outputs

    def finish(self, outputs: list[Any]) -> Any:
        """The model of the graph built, shape-inferred and checked."""
        helper, network = self.helper, self.network
        graph = helper.make_graph(self.nodes, network.id, self.inputs, outputs,
                                  list(self.inits.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="petab-sciml-toolkit")
        # the network id, which an import gives back (the graph name may be changed by
        # other tools; the file name is the user's)
        helper.set_model_props(model, {NETWORK_ID_KEY: network.id})
        model.ir_version = min(model.ir_version, _max_ir_version(self.opset))
        try:
            model = self.onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:  # pragma: no cover - the checker below reports it
            pass
        try:
            self.onnx.checker.check_model(model, full_check=True)
        except Exception as exc:  # pragma: no cover - an exporter bug
            raise NetworkError(f"the exported ONNX model does not pass the ONNX checker: "
                               f"{exc}", file=network.source) from None
        return model


def _default_input_shape(network: Network, placeholder: str, input_id: str) -> list[Any]:
    """A batched shape with a dynamic batch size ``N`` read off the layer that consumes
    the input first (ONNX graph inputs need a rank)."""
    for name in network.order:
        node = network.node_map[name]
        if node.op != "call_module" or placeholder not in [r.name for r in
                                                             node.bound["inputs"]]:
            continue
        layer = network.layers[node.target]
        c, t = layer.config, layer.type
        n = int(layer.spec.spatial_dims or 0)
        spatial = [f"{input_id}_d{i}" for i in range(n)]
        if t == "Linear":
            return ["N", int(c["in_features"])]
        if t == "Bilinear":
            first = [r.name for r in node.bound["inputs"]].index(placeholder) == 0
            return ["N", int(c["in1_features"] if first else c["in2_features"])]
        if t.startswith(("Conv", "ConvTranspose")):
            return ["N", int(c["in_channels"])] + spatial
        if t.startswith(("BatchNorm", "InstanceNorm")):
            return ["N", int(c["num_features"])] + spatial
        if n:
            return ["N", f"{input_id}_c"] + spatial
        if t == "LayerNorm":
            return ["N", *as_tuple(c["normalized_shape"], 1)]
        if t in ("LSTM", "GRU", "RNN"):
            sizes = ["N", "L"] if c["batch_first"] else ["L", "N"]
            return [f"{input_id}_{d}" if d == "L" else d for d in sizes] + [c["input_size"]]
        break
    raise NetworkError(f"cannot export to ONNX: the shape of input {input_id!r} is unknown "
                       "(ONNX graph inputs need at least their rank); pass input_shapes "
                       "(--input-shape NAME=D0,D1,... on the command line)",
                       file=network.source, entry=f"input {input_id!r}")


def _max_ir_version(opset: int) -> int:
    """The oldest IR version that knows ``opset`` (what onnxruntime releases accept)."""
    from onnx import helper

    candidates = [row[1] for row in helper.VERSION_TABLE if row[2] >= opset]
    return min(candidates) if candidates else helper.VERSION_TABLE[-1][1]


def _plain_name(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out or "n"


def spatial_dims(layer: Any) -> int:
    """The number of spatial axes of a layer (0 for layers without)."""
    return int(layer.spec.spatial_dims or 0)


def dims(value: Any) -> list[int]:
    """An int or a list of ints as a list of ints."""
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def export(network: Network, params: Mapping[str, Mapping[str, Any]],
           input_shapes: Mapping[str, Sequence[Any]] | None, opset: int, dtype: str) -> Any:
    """The ONNX model of ``network`` at ``opset`` (see :func:`.export_model`)."""
    return _Exporter(network, params, input_shapes, opset, dtype).run()
