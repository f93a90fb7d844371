"""Network IR -> ONNX model (opset 17 or newer).

Initializers are the parameter arrays under their IR names ``layer.array`` (PyTorch
layout; transposes happen in the graph, so the arrays are stored exactly as PyTorch
stores them).  Every ONNX node emitted for a layer carries the metadata
``pkg.petab_sciml.layer`` / ``pkg.petab_sciml.layer_type`` so that an import gives the
same layer ids and types back.  Ops that need the input rank or sizes (unbatched
convolutions, ``transpose``, adaptive pools whose output does not divide the input) ask
ONNX shape inference on the graph built so far, which knows them when the graph inputs
have shapes (``input_shapes``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.catalogue import POOL_FUNCTIONS, as_tuple, implicit_softmax_dim
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import Network, Ref

from .onnx_export_recurrent import export_recurrent
from .onnx_import import META_LAYER, META_LAYER_TYPE

MIN_EXPORT_OPSET = 17
_INT64_MAX = 2**63 - 1
_DTYPES = {"float32": (np.float32, 1), "float64": (np.float64, 11)}


def _required_opset(network: Network) -> int:
    """The lowest opset with a native op for everything in ``network`` (else 17)."""
    need = MIN_EXPORT_OPSET
    for node in network.nodes:
        if node.function == "gelu":
            need = max(need, 20)
        elif node.function == "pad" and node.bound["mode"] == "circular":
            need = max(need, 19)
        elif node.function in ("mish", "pad"):  # Pad: axes as an input (no rank needed)
            need = max(need, 18)
    for layer in network.layers.values():
        if layer.config.get("padding_mode") == "circular":
            need = max(need, 19)
    return need


class _Exporter:
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
        self.value: dict[str, str] = {}
        self.meta: dict[str, str] = {}
        self.shape_cache: dict[str, tuple | None] = {}
        self.entry = ""
        self.bools: set[str] = set()
        """ONNX values that are bool tensors (comparisons, and shape ops of them)."""
        self.keep_bool = False
        """Whether the function being exported takes bool operands as they are (else they
        are cast to the float type, as PyTorch promotes them in arithmetic)."""

    # ------------------------------------------------------------------ helpers
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
        if isinstance(v, Ref):
            name = self.value[v.name]
            if name in self.bools and not self.keep_bool:
                return self.op("Cast", [name], to=self.elem)
            return name
        if isinstance(v, bool):
            raise self.error(f"boolean operand {v!r}")
        return self.const(v)

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

    # ------------------------------------------------------------------ run
    def run(self) -> Any:
        helper = self.helper
        network = self.network
        for ph, input_id in zip(network.placeholders, network.inputs):
            dims = self.input_shapes.get(input_id, self.input_shapes.get(ph.name))
            if dims is None:
                dims = _default_input_shape(network, ph.name, input_id)
            shape = [d if isinstance(d, (int, str)) else None for d in dims]
            self.inputs.append(helper.make_tensor_value_info(input_id, self.elem, shape))
            self.used.add(input_id)
            self.value[ph.name] = input_id
        nodes = network.node_map
        for name in network.order:
            node = nodes[name]
            if node.op in ("placeholder", "output"):
                continue
            self.entry = f"forward node {name!r}"
            self.entry_name = _plain_name(name)
            self.meta = {}
            if node.op == "get_attr":
                self.value[name] = self.init(node.bound["group"], node.bound["array"])
            elif node.op == "call_module":
                layer = network.layers[node.target]
                self.meta = {META_LAYER: layer.id, META_LAYER_TYPE: layer.type}
                ins = [tuple(self.value[r.name] for r in x) if isinstance(x, tuple)
                       else self.value[x.name] for x in node.bound["inputs"]]
                if layer.spec.function is not None:  # an activation module
                    self.value[name] = _export_function(
                        self, layer.spec.function, _layer_bound(layer, node.bound["inputs"][0]))
                else:
                    self.value[name] = _export_layer(self, layer, ins)
            else:
                self.value[name] = _export_function(self, node.function, node.bound)
        self.meta = {}
        outputs = []
        refs = network.output_node.bound["outputs"]
        for i, ref in enumerate(refs):
            out_name = "output" if len(refs) == 1 else f"output_{i}"
            out_name = self.fresh(out_name) if out_name in self.used else out_name
            self.used.add(out_name)
            self.nodes.append(helper.make_node("Identity", [self.value[ref.name]], [out_name],
                                               name=self.fresh(f"/{out_name}/Identity")))
            elem = self.onnx.TensorProto.BOOL if self.value[ref.name] in self.bools \
                else self.elem
            outputs.append(helper.make_tensor_value_info(out_name, elem, None))
        graph = helper.make_graph(self.nodes, network.id, self.inputs, outputs,
                                  list(self.inits.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="petab-sciml-toolkit")
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


# ============================================================================ layers
def _unbatch(ex: _Exporter, x: str, n_spatial: int, what: str) -> tuple[str, bool]:
    """Add a batch axis to an unbatched input (rank n+1); unknown rank = batched."""
    r = ex.rank(x)
    if r is not None and r == n_spatial + 1:
        return ex.op("Unsqueeze", [x, ex.ints([0])]), True
    if r is not None and r != n_spatial + 2:
        raise ex.error(f"{what} expects a {n_spatial + 1}-D or {n_spatial + 2}-D input, "
                       f"got rank {r}")
    return x, False


def _rebatch(ex: _Exporter, y: str, added: bool) -> str:
    return ex.op("Squeeze", [y, ex.ints([0])]) if added else y


def _spatial(layer: Any) -> int:
    return int(layer.spec.spatial_dims or 0)


def _layer_bound(layer: Any, x: Ref) -> dict[str, Any]:
    """The bound arguments of the function an activation layer applies."""
    ignored = {a.name for a in layer.spec.args if a.ignored}
    return {"input": x, **{k: v for k, v in layer.config.items() if k not in ignored}}


class _PoolLayer:
    """A functional pool's arguments seen as the layer of the same maths."""

    def __init__(self, function: str, bound: Mapping[str, Any]):
        from petab_sciml.catalogue import LAYERS, POOL_FUNCTIONS

        self.type = POOL_FUNCTIONS[function]
        self.spec = LAYERS[self.type]
        self.id = function
        self.config = {k: v for k, v in bound.items() if k != "input"}


def _export_layer(ex: _Exporter, layer: Any, ins: list[Any]) -> Any:
    t = layer.type
    c = layer.config
    lid = layer.id
    if t in ("LSTM", "GRU", "RNN"):
        return export_recurrent(ex, layer, ins)
    if t == "LocalResponseNorm":
        return _lrn(ex, c, ins[0])
    if t == "Linear":
        w = ex.init(lid, "weight")
        x = ins[0]
        if ex.rank(x) == 2:
            args = [x, w] + ([ex.init(lid, "bias")] if c["bias"] else [])
            return ex.op("Gemm", args, transB=1)
        y = ex.op("MatMul", [x, ex.op("Transpose", [w], perm=[1, 0])])
        return ex.op("Add", [y, ex.init(lid, "bias")]) if c["bias"] else y
    if t == "Bilinear":
        y = ex.op("Einsum", [ins[0], ex.init(lid, "weight"), ins[1]],
                  equation="...i,oij,...j->...o")
        return ex.op("Add", [y, ex.init(lid, "bias")]) if c["bias"] else y
    if t.startswith("ConvTranspose"):
        return _conv_transpose(ex, layer, ins[0])
    if t.startswith("Conv"):
        return _conv(ex, layer, ins[0])
    if t.startswith(("MaxPool", "AvgPool", "LPPool")):
        return _pool(ex, layer, ins[0])
    if t.startswith(("AdaptiveAvgPool", "AdaptiveMaxPool")):
        return _adaptive_pool(ex, layer, ins[0])
    if t.startswith("BatchNorm"):
        return _batchnorm(ex, layer, ins[0])
    if t.startswith("InstanceNorm"):
        return _instancenorm(ex, layer, ins[0])
    if t == "LayerNorm":
        shape = list(as_tuple(c["normalized_shape"], 1))
        scale = ex.init(lid, "weight") if c["elementwise_affine"] else ex.const(np.ones(shape))
        args = [ins[0], scale]
        if c["elementwise_affine"] and c["bias"]:
            args.append(ex.init(lid, "bias"))
        return ex.op("LayerNormalization", args, axis=-len(shape), epsilon=float(c["eps"]))
    if t == "Flatten":
        return _flatten(ex, ins[0], c["start_dim"], c["end_dim"])
    if t in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        return ex.op("Dropout", [ins[0], ex.const(float(c["p"]), name="ratio")])
    if t == "PReLU":
        return _prelu(ex, layer, ins[0])
    raise ex.error(f"layer type {t} has no ONNX export")  # pragma: no cover


def _lrn(ex: _Exporter, c: Mapping[str, Any], x: str) -> str:
    """LRN for odd sizes.  For even sizes ONNX's window is centred the other way
    (``[c - size//2 + 1, c + size//2]``, PyTorch's ``[c - size//2, c + size//2 - 1]``)
    and onnxruntime runs only odd sizes, so PyTorch's maths is written out: the channel
    average of x**2 as an AveragePool over the padded channel axis."""
    size, alpha, beta, k = int(c["size"]), float(c["alpha"]), float(c["beta"]), float(c["k"])
    if size % 2:
        return ex.op("LRN", [x], size=size, alpha=alpha, beta=beta, bias=k)
    rank = ex.need_rank(x, "LocalResponseNorm of even size")
    if rank not in (3, 4):
        raise ex.error("LocalResponseNorm of even size is exported for inputs of rank 3 and "
                       f"4 only, got rank {rank}")
    sq = ex.op("Unsqueeze", [ex.op("Mul", [x, x]), ex.ints([1])])
    pads = [0] * (rank + 1) * 2
    pads[2], pads[rank + 1 + 2] = size // 2, (size - 1) // 2
    sq = ex.op("Pad", [sq, ex.ints(pads, "pads")])
    avg = ex.op("AveragePool", [sq], kernel_shape=[size] + [1] * (rank - 2))
    avg = ex.op("Squeeze", [avg, ex.ints([1])])
    div = ex.op("Pow", [ex.op("Add", [ex.op("Mul", [avg, ex.const(alpha)]), ex.const(k)]),
                        ex.const(beta)])
    return ex.op("Div", [x, div])


def _prelu(ex: _Exporter, layer: Any, x: str) -> str:
    """PRelu with PyTorch's (C,) weight reshaped to broadcast over axis 1 (C, 1, ..., 1)."""
    w = ex.init(layer.id, "weight")
    n = int(layer.config["num_parameters"])
    if n == 1:
        if ex.rank(x) == 0:  # a (1,) slope does not broadcast to a 0-d input
            w = ex.op("Reshape", [w, ex.ints([], "shape")])
        return ex.op("PRelu", [x, w])
    r = ex.need_rank(x, "PReLU with several parameters")
    if r > 2:
        w = _channel(ex, w, r)
    return ex.op("PRelu", [x, w])


def _conv_pads(layer: Any) -> tuple[list[int], list[int]]:
    c = layer.config
    n = _spatial(layer)
    k = as_tuple(c["kernel_size"], n)
    d = as_tuple(c["dilation"], n)
    p = c["padding"]
    if p == "valid":
        return [0] * n, [0] * n
    if p == "same":
        total = [di * (ki - 1) for ki, di in zip(k, d)]
        return [t // 2 for t in total], [t - t // 2 for t in total]
    p = list(as_tuple(p, n))
    return p, p


def _conv(ex: _Exporter, layer: Any, x: str) -> str:
    c = layer.config
    n = _spatial(layer)
    xb, added = _unbatch(ex, x, n, layer.type)
    begins, ends = _conv_pads(layer)
    mode = c["padding_mode"]
    if mode != "zeros" and (any(begins) or any(ends)):
        onnx_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
        if onnx_mode == "wrap" and ex.opset < 19:
            raise ex.error("circular padding needs opset 19 or newer")
        xb = ex.op("Pad", [xb, ex.ints([0, 0] + begins + [0, 0] + ends, "pads")],
                   mode=onnx_mode)
        begins, ends = [0] * n, [0] * n
    args = [xb, ex.init(layer.id, "weight")]
    if c["bias"]:
        args.append(ex.init(layer.id, "bias"))
    y = ex.op("Conv", args, kernel_shape=list(as_tuple(c["kernel_size"], n)),
              strides=list(as_tuple(c["stride"], n)), dilations=list(as_tuple(c["dilation"], n)),
              pads=begins + ends, group=int(c["groups"]))
    return _rebatch(ex, y, added)


def _conv_transpose(ex: _Exporter, layer: Any, x: str) -> str:
    c = layer.config
    n = _spatial(layer)
    xb, added = _unbatch(ex, x, n, layer.type)
    p = list(as_tuple(c["padding"], n))
    args = [xb, ex.init(layer.id, "weight")]
    if c["bias"]:
        args.append(ex.init(layer.id, "bias"))
    y = ex.op("ConvTranspose", args, kernel_shape=list(as_tuple(c["kernel_size"], n)),
              strides=list(as_tuple(c["stride"], n)), dilations=list(as_tuple(c["dilation"], n)),
              pads=p + p, output_padding=list(as_tuple(c["output_padding"], n)),
              group=int(c["groups"]))
    return _rebatch(ex, y, added)


def _pool(ex: _Exporter, layer: Any, x: str) -> str:
    c = layer.config
    t = layer.type
    n = _spatial(layer)
    k = list(as_tuple(c["kernel_size"], n))
    s = list(as_tuple(c["stride"], n)) if c["stride"] is not None else list(k)
    xb, added = _unbatch(ex, x, n, t)
    if t.startswith("MaxPool"):
        p = list(as_tuple(c["padding"], n))
        y = ex.op("MaxPool", [xb], kernel_shape=k, strides=s, pads=p + p,
                  dilations=list(as_tuple(c["dilation"], n)), ceil_mode=int(c["ceil_mode"]))
    elif t.startswith("AvgPool"):
        p = list(as_tuple(c["padding"], n))
        div = c.get("divisor_override")
        include = bool(c["count_include_pad"]) or div is not None
        y = ex.op("AveragePool", [xb], kernel_shape=k, strides=s, pads=p + p,
                  ceil_mode=int(c["ceil_mode"]), count_include_pad=int(include))
        if div is not None:
            y = ex.op("Mul", [y, ex.const(math.prod(k) / div)])
    else:  # LPPool: PyTorch's avg_pool(x^p) * k, then sign * relu(|.|) ** (1/p)
        norm = float(c["norm_type"])
        if norm.is_integer() and int(norm) % 2 == 0 and not c["ceil_mode"]:
            y = ex.op("LpPool", [xb], kernel_shape=k, strides=s, p=int(norm))
        else:
            powered = ex.op("Pow", [xb, ex.const(norm)])
            avg = ex.op("AveragePool", [powered], kernel_shape=k, strides=s,
                        ceil_mode=int(c["ceil_mode"]), count_include_pad=1)
            signed = ex.op("Mul", [ex.op("Sign", [avg]),
                                   ex.op("Relu", [ex.op("Abs", [avg])])])
            y = ex.op("Pow", [ex.op("Mul", [signed, ex.const(float(math.prod(k)))]),
                              ex.const(1.0 / norm)])
    return _rebatch(ex, y, added)


def _reduce(ex: _Exporter, op: str, x: str, axes: Sequence[int] | None, keep: bool) -> str:
    """ReduceSum/Mean/Max with axes as an input where the opset wants it."""
    if axes is None:
        return ex.op(op, [x], keepdims=int(keep))
    if op == "ReduceSum" or ex.opset >= 18:
        return ex.op(op, [x, ex.ints(axes)], keepdims=int(keep))
    return ex.op(op, [x], axes=list(axes), keepdims=int(keep))


def _adaptive_pool(ex: _Exporter, layer: Any, x: str) -> str:
    n = _spatial(layer)
    kind = "Avg" if "Avg" in layer.type else "Max"
    out = layer.config["output_size"]
    sizes = [out] * n if not isinstance(out, (list, tuple)) else list(out)
    if all(o == 1 for o in sizes):
        xb, added = _unbatch(ex, x, n, layer.type)
        op = "GlobalAveragePool" if kind == "Avg" else "GlobalMaxPool"
        return _rebatch(ex, ex.op(op, [xb]), added)
    shape = ex.shape(x)
    reduce = "ReduceMean" if kind == "Avg" else "ReduceMax"
    y = x
    for i, o in enumerate(sizes):
        axis = i - n
        size = None if shape is None or len(shape) < n else shape[axis]
        if o is None or o == size:
            continue
        if size is None:
            raise ex.error(f"{layer.type} with output size {o} needs the static input size "
                           "of its spatial axes; pass input_shapes")
        pieces = []
        for j in range(o):
            start, stop = (j * size) // o, -(-((j + 1) * size) // o)
            piece = ex.op("Slice", [y, ex.ints([start], "starts"), ex.ints([stop], "ends"),
                                    ex.ints([axis])])
            pieces.append(_reduce(ex, reduce, piece, [axis], True))
        y = pieces[0] if len(pieces) == 1 else ex.op("Concat", pieces, axis=axis)
    return y


def _channel(ex: _Exporter, value: str, rank: int) -> str:
    """A (C,) array reshaped to broadcast over axis 1 of a rank-``rank`` tensor."""
    return ex.op("Reshape", [value, ex.ints([-1] + [1] * (rank - 2), "shape")])


def _batchnorm(ex: _Exporter, layer: Any, x: str) -> str:
    c = layer.config
    lid = layer.id
    nf = int(c["num_features"])
    w = ex.init(lid, "weight") if c["affine"] else ex.const(np.ones(nf), name="ones")
    b = ex.init(lid, "bias") if c["affine"] else ex.const(np.zeros(nf), name="zeros")
    eps = float(c["eps"])
    if c["track_running_stats"]:
        m = c["momentum"]
        return ex.op("BatchNormalization", [x, w, b, ex.init(lid, "running_mean"),
                                            ex.init(lid, "running_var")],
                     epsilon=eps, momentum=1.0 - (0.1 if m is None else float(m)))
    # No running statistics: PyTorch normalises with the batch statistics in any mode.
    r = ex.need_rank(x, f"{layer.type} without running statistics")
    axes = [0] + list(range(2, r))
    return _normalize(ex, x, axes, eps, _channel(ex, w, r), _channel(ex, b, r))


def _normalize(ex: _Exporter, x: str, axes: Sequence[int], eps: float, w: str, b: str
               ) -> str:
    mean = _reduce(ex, "ReduceMean", x, axes, True)
    d = ex.op("Sub", [x, mean])
    var = _reduce(ex, "ReduceMean", ex.op("Mul", [d, d]), axes, True)
    y = ex.op("Div", [d, ex.op("Sqrt", [ex.op("Add", [var, ex.const(eps)])])])
    return ex.op("Add", [ex.op("Mul", [y, w]), b])


def _instancenorm(ex: _Exporter, layer: Any, x: str) -> str:
    c = layer.config
    lid = layer.id
    n = _spatial(layer)
    nf = int(c["num_features"])
    xb, added = _unbatch(ex, x, n, layer.type)
    w = ex.init(lid, "weight") if c["affine"] else ex.const(np.ones(nf), name="ones")
    b = ex.init(lid, "bias") if c["affine"] else ex.const(np.zeros(nf), name="zeros")
    if c["track_running_stats"]:  # eval mode: the running statistics, as BatchNorm
        y = ex.op("BatchNormalization", [xb, w, b, ex.init(lid, "running_mean"),
                                         ex.init(lid, "running_var")],
                  epsilon=float(c["eps"]))
    else:
        y = ex.op("InstanceNormalization", [xb, w, b], epsilon=float(c["eps"]))
    return _rebatch(ex, y, added)


def _flatten(ex: _Exporter, x: str, start: int, end: int) -> str:
    if start == 1 and end == -1:
        return ex.op("Flatten", [x], axis=1)
    if end == -1:
        return ex.op("Reshape", [x, ex.ints([0] * start + [-1], "shape")]) if start >= 0 \
            else _flatten_dynamic(ex, x, start, end)
    shape = ex.shape(x)
    if shape is not None and all(d is not None for d in shape):
        r = len(shape)
        s, e = start % r if r else 0, end % r if r else 0
        target = list(shape[:s]) + [math.prod(shape[s:e + 1])] + list(shape[e + 1:])
        return ex.op("Reshape", [x, ex.ints(target or [1], "shape")])
    return _flatten_dynamic(ex, x, start, end)


def _flatten_dynamic(ex: _Exporter, x: str, start: int, end: int) -> str:
    parts = []
    if start != 0:
        parts.append(ex.op("Shape", [x], end=start))
    parts.append(ex.ints([-1], "minus_one"))
    if end != -1:
        parts.append(ex.op("Shape", [x], start=end + 1))
    shape = parts[0] if len(parts) == 1 else ex.op("Concat", parts, axis=0)
    return ex.op("Reshape", [x, shape])


# ============================================================================ functions
_SHAPE_FUNCTIONS = {"flatten", "reshape", "permute", "transpose", "squeeze", "unsqueeze",
                    "contiguous", "getitem", "cat", "stack", "flip"}
"""Functions that move elements only: bool in, bool out (as in PyTorch)."""
_COMPARE_OPS = {"gt": "Greater", "lt": "Less", "ge": "GreaterOrEqual", "le": "LessOrEqual",
                "eq": "Equal"}


def _is_bool(ex: _Exporter, v: Any) -> bool:
    return isinstance(v, Ref) and ex.value[v.name] in ex.bools


def _export_function(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    handler = _FUNCTIONS.get(fn)
    if handler is None:  # pragma: no cover - every catalogue function has one
        raise ex.error(f"function {fn} has no ONNX export")
    refs = [v for p, v in b.items() if p != "condition"]
    refs = [r for v in refs for r in (v if isinstance(v, tuple) else (v,))
            if isinstance(r, Ref)]
    all_bool = bool(refs) and all(_is_bool(ex, r) for r in refs)
    if fn == "where":
        all_bool = _is_bool(ex, b["input"]) and _is_bool(ex, b["other"])
    ex.keep_bool = all_bool and (fn in _SHAPE_FUNCTIONS or fn in ("eq", "where"))
    try:
        out = handler(ex, b)
    finally:
        ex.keep_bool = False
    if not isinstance(out, tuple) and (fn in _COMPARE_OPS or (
            all_bool and (fn in _SHAPE_FUNCTIONS or fn == "where"))):
        ex.bools.add(out)
    return out


def _x(ex: _Exporter, b: Mapping[str, Any]) -> str:
    return ex.operand(b["input"])


def _simple(op: str, **attrs: Any):
    return lambda ex, b: ex.op(op, [_x(ex, b)], **attrs)


def _clip(ex: _Exporter, x: str, lo: float | None, hi: float | None) -> str:
    args = [x, "" if lo is None else ex.const(lo), "" if hi is None else ex.const(hi)]
    while args[-1] == "":
        args.pop()
    return ex.op("Clip", args)


def _gelu(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    approx = b["approximate"]
    if ex.opset >= 20:
        return ex.op("Gelu", [x], approximate=approx)
    if approx == "none":
        e = ex.op("Erf", [ex.op("Div", [x, ex.const(math.sqrt(2.0))])])
        return ex.op("Mul", [ex.op("Mul", [x, ex.op("Add", [e, ex.const(1.0)])]),
                             ex.const(0.5)])
    cube = ex.op("Mul", [ex.op("Pow", [x, ex.const(3.0)]), ex.const(0.044715)])
    inner = ex.op("Mul", [ex.op("Add", [x, cube]), ex.const(math.sqrt(2.0 / math.pi))])
    t = ex.op("Add", [ex.op("Tanh", [inner]), ex.const(1.0)])
    return ex.op("Mul", [ex.op("Mul", [x, ex.const(0.5)]), t])


def _softplus(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    beta, threshold = float(b["beta"]), float(b["threshold"])
    bx = x if beta == 1.0 else ex.op("Mul", [x, ex.const(beta)])
    sp = ex.op("Softplus", [bx])
    if beta != 1.0:
        sp = ex.op("Div", [sp, ex.const(beta)])
    return ex.op("Where", [ex.op("Greater", [bx, ex.const(threshold)]), x, sp])


def _mish(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    if ex.opset >= 18:
        return ex.op("Mish", [x])
    return ex.op("Mul", [x, ex.op("Tanh", [ex.op("Softplus", [x])])])


def _softmax(op: str):
    def fn(ex: _Exporter, b: Mapping[str, Any]) -> str:
        x = _x(ex, b)
        dim = b["dim"]
        if dim is None:
            dim = implicit_softmax_dim(ex.need_rank(x, "softmax without dim"))
        return ex.op(op, [x], axis=int(dim))
    return fn


def _arith(op: str):
    def fn(ex: _Exporter, b: Mapping[str, Any]) -> str:
        a = ex.operand(b["input"])
        other_v = b["other"] if "other" in b else b["exponent"]
        alpha = b.get("alpha", 1)
        if alpha != 1 and not isinstance(other_v, Ref):
            other = ex.const(float(other_v) * float(alpha))
        else:
            other = ex.operand(other_v)
            if alpha != 1:
                other = ex.op("Mul", [other, ex.const(float(alpha))])
        return ex.op(op, [a, other])
    return fn


def _cat(ex: _Exporter, b: Mapping[str, Any]) -> str:
    return ex.op("Concat", [ex.operand(r) for r in b["tensors"]], axis=int(b["dim"]))


def _stack(ex: _Exporter, b: Mapping[str, Any]) -> str:
    dim = int(b["dim"])
    parts = [ex.op("Unsqueeze", [ex.operand(r), ex.ints([dim])]) for r in b["tensors"]]
    return ex.op("Concat", parts, axis=dim)


def _dims(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _permute(ex: _Exporter, b: Mapping[str, Any]) -> str:
    dims = _dims(b["dims"])
    r = len(dims)
    return ex.op("Transpose", [_x(ex, b)], perm=[d % r if r else 0 for d in dims])


def _transpose(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    r = ex.need_rank(x, "transpose")
    perm = list(range(r))
    d0, d1 = int(b["dim0"]) % r, int(b["dim1"]) % r
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ex.op("Transpose", [x], perm=perm)


def _squeeze(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    if b["dim"] is None:
        return ex.op("Squeeze", [x])
    axes = _dims(b["dim"])
    shape = ex.shape(x)
    if shape is not None:  # PyTorch leaves dims that are not 1 alone
        axes = [a for a in axes if shape[a] is None or shape[a] == 1]
    if not axes:
        return ex.op("Identity", [x])
    return ex.op("Squeeze", [x, ex.ints(axes)])


def _reduce_fn(op: str):
    def fn(ex: _Exporter, b: Mapping[str, Any]) -> str:
        dim = b["dim"]  # None or [] (PyTorch): every axis
        axes = None if dim is None else _dims(dim)
        return _reduce(ex, op, _x(ex, b), axes or None, bool(b["keepdim"]))
    return fn


def _getitem(ex: _Exporter, b: Mapping[str, Any]) -> Any:
    whole = ex.value[b["input"].name] if isinstance(b["input"], Ref) else None
    if isinstance(whole, tuple):  # an element of a recurrent layer's (output, h_n)
        return whole[b["index"]]
    x = _x(ex, b)
    index = b["index"]
    items = list(index) if isinstance(index, list) else [index]
    if items.count("...") > 1:
        raise ex.error("an index with more than one Ellipsis")
    if "..." in items:
        k = items.index("...")
        before, after = items[:k], items[k + 1:]
    else:
        before, after = items, []
    # Input axes of the non-None items: before the Ellipsis from the left, after it from
    # the right (negative), so that the rank is not needed.
    slices: list[tuple[int, int, int, int]] = []
    ints: list[tuple[int, int]] = []
    axis = 0
    for it in before:
        if it is None:
            continue
        _classify(ex, it, axis, slices, ints)
        axis += 1
    axis = -sum(1 for it in after if it is not None)
    for it in after:
        if it is None:
            continue
        _classify(ex, it, axis, slices, ints)
        axis += 1
    y = x
    if slices:
        axes, starts, ends, steps = zip(*slices)
        y = ex.op("Slice", [y, ex.ints(starts, "starts"), ex.ints(ends, "ends"),
                            ex.ints(axes), ex.ints(steps, "steps")])
    for a, i in sorted((t for t in ints if t[0] >= 0), reverse=True) + \
            sorted(t for t in ints if t[0] < 0):
        y = ex.op("Gather", [y, ex.const(np.int64(i), dtype=np.int64, name="index")], axis=a)
    new_axes = []
    pos = 0
    for it in before:
        if it is None:
            new_axes.append(pos)
            pos += 1
        elif not isinstance(it, int):
            pos += 1
    pos = -1
    for it in reversed(after):
        if it is None:
            new_axes.append(pos)
            pos -= 1
        elif not isinstance(it, int):
            pos -= 1
    if new_axes:
        y = ex.op("Unsqueeze", [y, ex.ints(new_axes)])
    if y == x:
        y = ex.op("Identity", [x])
    return y


def _classify(ex: _Exporter, item: Any, axis: int, slices: list, ints: list) -> None:
    if isinstance(item, int) and not isinstance(item, bool):
        ints.append((axis, item))
        return
    start, stop, step = item["slice"]
    step = 1 if step is None else int(step)
    if step <= 0:
        raise ex.error("slice steps must be positive")
    if start is None and stop is None and step == 1:
        return
    slices.append((axis, 0 if start is None else int(start),
                   _INT64_MAX if stop is None else int(stop), step))


def _flatten_fn(ex: _Exporter, b: Mapping[str, Any]) -> str:
    return _flatten(ex, _x(ex, b), int(b["start_dim"]), int(b["end_dim"]))


def _reshape(ex: _Exporter, b: Mapping[str, Any]) -> str:
    return ex.op("Reshape", [_x(ex, b), ex.ints(_dims(b["shape"]), "shape")])


def _compare(op: str):
    return lambda ex, b: ex.op(op, [ex.operand(b["input"]), ex.operand(b["other"])])


def _where(ex: _Exporter, b: Mapping[str, Any]) -> str:
    cond = ex.value[b["condition"].name]
    if cond not in ex.bools:
        raise ex.error("the condition of where must be a comparison (a bool tensor)")
    return ex.op("Where", [cond, ex.operand(b["input"]), ex.operand(b["other"])])


def _prod(ex: _Exporter, b: Mapping[str, Any]) -> str:
    dim = b["dim"]
    return _reduce(ex, "ReduceProd", _x(ex, b), None if dim is None else [int(dim)],
                   bool(b["keepdim"]))


def _flip(ex: _Exporter, b: Mapping[str, Any]) -> str:
    return _flip_axes(ex, _x(ex, b), _dims(b["dims"]))


def _flip_axes(ex: _Exporter, x: str, dims: list[int]) -> str:
    if not dims:
        return ex.op("Identity", [x])
    k = len(dims)
    return ex.op("Slice", [x, ex.ints([-1] * k, "starts"), ex.ints([-_INT64_MAX - 1] * k, "ends"),
                           ex.ints(dims), ex.ints([-1] * k, "steps")])


def _divide(ex: _Exporter, b: Mapping[str, Any], rounding_mode: str | None) -> str:
    """Div, then Floor (``floor``) or sign(q) * floor(|q|) (``trunc``)."""
    q = _arith("Div")(ex, b)
    if rounding_mode == "floor":
        return ex.op("Floor", [q])
    if rounding_mode == "trunc":
        return _trunc(ex, q)
    return q


def _chunk(ex: _Exporter, b: Mapping[str, Any]) -> tuple[str, ...]:
    """Split into pieces of ceil(size / chunks) (needs the static size of the axis)."""
    x = _x(ex, b)
    shape = ex.shape(x)
    dim = int(b["dim"])
    chunks = int(b["chunks"])
    size = None if shape is None else shape[dim]
    if size is None:
        raise ex.error("chunk needs the static size of its axis; pass input_shapes")
    step = -(-size // chunks)
    sizes = [min(step, size - s) for s in range(0, size, step)]
    if len(sizes) != chunks:
        raise ex.error(f"chunk: a size of {size} does not split into {chunks} pieces")
    return tuple(ex.op("Split", [x, ex.ints(sizes, "split")], chunks, axis=dim))


def _unflatten(ex: _Exporter, b: Mapping[str, Any]) -> str:
    """Reshape to Shape(x)[:dim] + sizes + Shape(x)[dim+1:] (sizes may hold one -1)."""
    x = _x(ex, b)
    rank = ex.need_rank(x, "unflatten")
    dim = int(b["dim"]) % rank
    shape = ex.op("Shape", [x])
    parts = []
    if dim:
        parts.append(ex.op("Slice", [shape, ex.ints([0], "starts"), ex.ints([dim], "ends")]))
    parts.append(ex.ints(_dims(b["sizes"]), "sizes"))
    if dim < rank - 1:
        parts.append(ex.op("Slice", [shape, ex.ints([dim + 1], "starts"),
                                     ex.ints([rank], "ends")]))
    return ex.op("Reshape", [x, ex.op("Concat", parts, axis=0) if len(parts) > 1
                             else parts[0]])


def _trunc(ex: _Exporter, q: str) -> str:
    return ex.op("Mul", [ex.op("Sign", [q]), ex.op("Floor", [ex.op("Abs", [q])])])


def _round(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    if not b["decimals"]:
        return ex.op("Round", [x])  # half to even, as PyTorch
    scale = ex.const(10.0 ** int(b["decimals"]))
    return ex.op("Div", [ex.op("Round", [ex.op("Mul", [x, scale])]), scale])


def _remainder(ex: _Exporter, b: Mapping[str, Any]) -> str:
    """PyTorch's remainder (the sign of the divisor): a - b * floor(a / b)."""
    a, d = ex.operand(b["input"]), ex.operand(b["other"])
    return ex.op("Sub", [a, ex.op("Mul", [d, ex.op("Floor", [ex.op("Div", [a, d])])])])


def _functional_pool(fn: str):
    def export(ex: _Exporter, b: Mapping[str, Any]) -> str:
        layer = _PoolLayer(fn, b)
        x = _x(ex, b)
        if layer.type.startswith("Adaptive"):
            return _adaptive_pool(ex, layer, x)
        return _pool(ex, layer, x)
    return export


_ONNX_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
                   "circular": "wrap"}


def _pad(ex: _Exporter, b: Mapping[str, Any]) -> str:
    x = _x(ex, b)
    pad = [int(p) for p in b["pad"]]
    mode = b["mode"]
    if mode != "constant" and any(p < 0 for p in pad):
        raise ex.error(f"negative pads in {mode} mode have no ONNX equivalent")
    if mode == "circular" and ex.opset < 19:
        raise ex.error("circular padding needs opset 19 or newer")
    k = len(pad) // 2
    begins, ends = pad[0::2], pad[1::2]  # last axis first
    if ex.opset >= 18:
        args = [x, ex.ints(begins + ends, "pads")]
        axes = ex.ints([-1 - i for i in range(k)])
    else:
        r = ex.need_rank(x, "pad at opset 17")
        full_b, full_e = [0] * r, [0] * r
        for i in range(k):
            full_b[r - 1 - i], full_e[r - 1 - i] = begins[i], ends[i]
        args = [x, ex.ints(full_b + full_e, "pads")]
        axes = None
    value = b["value"]
    if mode == "constant" and value is not None and value != 0:
        args.append(ex.const(float(value), name="value"))
    elif axes is not None:
        args.append("")
    if axes is not None:
        args.append(axes)
    return ex.op("Pad", args, mode=_ONNX_PAD_MODES[mode])


_FUNCTIONS: dict[str, Any] = {
    "relu": _simple("Relu"),
    "relu6": lambda ex, b: _clip(ex, _x(ex, b), 0.0, 6.0),
    "hardtanh": lambda ex, b: _clip(ex, _x(ex, b), float(b["min_val"]), float(b["max_val"])),
    "hardswish": _simple("HardSwish"),
    "selu": _simple("Selu"),
    "silu": lambda ex, b: ex.op("Mul", [_x(ex, b), ex.op("Sigmoid", [_x(ex, b)])]),
    "leaky_relu": lambda ex, b: ex.op("LeakyRelu", [_x(ex, b)],
                                      alpha=float(b["negative_slope"])),
    "gelu": _gelu,
    "logsigmoid": lambda ex, b: ex.op("Neg", [ex.op("Softplus", [ex.op("Neg", [_x(ex, b)])])]),
    "tanhshrink": lambda ex, b: ex.op("Sub", [_x(ex, b), ex.op("Tanh", [_x(ex, b)])]),
    "softsign": _simple("Softsign"),
    "softplus": _softplus,
    "tanh": _simple("Tanh"),
    "sigmoid": _simple("Sigmoid"),
    "hardsigmoid": _simple("HardSigmoid", alpha=1.0 / 6.0, beta=0.5),
    "mish": _mish,
    "elu": lambda ex, b: ex.op("Elu", [_x(ex, b)], alpha=float(b["alpha"])),
    "celu": lambda ex, b: ex.op("Celu", [_x(ex, b)], alpha=float(b["alpha"])),
    "softmax": _softmax("Softmax"),
    "log_softmax": _softmax("LogSoftmax"),
    "add": _arith("Add"),
    "sub": _arith("Sub"),
    "mul": _arith("Mul"),
    "div": lambda ex, b: _divide(ex, b, b["rounding_mode"]),
    "pow": _arith("Pow"),
    "neg": _simple("Neg"),
    "matmul": lambda ex, b: ex.op("MatMul", [_x(ex, b), ex.operand(b["other"])]),
    "exp": _simple("Exp"),
    "log": _simple("Log"),
    "sqrt": _simple("Sqrt"),
    "abs": _simple("Abs"),
    "clamp": lambda ex, b: _clip(ex, _x(ex, b), None if b["min"] is None else float(b["min"]),
                                 None if b["max"] is None else float(b["max"])),
    "cat": _cat,
    "stack": _stack,
    "flatten": _flatten_fn,
    "reshape": _reshape,
    "permute": _permute,
    "transpose": _transpose,
    "squeeze": _squeeze,
    "unsqueeze": lambda ex, b: ex.op("Unsqueeze", [_x(ex, b), ex.ints([int(b["dim"])])]),
    "getitem": _getitem,
    "contiguous": lambda ex, b: ex.op("Identity", [_x(ex, b)]),
    "sum": _reduce_fn("ReduceSum"),
    "mean": _reduce_fn("ReduceMean"),
    "maximum": lambda ex, b: ex.op("Max", [_x(ex, b), ex.operand(b["other"])]),
    "minimum": lambda ex, b: ex.op("Min", [_x(ex, b), ex.operand(b["other"])]),
    "erf": _simple("Erf"),
    "sign": _simple("Sign"),
    "sin": _simple("Sin"),
    "cos": _simple("Cos"),
    **{fn: _compare(op) for fn, op in _COMPARE_OPS.items()},
    "where": _where,
    "amax": _reduce_fn("ReduceMax"),
    "amin": _reduce_fn("ReduceMin"),
    "prod": _prod,
    "flip": _flip,
    "pad": _pad,
    "unflatten": _unflatten,
    "chunk": _chunk,
    "reshape_as": lambda ex, b: ex.op("Reshape", [_x(ex, b),
                                                  ex.op("Shape", [ex.operand(b["other"])])]),
    "floor": _simple("Floor"),
    "ceil": _simple("Ceil"),
    "round": _round,
    "trunc": lambda ex, b: _trunc(ex, _x(ex, b)),
    "cumsum": lambda ex, b: ex.op("CumSum", [_x(ex, b), ex.const(np.int64(b["dim"]),
                                                                 dtype=np.int64, name="axis")]),
    "floor_divide": lambda ex, b: _divide(ex, b, "floor"),
    "remainder": _remainder,
    "local_response_norm": lambda ex, b: _lrn(ex, b, _x(ex, b)),
    **{fn: _functional_pool(fn) for fn in POOL_FUNCTIONS if fn != "local_response_norm"},
}


# ============================================================================ entry
def default_parameters(network: Network) -> dict[str, dict[str, np.ndarray]]:
    """PyTorch's default initialisation of ``network`` (torch backend, seed 0)."""
    from petab_sciml.backends.torch import BACKEND

    return BACKEND.get_parameters(BACKEND.build(network, seed=0))


def export_model(network: Network, params: Mapping[str, Mapping[str, Any]] | None = None, *,
                 input_shapes: Mapping[str, Sequence[Any]] | None = None,
                 opset: int | None = None, dtype: str = "float32") -> Any:
    """The ONNX ``ModelProto`` of ``network`` (see :func:`petab_sciml.formats.onnx.write`)."""
    if params is None:
        warnings.warn(f"network {network.id!r}: no parameters given; the ONNX initializers "
                      "hold PyTorch's default initialisation (seed 0)", UserWarning,
                      stacklevel=3)
        params = default_parameters(network)
    needed = _required_opset(network)
    if opset is None:
        opset = needed
    if opset < MIN_EXPORT_OPSET:
        raise ValueError(f"opset must be {MIN_EXPORT_OPSET} or newer, got {opset}")
    return _Exporter(network, params, input_shapes, int(opset), dtype).run()


__all__ = ["export_model", "default_parameters", "MIN_EXPORT_OPSET"]
