"""The constructor arguments of catalogue layers inside TorchScript modules.

Scripted modules keep their attributes (``in_features``, ``kernel_size``...); traced
modules keep only their arrays and their forward graph, so their arguments are read from
array shapes and from the constants of the aten op that does the layer's work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from petab_sciml.catalogue import LAYERS, RECURRENT_GATES
from petab_sciml.errors import NetworkError
from petab_sciml.formats.torch_fx import plain_value
from petab_sciml.formats.torchscript_graph import (
    _UNKNOWN,
    _all_nodes,
    _Input,
    _numpy,
    _Param,
    _prepared,
    _Size,
)

if TYPE_CHECKING:
    from petab_sciml.formats.torchscript import _Lifter

# ----------------------------------------------------------------------------- layers
_DROPOUT_OPS = ("aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
                "aten::feature_alpha_dropout")


def _key_ops(layer_type: str) -> tuple[str, ...]:
    """The aten ops whose arguments carry a traced layer's constructor arguments."""
    n = layer_type[-2] if layer_type[-1] == "d" and layer_type[-2].isdigit() else ""
    if layer_type.startswith(("Conv", "ConvTranspose")):
        base = ("aten::_convolution", "aten::_convolution_mode", f"aten::conv{n}d")
        return base + ((f"aten::conv_transpose{n}d",) if "Transpose" in layer_type else ())
    if layer_type.startswith("MaxPool"):
        return (f"aten::max_pool{n}d", f"aten::max_pool{n}d_with_indices")
    if layer_type.startswith(("AvgPool", "LPPool")):
        return (f"aten::avg_pool{n}d",)
    if layer_type.startswith("AdaptiveMaxPool"):
        return (f"aten::adaptive_max_pool{n}d",)
    if layer_type.startswith("AdaptiveAvgPool"):
        return (f"aten::adaptive_avg_pool{n}d", f"aten::_adaptive_avg_pool{n}d")
    if layer_type.startswith("BatchNorm"):
        return ("aten::batch_norm",)
    if layer_type.startswith("InstanceNorm"):
        return ("aten::instance_norm",)
    return {"LayerNorm": ("aten::layer_norm",), "Flatten": ("aten::flatten",),
            "Linear": ("aten::linear",), "Bilinear": ("aten::bilinear",)}.get(
        layer_type, _DROPOUT_OPS if "Dropout" in layer_type else ())


class _ConstantReader:
    """Resolves the inputs of a traced layer's graph nodes to Python values."""

    def __init__(self, graph: Any):
        self.graph = graph
        self.inputs = {v.unique(): i for i, v in enumerate(graph.inputs())}

    def value(self, v: Any) -> Any:
        if v.unique() in self.inputs:
            return _Input(self.inputs[v.unique()])
        node = v.node()
        kind = node.kind()
        if kind == "prim::Constant":
            return _constant(v)
        if kind == "prim::ListConstruct":
            return [self.value(i) for i in node.inputs()]
        if kind == "prim::GetAttr":
            return _Param(node.s("name"))
        if kind in ("prim::NumToTensor", "aten::Int", "aten::Float", "aten::ScalarImplicit"):
            return self.value(node.inputsAt(0))
        if kind == "aten::size":
            base = self.value(node.inputsAt(0))
            if node.inputsSize() > 1 and isinstance(base, _Input):
                return _Size(f"input{base.index}", self.value(node.inputsAt(1)))
        return _UNKNOWN

    def args(self, node: Any) -> dict[str, Any]:
        names = _schema_names(node)
        return {name: self.value(v) for name, v in zip(names, node.inputs())}


def _constant(v: Any) -> Any:
    """The Python value of a ``prim::Constant`` output (0-d tensors as numbers)."""
    type_kind = v.type().kind()
    if type_kind == "FunctionType":
        return _UNKNOWN
    try:
        value = v.toIValue()
    except Exception:  # noqa: BLE001 - constants of types Python cannot hold
        return _UNKNOWN
    return plain_value(value)


_SCHEMAS: dict[str, tuple[str, ...]] = {}

def _schema_names(node: Any) -> tuple[str, ...]:
    text = node.schema()
    if text not in _SCHEMAS:
        import torch

        if text == "(no schema)":
            raise ValueError(f"{node.kind()} has no schema")
        _SCHEMAS[text] = tuple(a.name for a in torch._C.parse_schema(text).arguments)
    return _SCHEMAS[text]

# ----------------------------------------------------------------------------- layer args
def _layer_args(torch: Any, lifter: _Lifter, module: Any, layer_type: str, entry: str
                ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Catalogue arguments and arrays of a layer submodule (scripted or traced)."""
    spec = LAYERS[layer_type]
    params = dict(module.named_parameters(recurse=False))
    buffers = dict(module.named_buffers(recurse=False))
    arrays = {**params, **buffers}
    args: dict[str, Any] = {}
    for arg in spec.args:
        if not arg.torch or arg.name in ("device", "dtype"):
            continue
        try:
            value = getattr(module, arg.name)
        except AttributeError:
            continue
        if arg.kind == "bool" and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None
        elif isinstance(value, torch.Tensor):
            continue
        args[arg.name] = plain_value(value)
    missing = [a.name for a in spec.args if a.torch and a.name not in args
               and a.name not in ("device", "dtype")]
    if missing:
        _traced_args(torch, lifter, module, layer_type, arrays, args, entry)
    for arg in spec.args:  # arguments PyTorch does not take (BatchNorm bias = affine)
        if not arg.torch:
            other = getattr(arg.default, "other", None)
            if other in args:
                args[arg.name] = args[other]
    args = {a.name: args[a.name] for a in spec.args if a.name in args}  # catalogue order
    try:
        config = spec.resolve_args(args, file=lifter.source, entry=entry)
    except NetworkError as exc:
        raise lifter.error(f"could not recover the arguments of this layer: {exc.message}",
                           entry) from None
    shapes = spec.array_shapes(config)
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if name not in arrays:
            raise lifter.error(f"the module has no array {name!r} (arguments {args})", entry)
        if tuple(arrays[name].shape) != tuple(shape):
            raise lifter.error(f"array {name!r} has shape {tuple(arrays[name].shape)} but the "
                               f"recovered arguments {args} give {tuple(shape)}", entry)
        out[name] = _numpy(arrays[name])
    return args, out


def _traced_args(torch: Any, lifter: _Lifter, module: Any, layer_type: str,
                 arrays: Mapping[str, Any], args: dict[str, Any], entry: str) -> None:
    """Fill ``args`` of a traced layer from its graph constants and array shapes."""
    spec = LAYERS[layer_type]
    names = set(spec.arg_names)
    weight = arrays.get("weight")

    kinds = {a.name: a.kind for a in spec.args}

    def put(name: str, value: Any) -> None:
        if name in names and name not in args and value is not _UNKNOWN:
            value = plain_value(value)
            if (isinstance(value, list) and value and kinds[name].startswith(
                    ("ints", "sizes", "padding")) and value[0] is not None
                    and all(v == value[0] for v in value)):
                value = value[0]  # traced graphs spell every size out: (3, 3) -> 3
            args[name] = value

    if layer_type in RECURRENT_GATES:
        _traced_recurrent(put, arrays, layer_type, _prepared(torch, module.graph))
        return
    if "bias" in names and spec.args[spec.arg_names.index("bias")].torch:
        put("bias", "bias" in arrays)
    if layer_type in ("Linear", "Bilinear") and weight is not None:
        put("out_features", weight.shape[0])
        if layer_type == "Linear":
            put("in_features", weight.shape[1])
        else:
            put("in1_features", weight.shape[1])
            put("in2_features", weight.shape[2])
        return
    graph = _prepared(torch, module.graph)
    reader = _ConstantReader(graph)
    key_ops = _key_ops(layer_type)
    key = next((n for n in _all_nodes(graph) if n.kind() in key_ops), None)
    a = reader.args(key) if key is not None else {}
    if layer_type.startswith(("BatchNorm", "InstanceNorm")):
        _traced_norm(lifter, put, a, arrays, graph, entry)
        return
    if layer_type == "PReLU":
        if weight is not None:
            put("num_parameters", weight.shape[0])
        return  # init (the default initial weight) is not in a traced module
    if spec.function is not None:  # an activation module: its aten op's arguments
        op = next((n for n in _all_nodes(graph) if n.kind().startswith("aten::")), None)
        if op is not None:
            for name, value in reader.args(op).items():
                if name != "self" and not isinstance(value, (_Input, _Param, _Size)):
                    put(name, value)
        return
    if layer_type == "LocalResponseNorm":
        _traced_lrn(put, reader, graph)
        return
    if layer_type == "LayerNorm":
        put("elementwise_affine", "weight" in arrays)
        put("bias", "bias" in arrays)
        put("normalized_shape", a.get("normalized_shape", _UNKNOWN))
        if "eps" in a:
            put("eps", float(a["eps"]))
        return
    if layer_type.startswith("Conv"):
        if weight is None:  # pragma: no cover - convolutions always have a weight
            raise lifter.error("traced convolution without a weight", entry)
        _traced_conv(put, a, weight, graph, reader, layer_type, names)
        return
    _traced_pool(put, a, graph, reader, layer_type, names)


def _traced_norm(lifter: _Lifter, put: Any, a: Mapping[str, Any],
                 arrays: Mapping[str, Any], graph: Any, entry: str) -> None:
    """BatchNorm / InstanceNorm: sizes and flags from the arrays, eps and momentum from
    the batch_norm / instance_norm op."""
    weight = arrays.get("weight")
    ref = weight if weight is not None else arrays.get("running_mean")
    if ref is None:
        raise lifter.error("cannot recover num_features of a traced norm layer without "
                           "affine parameters or running statistics (script the module "
                           "instead of tracing it)", entry)
    put("num_features", ref.shape[0])
    put("affine", "weight" in arrays)
    put("track_running_stats", "running_mean" in arrays)
    if "eps" in a:
        put("eps", float(a["eps"]))
    momentum = a.get("momentum", _UNKNOWN)
    nbt = arrays.get("num_batches_tracked")
    if isinstance(momentum, float) and nbt is not None and int(nbt) > 0 and any(
            n.kind() == "aten::add_" for n in _all_nodes(graph)) and abs(
            momentum - 1.0 / int(nbt)) < 1e-12:
        momentum = None  # traced in training mode with momentum=None (cumulative)
    put("momentum", momentum)


def _traced_conv(put: Any, a: Mapping[str, Any], weight: Any, graph: Any,
                 reader: _ConstantReader, layer_type: str, names: set[str]) -> None:
    """Conv / ConvTranspose: channels and kernel from the weight, the rest from the
    convolution op (and an aten::pad in front for a non-zero padding mode)."""
    groups = a.get("groups", 1)
    groups = groups if isinstance(groups, int) else 1
    put("groups", groups)
    if "Transpose" in layer_type:
        put("in_channels", weight.shape[0])
        put("out_channels", weight.shape[1] * groups)
    else:
        put("out_channels", weight.shape[0])
        put("in_channels", weight.shape[1] * groups)
    put("kernel_size", list(weight.shape[2:]))
    pad = next((n for n in _all_nodes(graph) if n.kind() == "aten::pad"), None)
    if pad is not None and "Transpose" not in layer_type:
        p = reader.args(pad)
        amounts, mode = p.get("pad"), p.get("mode")
        if isinstance(amounts, list) and mode in ("reflect", "replicate", "circular"):
            n = len(amounts) // 2
            put("padding", [amounts[2 * (n - 1 - i)] for i in range(n)])
            put("padding_mode", mode)
    for name in ("stride", "padding", "dilation", "output_padding"):
        if name in a and isinstance(a[name], (list, str)):
            put(name, a[name])
    if "padding_mode" in names:
        put("padding_mode", "zeros")


def _traced_pool(put: Any, a: Mapping[str, Any], graph: Any, reader: _ConstantReader,
                 layer_type: str, names: set[str]) -> None:
    """Pools (and the other layers): the key op's constant arguments; LPPool's norm from
    its aten::pow."""
    if layer_type.startswith("LPPool"):
        pow_node = next((n for n in _all_nodes(graph) if n.kind() == "aten::pow"), None)
        if pow_node is not None:
            put("norm_type", reader.args(pow_node).get("exponent", _UNKNOWN))
    for name, value in a.items():
        if name == "stride" and value == []:
            value = None
        if name == "output_size" and isinstance(value, list):
            value = [None if isinstance(v, _Size) else v for v in value]
        if isinstance(value, (_Input, _Param, _Size)) or value is _UNKNOWN:
            continue
        if isinstance(value, list) and any(isinstance(v, (_Input, _Param, _Size))
                                           or v is _UNKNOWN for v in value):
            continue
        put(name, value)
    if layer_type.startswith("Adaptive") and "return_indices" in names:
        put("return_indices", False)


def _traced_recurrent(put: Any, arrays: Mapping[str, Any], layer_type: str, graph: Any
                      ) -> None:
    """nn.LSTM / GRU / RNN: sizes from the arrays, the rest from aten::lstm / gru /
    rnn_tanh / rnn_relu(input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first)."""
    w_ih, w_hh = arrays.get("weight_ih_l0"), arrays.get("weight_hh_l0")
    if w_ih is None or w_hh is None:
        return
    gates = RECURRENT_GATES[layer_type]
    put("input_size", int(w_ih.shape[1]))
    put("hidden_size", int(w_ih.shape[0]) // gates)
    put("num_layers", len([n for n in arrays if n.startswith("weight_ih_l")
                           and not n.endswith("_reverse")]))
    put("bias", "bias_ih_l0" in arrays)
    put("bidirectional", "weight_ih_l0_reverse" in arrays)
    if "weight_hr_l0" in arrays:
        put("proj_size", int(arrays["weight_hr_l0"].shape[0]))
    elif layer_type == "LSTM":
        put("proj_size", 0)
    ops = {"LSTM": ("aten::lstm",), "GRU": ("aten::gru",),
           "RNN": ("aten::rnn_tanh", "aten::rnn_relu")}[layer_type]
    node = next((n for n in _all_nodes(graph) if n.kind() in ops), None)
    if node is None:
        return
    if layer_type == "RNN":
        put("nonlinearity", "relu" if node.kind() == "aten::rnn_relu" else "tanh")
    consts = [_constant(v) if v.node().kind() == "prim::Constant" else _UNKNOWN
              for v in node.inputs()]
    if len(consts) == 9:  # (input, hx, params, has_biases, num_layers, dropout, train,
        put("dropout", float(consts[5]) if isinstance(consts[5], (int, float)) else _UNKNOWN)
        put("batch_first", consts[8])  # bidirectional, batch_first)


def _traced_lrn(put: Any, reader: Any, graph: Any) -> None:
    """nn.LocalResponseNorm, from F.local_response_norm's traced ops: the window of its
    avg_pool (size), then x / (avg * alpha + k) ** beta."""
    nodes = list(_all_nodes(graph))
    pool = next((n for n in nodes if n.kind() in ("aten::avg_pool2d", "aten::avg_pool3d")),
                None)
    if pool is None:
        return
    kernel = reader.args(pool).get("kernel_size")
    if isinstance(kernel, list) and kernel:
        put("size", kernel[0])
    after = nodes[nodes.index(pool):]
    for kind, name, key in (("aten::mul", "alpha", "other"), ("aten::add", "k", "other"),
                            ("aten::pow", "beta", "exponent")):
        for n in after:
            value = reader.args(n).get(key) if n.kind() == kind else None
            if hasattr(value, "dim") and value.dim() == 0:  # traced numbers are 0-d tensors
                value = value.item()
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                put(name, float(value))
                break
