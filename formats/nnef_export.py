"""Network IR -> NNEF text: the writer behind :func:`petab_sciml.formats.nnef.write`.

Shapes of every value are computed by running the network in PyTorch once (NNEF inputs
have fixed shapes); each IR node becomes one or more NNEF operations.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, POOL_FUNCTIONS
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import Network, Ref

from . import nnef_export_extra as nnef_extra

_TENSOR_KINDS = ("tensor", "tensor|number", "tensors")
_KEEPS_TYPE = {"reshape", "flatten", "permute", "transpose", "squeeze", "unsqueeze",
               "getitem", "flip", "contiguous", "cat", "stack"}
"""Functions that move elements without computing: a logical input stays logical."""
_KEYWORDS = {"version", "extension", "fragment", "graph", "tensor", "integer", "scalar",
             "logical", "string", "true", "false", "for", "in", "if", "else", "yield",
             "length_of", "shape_of", "range_of"}

_ERF_FRAGMENT = """fragment erf( x: tensor<scalar> ) -> ( y: tensor<scalar> )
{
    t = 1.0 / (1.0 + 0.3275911 * abs(x));
    p = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
         + 0.254829592) * t;
    y = sign(x) * (1.0 - p * exp(-x * x));
}
"""
"""NNEF has no erf; like nnef_tools, the writer declares it as a fragment whose body is
Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), so tools that lower fragments can
run it and tools that know erf (our reader among them) keep it exact."""

_MVN_FRAGMENT = """fragment mean_variance_normalization(
    input: tensor<scalar>,
    scale: tensor<scalar>,
    offset: tensor<scalar>,
    axes: integer[],
    epsilon: scalar = 1e-5 )
-> ( output: tensor<scalar> )
{
    mean, variance = moments(input, axes = axes);
    output = scale * (input - mean) / sqrt(variance + epsilon) + offset;
}
"""



def _fmt(value: Any) -> str:
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
class _Ident:
    name: str


class _Writer:
    """Emits NNEF text for a network whose node shapes are known."""

    def __init__(self, network: Network, params: Mapping[str, Mapping[str, np.ndarray]],
                 shapes: Mapping[str, tuple[int, ...]], input_shapes: Sequence[Sequence[int]]):
        self.network = network
        self.params = params
        self.shapes = dict(shapes)
        self.input_shapes = [list(s) for s in input_shapes]
        self.lines: list[str] = []
        self.taken: set[str] = set(_KEYWORDS)
        self.names: dict[str, str] = {}  # IR node -> NNEF tensor
        self.variables: dict[str, str] = {}  # IR target group.array -> NNEF tensor
        self.files: dict[str, np.ndarray] = {}  # label -> data
        self.fragments: set[str] = set()
        self.logical: set[str] = set()  # NNEF tensors of type logical (comparisons)
        self.casts: dict[str, str] = {}  # logical tensor -> its cast<scalar>
        self.keep_logical = False
        self.where = ""

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
        out = self.fresh(base)
        parts = [_fmt(a) for a in args] + [f"{k} = {_fmt(v)}" for k, v in attrs.items()]
        self.lines.append(f"    {out} = {name}({', '.join(parts)});")
        return _Ident(out)

    def variable(self, target: str, data: np.ndarray, shape: Sequence[int] | None = None
                 ) -> _Ident:
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
        try:
            data = np.asarray(self.params[layer_id][name])
        except KeyError:
            raise self.error(f"no values for array {layer_id}.{name}") from None
        return self.variable(f"{layer_id}.{name}", data, shape)

    def rank(self, name: str) -> int:
        return len(self.shapes[name])

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

    # ------------------------------------------------------------------ nodes
    def run(self, net_id: str) -> str:
        network = self.network
        inputs = []
        nodes = network.node_map
        placeholder_index = 0
        for name in network.order:
            node = nodes[name]
            self.where = f"forward node {name!r}"
            if node.op == "placeholder":
                ident = self.fresh(name)
                shape = self.input_shapes[placeholder_index]
                placeholder_index += 1
                self.lines.append(f"    {ident} = external<scalar>(shape = {_fmt(shape)});")
                self.names[name] = ident
                inputs.append(ident)
            elif node.op == "get_attr":
                group, array = node.bound["group"], node.bound["array"]
                self.names[name] = self.array(group, array).name
            elif node.op == "call_module":
                layer = network.layers[node.target]
                if layer.spec.function is not None:  # an activation module
                    self.names[name] = self.function(_Call(
                        name, layer.spec.function, _layer_bound(layer, node))).name
                elif layer.type in ("LSTM", "GRU", "RNN"):
                    self.names[name] = self.recurrent(node, layer)
                else:
                    self.names[name] = self.layer(node).name
            elif node.function == "chunk":
                self.names[name] = self.chunk(node)
            elif node.function == "getitem" and isinstance(
                    self.names.get(node.bound["input"].name), tuple):
                self.names[name] = self.names[node.bound["input"].name][node.bound["index"]]
            elif node.op in ("call_function", "call_method"):
                refs = node.bound.get("tensors") or [node.bound.get("input")]
                # shape functions of comparisons stay logical (a select condition)
                self.keep_logical = node.function in _KEEPS_TYPE and all(
                    isinstance(r, Ref) and self.names[r.name] in self.logical for r in refs)
                try:
                    self.names[name] = self.function(node).name
                finally:
                    if self.keep_logical:
                        self.logical.add(self.names[name])
                    self.keep_logical = False
            else:
                outputs = []
                for ref in node.bound["outputs"]:
                    ident = self.names[ref.name]
                    if ident in inputs or ident in outputs:
                        ident = self.op(f"{ref.name}_out", "copy", _Ident(ident)).name
                    outputs.append(ident)
        self.where = ""
        written = {key.split("@")[0] for key in self.variables}
        for group, arrays in network.parameter_arrays().items():
            for array, info in arrays.items():  # arrays the graph does not use: kept too
                if f"{group}.{array}" not in written and info.dtype is None:
                    self.array(group, array)
        head = []
        if self.fragments:
            head += ["extension KHR_enable_fragment_definitions;",
                     "extension KHR_enable_operator_expressions;", ""]
            if "mean_variance_normalization" in self.fragments:
                head += [_MVN_FRAGMENT]
            if "erf" in self.fragments:
                head += [_ERF_FRAGMENT]
        graph_name = net_id if net_id not in _KEYWORDS else f"{net_id}_graph"
        text = ["version 1.0;", "", *head,
                f"graph {graph_name}( {', '.join(inputs)} ) -> ( {', '.join(outputs)} )",
                "{", *self.lines, "}", ""]
        return "\n".join(text)

    def chunk(self, node: Any) -> tuple[str, ...]:
        """torch.chunk as slices of ceil(size / chunks)."""
        b = node.bound
        shape = self.shapes[b["input"].name]
        axis = self.axis(b["dim"], len(shape))
        size, chunks = shape[axis], int(b["chunks"])
        step = -(-size // chunks)
        x = self.value(b["input"])
        return tuple(self.op(f"{node.name}_{k}", "slice", x, axes=[axis], begin=[start],
                             end=[min(start + step, size)]).name
                     for k, start in enumerate(range(0, size, step)))

    def recurrent(self, node: Any, layer: Any) -> Any:
        """A recurrent layer's tuple of NNEF tensor names (unrolled, see
        :mod:`.nnef_export_extra`)."""
        inputs = node.bound["inputs"]
        states = []
        if len(inputs) > 1:
            parts = inputs[1] if isinstance(inputs[1], tuple) else (inputs[1],)
            states = [self.value(r) for r in parts]
        result = nnef_extra.recurrent(self, layer, node.name, self.value(inputs[0]),
                                      self.shapes[inputs[0].name], states)

        def names(value: Any) -> Any:
            return value.name if isinstance(value, _Ident) else tuple(names(v) for v in value)

        return names(result)

    def layer(self, node: Any) -> _Ident:
        layer = self.network.layers[node.target]
        t, cfg = layer.type, layer.config
        x = _Ident(self.names[node.bound["inputs"][0].name])
        in_shape = self.shapes[node.bound["inputs"][0].name]
        out_shape = self.shapes[node.name]
        base = node.name
        if t.startswith("Dropout") or t == "AlphaDropout":
            return x  # identity in inference mode: NNEF drops it
        if t == "Linear":
            w = self.array(layer.id, "weight")
            b = self.array(layer.id, "bias", (1, cfg["out_features"])) if cfg["bias"] else 0.0
            if len(in_shape) == 2:
                return self.op(base, "linear", x, w, b)
            flat = self.op(f"{base}_in", "reshape", x, shape=[-1, cfg["in_features"]])
            y = self.op(f"{base}_2d", "linear", flat, w, b)
            return self.op(base, "reshape", y, shape=list(out_shape))
        if t == "Flatten":
            return self.flatten(base, x, in_shape, cfg["start_dim"], cfg["end_dim"])
        if t == "LayerNorm":
            return self.layer_norm(layer, base, x, in_shape)
        if t == "PReLU":
            # channels on axis 1 (one channel below rank 2), as a [1, C, 1, ...] variable
            rank = len(in_shape)
            alpha = [1] * max(rank, 1)
            if cfg["num_parameters"] > 1:
                alpha[1] = cfg["num_parameters"]
            return self.op(base, "prelu", x, self.array(layer.id, "weight", alpha))
        if t == "Bilinear":
            return self.bilinear(layer, base, node, out_shape)
        if t == "LocalResponseNorm":
            return nnef_extra.lrn(self, base, x, in_shape, cfg)
        n = layer.spec.spatial_dims
        if n is None:
            raise self.error(f"layer type {t} has no NNEF equivalent")
        if t.startswith(("Conv", "InstanceNorm")) and len(in_shape) == n + 1:  # unbatched
            x = self.op(f"{base}_batched", "unsqueeze", x, axes=[0])
            y = self.layer_op(layer, f"{base}_unbatched", x, [1, *in_shape], [1, *out_shape])
            return self.op(base, "squeeze", y, axes=[0])
        return self.layer_op(layer, base, x, in_shape, out_shape)

    def layer_op(self, layer: Any, base: str, x: _Ident, in_shape: Sequence[int],
                 out_shape: Sequence[int]) -> _Ident:
        t, cfg = layer.type, layer.config
        n = layer.spec.spatial_dims
        from petab_sciml.catalogue import as_tuple

        if t.startswith(("Conv1d", "Conv2d", "Conv3d")):
            k = list(as_tuple(cfg["kernel_size"], n))
            d = list(as_tuple(cfg["dilation"], n))
            s = list(as_tuple(cfg["stride"], n))
            if cfg["padding"] == "same":
                pad = [(di * (ki - 1) // 2, di * (ki - 1) - di * (ki - 1) // 2)
                       for ki, di in zip(k, d)]
            elif cfg["padding"] == "valid":
                pad = [(0, 0)] * n
            else:
                pad = [(p, p) for p in as_tuple(cfg["padding"], n)]
            border = {"zeros": "constant", "reflect": "reflect",
                      "replicate": "replicate"}.get(cfg["padding_mode"])
            if border is None:  # circular: NNEF has no such border; wrap by concatenation
                size = list(in_shape)
                for i, (before, after) in enumerate(pad):
                    axis = len(in_shape) - n + i
                    x = self.pad_axis(f"{base}_wrap{i}", x, size, axis, before, after,
                                      "circular", 0.0)
                    size[axis] += before + after
                border, pad = "constant", [(0, 0)] * n
            w = self.array(layer.id, "weight")
            b = self.array(layer.id, "bias", (1, cfg["out_channels"])) if cfg["bias"] else 0.0
            return self.op(base, "conv", x, w, b, border=border,
                           padding=pad, stride=s, dilation=d, groups=cfg["groups"])
        if t.startswith("ConvTranspose"):
            p = list(as_tuple(cfg["padding"], n))
            op_ = list(as_tuple(cfg["output_padding"], n))
            w = self.array(layer.id, "weight")
            c = cfg["out_channels"]
            attrs = {"stride": list(as_tuple(cfg["stride"], n)),
                     "dilation": list(as_tuple(cfg["dilation"], n)), "groups": cfg["groups"]}
            if all(o <= pi for o, pi in zip(op_, p)):
                b = self.array(layer.id, "bias", (1, c)) if cfg["bias"] else 0.0
                return self.op(base, "deconv", x, w, b, border="constant",
                               padding=[(pi, pi - o) for pi, o in zip(p, op_)], **attrs)
            # output_padding beyond the padding: positions past the full transposed
            # convolution, which get no input (zeros) but still the bias
            y = self.op(f"{base}_full", "deconv", x, w, 0.0, border="constant",
                        padding=[(pi, max(pi - o, 0)) for pi, o in zip(p, op_)], **attrs)
            lead = len(out_shape) - n
            y = self.op(base if not cfg["bias"] else f"{base}_padded", "pad", y,
                        padding=[(0, 0)] * lead + [(0, max(o - pi, 0)) for pi, o in zip(p, op_)],
                        border="constant", value=0.0)
            if cfg["bias"]:
                y = self.op(base, "add", y, self.array(layer.id, "bias", [1, c] + [1] * n))
            return y
        if t.startswith(("MaxPool", "AvgPool")):
            rank = len(in_shape)
            lead = rank - n
            k = list(as_tuple(cfg["kernel_size"], n))
            s = list(as_tuple(cfg["stride"] if cfg["stride"] is not None else k, n))
            p = list(as_tuple(cfg["padding"], n))
            d = list(as_tuple(cfg.get("dilation", 1), n))
            pads = []
            for i in range(n):
                extra = 0
                if cfg["ceil_mode"]:
                    o = out_shape[lead + i]
                    extra = max(0, (o - 1) * s[i] + d[i] * (k[i] - 1) + 1
                                - (in_shape[lead + i] + 2 * p[i]))
                pads.append((p[i], p[i] + extra))
            ceil_extra = any(q != pp for pp, q in pads)
            attrs = {"size": [1] * lead + k, "padding": [(0, 0)] * lead + pads,
                     "stride": [1] * lead + s, "dilation": [1] * lead + d}
            if t.startswith("MaxPool"):
                return self.op(base, "max_pool", x, border="ignore", **attrs)
            if cfg.get("divisor_override") is not None:
                # the window sum (padding as zeros) over the divisor: a constant-border
                # average (always over the full window) rescaled
                factor = math.prod(k) / cfg["divisor_override"]
                mean = self.op(base if factor == 1 else f"{base}_mean", "avg_pool", x,
                               border="constant", **attrs)
                return mean if factor == 1 else self.op(base, "mul", mean, factor)
            if cfg["count_include_pad"] and any(p):
                if not ceil_extra:
                    return self.op(base, "avg_pool", x, border="constant", **attrs)
                # PyTorch divides a window overhanging the padded input by the part inside
                # it: rescale the full-window average by window / that part, per position
                counts = [np.array([min(j * s[i] - p[i] + k[i], in_shape[lead + i] + p[i])
                                    - (j * s[i] - p[i]) for j in range(out_shape[lead + i])])
                          for i in range(n)]
                grid = math.prod(k) / functools.reduce(np.multiply, np.ix_(*counts))
                mean = self.op(f"{base}_mean", "avg_pool", x, border="constant", **attrs)
                factor = self.op(f"{base}_divisor", "constant<scalar>",
                                 shape=[1] * lead + list(grid.shape),
                                 value=[float(v) for v in grid.ravel()])
                return self.op(base, "mul", mean, factor)
            return self.op(base, "avg_pool", x, border="ignore" if (
                not cfg["count_include_pad"] or ceil_extra) else "constant", **attrs)
        if t.startswith("LPPool"):
            return self.lp_pool(layer, base, x, in_shape, out_shape)
        if t.startswith("Adaptive"):
            return self.adaptive_pool(layer, base, x, in_shape, out_shape)
        if t.startswith(("BatchNorm", "InstanceNorm")):
            c = cfg["num_features"]
            scale = self.array(layer.id, "weight", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_scale", (1, c), 1.0)
            offset = self.array(layer.id, "bias", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_offset", (1, c), 0.0)
            if cfg["track_running_stats"]:  # inference mode normalises with them
                mean = self.array(layer.id, "running_mean", (1, c))
                var = self.array(layer.id, "running_var", (1, c))
                return self.op(base, "batch_normalization", x, mean, var, offset, scale,
                               epsilon=float(cfg["eps"]))
            # statistics of the input: over batch and space (BatchNorm), space (Instance)
            rank = len(in_shape)
            axes = [0, *range(2, rank)] if t.startswith("Batch") else list(range(rank - n,
                                                                                  rank))
            self.fragments.add("mean_variance_normalization")
            return self.op(base, "mean_variance_normalization", x, scale, offset, axes=axes,
                           epsilon=float(cfg["eps"]))
        raise self.error(f"layer type {t} has no NNEF equivalent")

    def filled(self, base: str, shape: Sequence[int], value: float) -> _Ident:
        return self.op(base, "constant<scalar>", shape=list(shape), value=[float(value)])

    def layer_norm(self, layer: Any, base: str, x: _Ident, in_shape: Sequence[int]
                   ) -> _Ident:
        cfg = layer.config
        normalized = cfg["normalized_shape"]
        normalized = [normalized] if isinstance(normalized, int) else list(normalized)
        rank, k = len(in_shape), len(normalized)
        axes = list(range(rank - k, rank))
        mean = self.op(f"{base}_mean", "mean_reduce", x, axes=axes)
        centred = self.op(f"{base}_centred", "sub", x, mean)
        var = self.op(f"{base}_var", "mean_reduce",
                      self.op(f"{base}_sq", "mul", centred, centred), axes=axes)
        std = self.op(f"{base}_std", "sqrt", self.op(f"{base}_eps", "add", var,
                                                     float(cfg["eps"])))
        has_weight = cfg["elementwise_affine"]
        has_bias = has_weight and cfg["bias"]
        y = self.op(base if not has_weight else f"{base}_normed", "div", centred, std)
        full = [1] * (rank - k) + normalized
        if has_weight:
            w = self.array(layer.id, "weight", full)
            y = self.op(base if not has_bias else f"{base}_scaled", "mul", y, w)
        if has_bias:
            y = self.op(base, "add", y, self.array(layer.id, "bias", full))
        return y

    def lp_pool(self, layer: Any, base: str, x: _Ident, in_shape: Sequence[int],
                out_shape: Sequence[int]) -> _Ident:
        from petab_sciml.catalogue import as_tuple

        cfg, n = layer.config, layer.spec.spatial_dims
        rank = len(in_shape)
        lead = rank - n
        k = list(as_tuple(cfg["kernel_size"], n))
        s = list(as_tuple(cfg["stride"] if cfg["stride"] is not None else k, n))
        pads = []
        for i in range(n):
            extra = max(0, (out_shape[lead + i] - 1) * s[i] + k[i] - in_shape[lead + i])
            pads.append((0, extra if cfg["ceil_mode"] else 0))
        p = float(cfg["norm_type"])
        powered = self.op(f"{base}_pow", "pow", x, p)
        pooled = self.op(f"{base}_avg", "avg_pool", powered, size=[1] * lead + k,
                         border="ignore", padding=[(0, 0)] * lead + pads,
                         stride=[1] * lead + s, dilation=[1] * (lead + n))
        summed = self.op(f"{base}_sum", "mul", pooled, float(math.prod(k)))
        return self.op(base, "pow", summed, 1.0 / p)

    def adaptive_pool(self, layer: Any, base: str, x: _Ident, in_shape: Sequence[int],
                      out_shape: Sequence[int]) -> _Ident:
        n = layer.spec.spatial_dims
        rank = len(in_shape)
        lead = rank - n
        sizes = [in_shape[lead + i] // max(out_shape[lead + i], 1) for i in range(n)]
        op = "max_pool" if "Max" in layer.type else "avg_pool"
        if all(out_shape[lead + i] * sizes[i] == in_shape[lead + i] for i in range(n)):
            return self.op(base, op, x, size=[1] * lead + sizes, border="ignore",
                           padding=[(0, 0)] * rank, stride=[1] * lead + sizes,
                           dilation=[1] * rank)
        # NNEF has no adaptive pooling.  PyTorch's windows [floor(j L / O), ceil((j+1) L / O))
        # form a box, and max/mean over a box is max/mean over one axis after another: one
        # reduced slice per output position, concatenated, axis by axis.
        reduce = "max_reduce" if "Max" in layer.type else "mean_reduce"
        y = x
        for i in range(n):
            axis, size, out = lead + i, in_shape[lead + i], out_shape[lead + i]
            if size == out:
                continue
            parts = [self.op(f"{base}_{i}_{j}", reduce,
                             self.slice_axis(f"{base}_{i}_{j}_window", y, axis,
                                             (j * size) // out, -((-(j + 1) * size) // out)),
                             axes=[axis]) for j in range(out)]
            y = self.op(f"{base}_{i}", "concat", parts, axis=axis)
        return y if y is not x else self.op(base, "copy", x)

    def bilinear(self, layer: Any, base: str, node: Any, out_shape: Sequence[int]) -> _Ident:
        """y = x1^T W x2 + b as x1 @ W' (W' = W as [in1, out * in2]), times x2, summed over
        in2; leading dimensions are flattened to one batch dimension and restored."""
        cfg = layer.config
        i1, i2, o = cfg["in1_features"], cfg["in2_features"], cfg["out_features"]
        x1, x2 = (_Ident(self.names[r.name]) for r in node.bound["inputs"][:2])
        batch = math.prod(out_shape[:-1])
        if len(out_shape) != 2:
            x1 = self.op(f"{base}_x1", "reshape", x1, shape=[batch, i1])
            x2 = self.op(f"{base}_x2", "reshape", x2, shape=[batch, i2])
        w = self.op(f"{base}_w", "reshape", self.op(f"{base}_wt", "transpose",
                                                   self.array(layer.id, "weight"),
                                                   axes=[1, 0, 2]), shape=[i1, o * i2])
        left = self.op(f"{base}_left", "reshape", self.op(f"{base}_mm", "matmul", x1, w),
                       shape=[batch, o, i2])
        prod = self.op(f"{base}_prod", "mul", left,
                       self.op(f"{base}_x2u", "unsqueeze", x2, axes=[1]))
        y = self.op(f"{base}_sum", "squeeze", self.op(f"{base}_red", "sum_reduce", prod,
                                                      axes=[2]), axes=[2])
        if cfg["bias"]:
            y = self.op(f"{base}_biased", "add", y, self.array(layer.id, "bias", (1, o)))
        if len(out_shape) != 2:
            return self.op(base, "reshape", y, shape=list(out_shape))
        return y

    def flatten(self, base: str, x: _Ident, in_shape: Sequence[int], start: int, end: int
                ) -> _Ident:
        rank = len(in_shape)
        start = start + rank if start < 0 else start
        end = end + rank if end < 0 else end
        if rank == 0 or start >= end:
            return x if rank else self.op(base, "reshape", x, shape=[1])
        if end == rank - 1:
            return self.op(base, "reshape", x, shape=[0] * start + [-1])
        return self.op(base, "reshape", x, shape=[-1], axis_start=start,
                       axis_count=end - start + 1)

    def axis(self, dim: int, rank: int) -> int:
        return dim + rank if dim < 0 else dim

    def function(self, node: Any) -> _Ident:
        f, b = node.function, node.bound
        base = node.name
        v = self.value
        unary = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp",
                 "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg", "selu": "selu",
                 "silu": "silu", "sign": "sign", "sin": "sin", "cos": "cos"}
        if f in unary:
            return self.op(base, unary[f], v(b["input"]))
        x = v(b.get("input")) if isinstance(b.get("input"), Ref) else None
        if f == "gelu":
            if b["approximate"] == "none":
                return self.op(base, "gelu", x)
            cube = self.op(f"{base}_cube", "mul", self.op(f"{base}_sq", "mul", x, x), x)
            inner = self.op(f"{base}_inner", "add", x, self.op(f"{base}_c", "mul", cube,
                                                                 0.044715))
            t = self.op(f"{base}_tanh", "tanh", self.op(f"{base}_s", "mul", inner,
                                                         math.sqrt(2.0 / math.pi)))
            half = self.op(f"{base}_half", "mul", x, 0.5)
            return self.op(base, "mul", half, self.op(f"{base}_1p", "add", t, 1.0))
        if f == "elu":
            return self.op(base, "elu", x, alpha=float(b["alpha"]))
        if f == "leaky_relu":
            return self.op(base, "leaky_relu", x, alpha=float(b["negative_slope"]))
        if f == "softplus":
            beta, threshold = float(b["beta"]), float(b["threshold"])
            if beta == 1 and threshold >= 20:
                return self.op(base, "softplus", x)  # the threshold only guards overflow
            scaled = self.op(f"{base}_scaled", "mul", x, beta) if beta != 1 else x
            soft = self.op(f"{base}_soft", "softplus", scaled)
            soft = self.op(f"{base}_smooth", "div", soft, beta) if beta != 1 else soft
            linear = self.op(f"{base}_linear", "gt", scaled, threshold)
            return self.op(base, "select", linear, x, soft)
        if f in ("relu6", "hardtanh"):
            lo, hi = (0.0, 6.0) if f == "relu6" else (float(b["min_val"]), float(b["max_val"]))
            return self.op(base, "clamp", x, lo, hi)
        if f == "hardsigmoid":
            return self.hardsigmoid(base, x)
        if f == "hardswish":
            return self.op(base, "mul", x, self.hardsigmoid(f"{base}_gate", x))
        if f == "mish":
            soft = self.op(f"{base}_softplus", "softplus", x)
            return self.op(base, "mul", x, self.op(f"{base}_tanh", "tanh", soft))
        if f == "logsigmoid":
            neg = self.op(f"{base}_neg", "neg", x)
            return self.op(base, "neg", self.op(f"{base}_softplus", "softplus", neg))
        if f == "tanhshrink":
            return self.op(base, "sub", x, self.op(f"{base}_tanh", "tanh", x))
        if f == "softsign":
            denominator = self.op(f"{base}_den", "add", self.op(f"{base}_abs", "abs", x), 1.0)
            return self.op(base, "div", x, denominator)
        if f == "celu":
            alpha = float(b["alpha"])
            scaled = self.op(f"{base}_scaled", "div", x, alpha)
            expm1 = self.op(f"{base}_expm1", "sub", self.op(f"{base}_exp", "exp", scaled), 1.0)
            neg = self.op(f"{base}_neg", "min", self.op(f"{base}_mul", "mul", expm1, alpha), 0.0)
            return self.op(base, "add", self.op(f"{base}_pos", "max", x, 0.0), neg)
        if f in ("softmax", "log_softmax"):
            rank = self.rank(b["input"].name)
            dim = b["dim"]
            if dim is None:
                from petab_sciml.catalogue import implicit_softmax_dim

                dim = implicit_softmax_dim(rank)
            soft = self.op(base if f == "softmax" else f"{base}_softmax", "softmax", x,
                           axes=[self.axis(dim, rank)])
            return soft if f == "softmax" else self.op(base, "log", soft)
        if f in ("add", "mul") and all(isinstance(r, Ref) and self.names[r.name] in
                                       self.logical for r in (b["input"], b["other"])):
            # bool + bool is "or" in PyTorch, bool * bool "and"
            self.keep_logical = True
            try:
                left, right = self.operands(base, b["input"], b["other"])
            finally:
                self.keep_logical = False
            y = self.op(base, "or" if f == "add" else "and", left, right)
            self.logical.add(y.name)
            return y
        if f in ("add", "sub"):
            left, right = self.operands(base, b["input"], b["other"])
            if b["alpha"] != 1:
                right = self.op(f"{base}_alpha", "mul", right, float(b["alpha"]))
            return self.op(base, f, left, right)
        if f in ("floor", "ceil", "round") and b.get("decimals", 0) == 0:
            return self.op(base, f, x)
        if f == "round":
            scale = 10.0 ** int(b["decimals"])
            rounded = self.op(f"{base}_r", "round", self.op(f"{base}_s", "mul", x, scale))
            return self.op(base, "div", rounded, scale)
        if f == "trunc":
            return nnef_extra.trunc(self, base, x)
        if f in ("floor_divide", "remainder") or (f == "div" and b["rounding_mode"]):
            a, d = self.operands(base, b["input"], b["other"])
            q = self.op(f"{base}_q", "div", a, d)
            if f == "remainder":
                floor = self.op(f"{base}_floor", "floor", q)
                return self.op(base, "sub", a, self.op(f"{base}_m", "mul", d, floor))
            if f == "div" and b["rounding_mode"] == "trunc":
                return nnef_extra.trunc(self, base, q)
            return self.op(base, "floor", q)
        if f == "cumsum":
            return nnef_extra.cumsum(self, base, x, self.shapes[b["input"].name], b["dim"])
        if f in ("reshape_as", "unflatten"):
            return self.op(base, "reshape", x, shape=list(self.shapes[node.name]))
        if f == "local_response_norm":
            return nnef_extra.lrn(self, base, x, self.shapes[b["input"].name], b)
        if f in POOL_FUNCTIONS:
            fake = _PoolLayer(f, b)
            in_shape, out_shape = self.shapes[b["input"].name], self.shapes[node.name]
            n = fake.spec.spatial_dims
            if len(in_shape) == n + 1:  # unbatched
                xb = self.op(f"{base}_batched", "unsqueeze", x, axes=[0])
                y = self.layer_op(fake, f"{base}_unbatched", xb, [1, *in_shape],
                                  [1, *out_shape])
                return self.op(base, "squeeze", y, axes=[0])
            return self.layer_op(fake, base, x, in_shape, out_shape)
        if f in ("mul", "div"):
            return self.op(base, f, *self.operands(base, b["input"], b["other"]))
        if f == "pow":
            return self.op(base, "pow", *self.operands(base, b["input"], b["exponent"]))
        if f == "contiguous":
            return self.op(base, "copy", x)
        if f == "matmul":
            return self.op(base, "matmul", x, v(b["other"]))
        if f == "clamp":
            lo, hi = b["min"], b["max"]
            if lo is not None and hi is not None:
                return self.op(base, "clamp", x, float(lo), float(hi))
            if lo is not None:
                return self.op(base, "max", x, float(lo))
            if hi is not None:
                return self.op(base, "min", x, float(hi))
            return self.op(base, "copy", x)
        if f in ("cat", "stack"):
            values = [v(r) for r in b["tensors"]]
            rank = self.rank(b["tensors"][0].name) + (1 if f == "stack" else 0)
            return self.op(base, "concat" if f == "cat" else "stack", values,
                           axis=self.axis(b["dim"], rank))
        if f == "flatten":
            return self.flatten(base, x, self.shapes[b["input"].name], b["start_dim"],
                                b["end_dim"])
        if f == "reshape":
            shape = b["shape"]
            shape = [shape] if isinstance(shape, int) else list(shape)
            if 0 in shape:
                shape = list(self.shapes[node.name])
            return self.op(base, "reshape", x, shape=shape)
        if f == "permute":
            dims = b["dims"] if isinstance(b["dims"], (list, tuple)) else [b["dims"]]
            rank = self.rank(b["input"].name)
            return self.op(base, "transpose", x, axes=[self.axis(d, rank) for d in dims])
        if f == "transpose":
            rank = self.rank(b["input"].name)
            perm = list(range(rank))
            i, j = self.axis(b["dim0"], rank), self.axis(b["dim1"], rank)
            perm[i], perm[j] = perm[j], perm[i]
            return self.op(base, "transpose", x, axes=perm)
        if f == "squeeze":
            shape = self.shapes[b["input"].name]
            rank = len(shape)
            dims = b["dim"]
            if dims is None:
                axes = [i for i, s in enumerate(shape) if s == 1]
            else:
                dims = dims if isinstance(dims, (list, tuple)) else [dims]
                axes = [self.axis(d, rank) for d in dims]
                axes = [a for a in axes if shape[a] == 1]
            return self.op(base, "squeeze", x, axes=sorted(axes)) if axes else x
        if f == "unsqueeze":
            rank = self.rank(b["input"].name) + 1
            return self.op(base, "unsqueeze", x, axes=[self.axis(b["dim"], rank)])
        if f in ("sum", "mean"):
            shape = self.shapes[b["input"].name]
            rank = len(shape)
            dims = b["dim"]
            axes = list(range(rank)) if dims is None else [
                self.axis(d, rank) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
            reduced = self.op(base if b["keepdim"] and dims is not None else f"{base}_keep",
                              f"{f}_reduce", x, axes=sorted(axes))
            if b["keepdim"] and dims is not None:
                return reduced
            return self.op(base, "squeeze", reduced, axes=sorted(axes))
        if f == "getitem":
            return self.getitem(base, x, self.shapes[b["input"].name], b["index"])
        if f == "erf":
            self.fragments.add("erf")
            return self.op(base, "erf", x)
        if f in ("maximum", "minimum"):
            return self.op(base, f[:3], *self.operands(base, b["input"], b["other"]))
        if f in ("gt", "lt", "ge", "le", "eq"):
            y = self.op(base, f, *self.operands(base, b["input"], b["other"]))
            self.logical.add(y.name)
            return y
        if f == "where":
            cond, a, c = self.aligned(base, [b["condition"], b["input"], b["other"]],
                                      logical=0)
            return self.op(base, "select", cond, a, c)
        if f in ("amax", "amin"):
            shape = self.shapes[b["input"].name]
            dims = b["dim"] if isinstance(b["dim"], (list, tuple)) else [b["dim"]]
            axes = sorted({self.axis(d, len(shape)) for d in dims}) or list(range(len(shape)))
            op = "max_reduce" if f == "amax" else "min_reduce"
            if b["keepdim"]:
                return self.op(base, op, x, axes=axes)
            return self.op(base, "squeeze", self.op(f"{base}_keep", op, x, axes=axes),
                           axes=axes)
        if f == "prod":
            return self.prod(base, x, self.shapes[b["input"].name], b["dim"], b["keepdim"])
        if f == "flip":
            shape = self.shapes[b["input"].name]
            dims = b["dims"] if isinstance(b["dims"], (list, tuple)) else [b["dims"]]
            axes = sorted({self.axis(d, len(shape)) for d in dims})
            if not axes:
                return self.op(base, "copy", x)
            # nnef_tools' spelling of a full reversal: from the last element to before
            # the first (an end below -size is clamped to -1)
            return self.op(base, "slice", x, axes=axes, begin=[-1] * len(axes),
                           end=[-2147483647] * len(axes), stride=[-1] * len(axes))
        if f == "pad":
            return self.pad(base, x, self.shapes[b["input"].name], list(b["pad"]), b["mode"],
                            0.0 if b["value"] is None else float(b["value"]))
        raise self.error(f"function {f} has no NNEF equivalent")

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

    def slice_axis(self, base: str, x: _Ident, axis: int, start: int, stop: int) -> _Ident:
        return self.op(base, "slice", x, axes=[axis], begin=[start], end=[stop])

    def prod(self, base: str, x: _Ident, shape: Sequence[int], dim: int | None,
             keepdim: bool) -> _Ident:
        """NNEF has no product reduction: multiply the slices along each axis in turn."""
        rank = len(shape)
        axes = list(range(rank)) if dim is None else [self.axis(dim, rank)]
        y = x
        for axis in axes:
            if shape[axis] == 0:
                raise self.error("prod over an empty dimension")
            acc = self.slice_axis(f"{base}_{axis}_0", y, axis, 0, 1)
            for i in range(1, shape[axis]):
                acc = self.op(f"{base}_{axis}_{i}", "mul", acc,
                              self.slice_axis(f"{base}_{axis}_s{i}", y, axis, i, i + 1))
            y = acc
        if keepdim or not axes:
            return y if y is not x else self.op(base, "copy", x)
        return self.op(base, "squeeze", y, axes=axes)

    def pad(self, base: str, x: _Ident, shape: Sequence[int], pad: list[int], mode: str,
            value: float) -> _Ident:
        """``F.pad``: NNEF ``pad`` where NNEF consumers commonly run it (3-5-d tensors,
        spatial dimensions only, no circular border), else per-dimension concatenation of
        slices (or constants) of the input; negative pads crop."""
        rank = len(shape)
        pairs = [(0, 0)] * rank
        for k in range(len(pad) // 2):
            pairs[rank - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
        grow = [(max(p, 0), max(q, 0)) for p, q in pairs]
        native = (mode in ("constant", "reflect", "replicate") and 3 <= rank <= 5
                  and grow[:2] == [(0, 0), (0, 0)])
        y, size = x, list(shape)
        if native and any(p or q for p, q in grow):
            y = self.op(f"{base}_grown" if grow != pairs else base, "pad", y, padding=grow,
                        border=mode, value=value)
            size = [s + p + q for s, (p, q) in zip(size, grow)]
        elif not native:
            for axis, (p, q) in enumerate(grow):
                if p or q:
                    y = self.pad_axis(f"{base}_{axis}", y, size, axis, p, q, mode, value)
                    size[axis] += p + q
        crop = [(axis, -p if p < 0 else 0, size[axis] + q if q < 0 else size[axis])
                for axis, (p, q) in enumerate(pairs) if p < 0 or q < 0]
        if crop:
            y = self.op(base, "slice", y, axes=[c[0] for c in crop], begin=[c[1] for c in crop],
                        end=[c[2] for c in crop])
        return y if y is not x else self.op(base, "copy", x)

    def pad_axis(self, base: str, x: _Ident, size: Sequence[int], axis: int, before: int,
                 after: int, mode: str, value: float) -> _Ident:
        n = size[axis]

        def piece(i: int, j: int) -> _Ident:
            return self.slice_axis(f"{base}_part", x, axis, i, j)

        if mode == "constant":
            def block(k: int) -> list[_Ident]:
                filled = list(size)
                filled[axis] = k
                return [self.filled(f"{base}_fill", filled, value)] if k else []
            left, right = block(before), block(after)
        elif mode == "replicate":
            left = [piece(0, 1)] * before
            right = [piece(n - 1, n)] * after
        elif mode == "reflect":
            left = [piece(i, i + 1) for i in range(before, 0, -1)]
            right = [piece(n - 2 - j, n - 1 - j) for j in range(after)]
        else:  # circular
            left = [piece(n - before, n)] if before else []
            right = [piece(0, after)] if after else []
        return self.op(base, "concat", [*left, x, *right], axis=axis)

    def hardsigmoid(self, base: str, x: _Ident) -> _Ident:
        scaled = self.op(f"{base}_scaled", "add", self.op(f"{base}_div", "div", x, 6.0), 0.5)
        return self.op(base, "clamp", scaled, 0.0, 1.0)

    def getitem(self, base: str, x: _Ident, shape: Sequence[int], index: Any) -> _Ident:
        items = index if isinstance(index, list) else [index]
        n_real = sum(1 for it in items if it != "..." and it is not None)
        expanded: list[Any] = []
        for it in items:
            if it == "...":
                expanded += [{"slice": [None, None, None]}] * (len(shape) - n_real)
            else:
                expanded.append(it)
        axes, begin, end, stride, squeeze, unsqueeze = [], [], [], [], [], []
        dim = 0
        out_dim = 0
        for it in expanded:
            if it is None:
                unsqueeze.append(out_dim)
                out_dim += 1
                continue
            size = shape[dim]
            if isinstance(it, dict):
                start, stop, step = it["slice"]
                step = 1 if step is None else step
                if step < 0:
                    raise self.error("negative slice steps have no NNEF slice")
                start = 0 if start is None else (start + size if start < 0 else start)
                stop = size if stop is None else (stop + size if stop < 0 else stop)
                start, stop = max(0, min(start, size)), max(0, min(stop, size))
                if (start, stop, step) != (0, size, 1):
                    axes.append(dim)
                    begin.append(start)
                    end.append(stop)
                    stride.append(step)
                out_dim += 1
            else:
                i = it + size if it < 0 else it
                axes.append(dim)
                begin.append(i)
                end.append(i + 1)
                stride.append(1)
                squeeze.append(dim)
            dim += 1
        y = x
        if axes:
            y = self.op(f"{base}_slice" if (squeeze or unsqueeze) else base, "slice", y,
                        axes=axes, begin=begin, end=end, stride=stride)
        if squeeze:
            y = self.op(f"{base}_squeeze" if unsqueeze else base, "squeeze", y, axes=squeeze)
        if unsqueeze:
            y = self.op(base, "unsqueeze", y, axes=unsqueeze)
        if y is x:
            y = self.op(base, "copy", x)
        return y


@dataclass(frozen=True)
class _Call:
    """A function call that is not an IR node of its own (an activation layer's)."""

    name: str
    function: str
    bound: Mapping[str, Any]


def _layer_bound(layer: Any, node: Any) -> dict[str, Any]:
    ignored = {a.name for a in layer.spec.args if a.ignored}
    return {"input": node.bound["inputs"][0],
            **{k: v for k, v in layer.config.items() if k not in ignored}}


class _PoolLayer:
    """A functional pool's arguments seen as the layer of the same maths."""

    def __init__(self, function: str, bound: Mapping[str, Any]):
        from petab_sciml.catalogue import LAYERS

        self.type = POOL_FUNCTIONS[function]
        self.spec = LAYERS[self.type]
        self.id = function
        self.config = {k: v for k, v in bound.items() if k != "input"}


def _node_values(network: Network, params: Mapping[str, Mapping[str, Any]],
                 input_shapes: Sequence[Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Shape of every node's value for inputs of ``input_shapes`` (torch, eval mode)."""
    torch = require("torch", "torch")
    from petab_sciml.backends.torch import BACKEND
    from petab_sciml.backends.torch.build import _python_index
    from petab_sciml.backends.torch.functions import TORCH_FUNCTIONS

    model = BACKEND.build(network)
    if params:
        BACKEND.set_parameters(model, params, strict=False)
    model.eval()
    values: dict[str, Any] = {}
    placeholders = iter(input_shapes)
    nodes = network.node_map

    def arg(v: Any) -> Any:
        if isinstance(v, Ref):
            return values[v.name]
        if isinstance(v, tuple) and v and all(isinstance(r, Ref) for r in v):
            return [values[r.name] for r in v]
        return v

    with torch.no_grad():
        for name in network.order:
            node = nodes[name]
            if node.op == "placeholder":
                values[name] = torch.zeros(tuple(next(placeholders)))
            elif node.op == "get_attr":
                values[name] = model.get_parameter(node.target) if node.target in dict(
                    model.named_parameters()) else model.get_buffer(node.target)
            elif node.op == "call_module":
                values[name] = model.get_submodule(node.target)(
                    *[arg(r) for r in node.bound["inputs"]])
            elif node.op in ("call_function", "call_method"):
                spec = FUNCTIONS[node.function]
                args, kwargs = [], {}
                for p in spec.params:
                    if p.ignored:
                        continue
                    value = arg(node.bound[p.name])
                    if p.kind == "index":
                        value = _python_index(value)
                    if p.kind in _TENSOR_KINDS:
                        args.append(value)
                    else:
                        kwargs[p.name] = value
                values[name] = TORCH_FUNCTIONS[node.function](*args, **kwargs)
    return {k: tuple(v.shape) for k, v in values.items() if hasattr(v, "shape")}


def _default_input_shapes(network: Network, params: Mapping[str, Any]) -> list[list[int]]:
    """Smallest input shapes the network accepts: from the first layer reading each input
    (Linear: [1, in_features]; convolution-like: [1, C, S, ...] with the smallest S that
    runs)."""
    guesses: list[list[list[int]]] = []
    for ph in network.placeholders:
        options: list[list[int]] = []
        for node in network.nodes:
            if node.op != "call_module" or Ref(ph.name) not in node.bound["inputs"]:
                continue
            layer = network.layers[node.target]
            cfg, n = layer.config, layer.spec.spatial_dims
            if layer.type == "Linear":
                options = [[1, cfg["in_features"]]]
            elif layer.type == "Bilinear":
                index = list(node.bound["inputs"]).index(Ref(ph.name))
                options = [[1, cfg["in1_features" if index == 0 else "in2_features"]]]
            elif n is not None:
                channels = cfg.get("in_channels", cfg.get("num_features"))
                lead = [1, channels] if channels is not None else [1, 1]
                options = [lead + [s] * n for s in range(1, 65)]
            elif layer.type == "PReLU":
                options = [[1, cfg["num_parameters"]]]
            elif layer.type == "LayerNorm":
                shape = cfg["normalized_shape"]
                options = [[1, *([shape] if isinstance(shape, int) else shape)]]
            break
        if not options:
            raise NetworkError("cannot tell the input shapes of this network; pass "
                               "input_shapes", file=network.source, entry=f"input {ph.name!r}")
        guesses.append(options)
    import itertools

    for combo in itertools.islice(itertools.product(*guesses), 4096):
        try:
            _node_values(network, params, combo)
        except Exception:  # noqa: BLE001 - try the next size
            continue
        return [list(s) for s in combo]
    raise NetworkError("no small input shape runs through this network; pass input_shapes",
                       file=network.source)


def _default_parameters(network: Network) -> dict[str, dict[str, np.ndarray]]:
    try:
        from petab_sciml.backends.torch import BACKEND

        return BACKEND.get_parameters(BACKEND.build(network))
    except Exception:  # noqa: BLE001 - torch missing: zeros
        return {g: {a: np.zeros(i.shape, i.dtype or np.float32) for a, i in arrays.items()}
                for g, arrays in network.parameter_arrays().items()}
