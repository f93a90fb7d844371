"""ONNX model -> network IR: layers where a pattern matches, catalogue functions elsewhere.

Every ONNX node is converted in graph order.  Patterns with a PyTorch layer behind them
(Gemm, MatMul + Add, Transpose + MatMul, Conv, ConvTranspose, BatchNormalization, pools,
Flatten, Dropout, ...) become layers of the catalogue whose arrays are the initializers
(in PyTorch layout); everything else becomes ``call_function`` nodes of catalogue
functions, with initializers as free parameters read by ``get_attr`` nodes.  Values that
do not depend on the network inputs (Constant, Shape of a static shape, Gather/Concat/...
of those) are folded at import.

Values flow through the converter as one of four kinds: a runtime tensor (an IR node), a
constant (numpy), a parameter (an initializer, materialised as a ``get_attr`` node only
when a generic function needs it) or a lazy value (a transposed or reshaped parameter, a
comparison, a sign) that some consumers recognise and the others materialise.  This is
what lets a consumer recognise ``Transpose(W) -> MatMul``, ``Reshape(slope) -> PRelu`` or
``Greater -> Where`` without a separate pattern pass.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from petab_sciml.catalogue import LAYERS
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import ID_PATTERN, Network

# Node / value metadata written by exporters (PyTorch's dynamo exporter, onnxscript's
# optimizer) and by our own exporter.
META_LAYER = "pkg.petab_sciml.layer"
META_LAYER_TYPE = "pkg.petab_sciml.layer_type"
_NAME_SCOPES = "pkg.torch.onnx.name_scopes"
_CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
_RULE = "pkg.onnxscript.rewriter.rule_name"
_INPUT_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
_FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"

MIN_OPSET = 6
"""Oldest default-domain opset read (the issue targets 13+, the ONNX test data uses 6-12)."""

# Attribute names of torch.fx.GraphModule: layer ids and free-parameter groups become
# submodules in the torch backend and must not shadow these.
_RESERVED = frozenset("""
T_destination add_module add_submodule apply bfloat16 buffers call_super_init children code
compile cpu cuda delete_all_unused_submodules delete_submodule double dump_patches eval
extra_repr float forward get_buffer get_extra_state get_parameter get_submodule graph half ipu
load_state_dict meta modules mtia named_buffers named_children named_modules named_parameters
parameters print_readable recompile register_backward_hook register_buffer
register_forward_hook register_forward_pre_hook register_full_backward_hook
register_full_backward_pre_hook register_load_state_dict_post_hook
register_load_state_dict_pre_hook register_module register_parameter
register_state_dict_post_hook register_state_dict_pre_hook requires_grad_ set_extra_state
set_submodule share_memory state_dict to to_empty to_folder train training type xpu zero_grad
""".split())

_UNARY = {
    "Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Abs": "abs", "Neg": "neg", "Softsign": "softsign", "Softplus": "softplus",
    "HardSwish": "hardswish", "Mish": "mish", "Sin": "sin", "Cos": "cos",
}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}
_COMPARE = {"Greater": "gt", "Less": "lt", "GreaterOrEqual": "ge", "LessOrEqual": "le",
            "Equal": "eq"}
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}
"""ONNX Pad modes -> F.pad modes."""
_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_SELU_ALPHA = 1.6732632423543772
_SELU_GAMMA = 1.0507009873554805
_INT_MAX = 2**31 - 1
_SHAPE_ONLY = {"Identity", "Expand", "Tile", "Reshape", "Unsqueeze", "Squeeze", "Cast",
               "CastLike", "Flatten", "Transpose"}


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class NameEntry:
    """Where one ONNX initializer went: ``group.array`` of the IR.

    ``kind`` is ``layer`` (an array of a lifted layer), ``free`` (a free parameter) or
    ``buffer`` (a non-trainable array: running statistics, constants).  ``transform``
    says how the value was changed on the way (``transposed``, ``scaled by alpha=2``,
    ``reshaped``), ``via`` the alias it was reached through (an Identity output, or the
    parameter an exporter folded it from).
    """

    onnx_name: str
    group: str
    array: str
    kind: str
    transform: str = ""
    via: str = ""

    @property
    def target(self) -> str:
        return f"{self.group}.{self.array}"


@dataclass
class OnnxImport:
    """The result of importing an ONNX model."""

    network: Network
    parameters: dict[str, dict[str, np.ndarray]]
    """``{group: {array: ndarray}}`` in PyTorch layout: layers' arrays and free parameters."""
    names: list[NameEntry]
    """ONNX initializer -> IR array map, in import order."""
    warnings: list[str]
    opset: int
    producer: str = ""
    dtype: str = "float32"
    """``float64`` when the model computes in double precision (its inputs are DOUBLE)."""

    def name_map(self) -> dict[str, list[str]]:
        """``{onnx initializer name: ["group.array", ...]}``."""
        out: dict[str, list[str]] = {}
        for e in self.names:
            out.setdefault(e.onnx_name, []).append(e.target)
        return out

    def format_names(self) -> str:
        """The initializer map as an aligned text table."""
        rows = [("ONNX initializer", "IR array", "kind", "note")]
        for e in self.names:
            note = "; ".join(x for x in (e.transform, f"via {e.via}" if e.via else "") if x)
            rows.append((e.onnx_name, e.target, e.kind, note))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = []
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        return "\n".join(line.rstrip() for line in lines)


# ----------------------------------------------------------------------------- values
@dataclass(frozen=True)
class _T:
    """A runtime tensor: the IR node ``ref``; ``shape`` is static where known (None dims
    are dynamic), None if even the rank is unknown."""

    ref: str
    shape: tuple | None = None


@dataclass(frozen=True, eq=False)
class _C:
    """A constant known at import."""

    value: np.ndarray
    name: str = "const"


@dataclass(frozen=True)
class _P:
    """An initializer used as a parameter, reached through value name ``alias``."""

    init: str
    alias: str


@dataclass(frozen=True, eq=False)
class _Lazy:
    """A value some consumers recognise (the others materialise it): ``transpose`` (args:
    parameter, perm), ``reshape`` (args: parameter, shape; only made for a PRelu slope),
    ``compare`` (args: op type, a, b; a bool tensor), ``float`` (args: a comparison cast
    to float), ``sign`` (args: a)."""

    kind: str
    args: tuple
    node: Any


def _sanitize(name: str, prefix: str = "v") -> str:
    """A valid PEtab id from an arbitrary name (``/layer1/Conv`` -> ``layer1_Conv``)."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", str(name)).strip("_")
    out = re.sub(r"__+", "_", out)
    if not out:
        return prefix
    if out[0].isdigit():
        out = f"{prefix}{out}" if prefix.endswith("_") else f"{prefix}_{out}"
    return out


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (ONNX float attributes
    are float32: 1e-5 arrives as 9.99999974738e-06)."""
    x = float(x)
    if not math.isfinite(x):
        return x
    return float(np.format_float_positional(np.float32(x), unique=True, trim="0"))


def _compact(value: Any) -> Any:
    """A list of equal ints as one int (``[3, 3]`` -> 3), as PyTorch modules print them."""
    if isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v == value[0] for v in value):
        return value[0]
    return value


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


# ----------------------------------------------------------------------------- importer
class _Importer:
    def __init__(self, model: Any, *, source: str | None, network_id: str | None):
        self.onnx = require("onnx", "onnx")
        self.source = source
        self.model = model
        self.opset = self._default_opset(model)
        self.producer = f"{model.producer_name} {model.producer_version}".strip()
        self.graph = model.graph
        self.network_id = network_id
        self.warnings: list[str] = []
        self.nodes: list[dict] = []
        self.node_names: set[str] = set()
        self.layers: list[dict] = []
        self.layer_ids: set[str] = set()
        self.free: list[dict] = []
        self.free_ids: set[str] = set()
        self.groups: set[str] = set()  # free-parameter groups
        self.params: dict[str, dict[str, np.ndarray]] = {}
        self.names: list[NameEntry] = []
        self.prov: dict[str, tuple[str, tuple, dict]] = {}
        self.get_attr_cache: dict[tuple, str] = {}
        self.done: set[int] = set()
        self.trainable_uses: dict[str, list[str]] = {}
        self.shared_layers: dict[tuple, str] = {}
        self.buffer_inits: set[str] = set()
        self._counter: dict[str, int] = {}

    # ------------------------------------------------------------------ setup
    def _default_opset(self, model: Any) -> int:
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                return int(imp.version)
        raise NetworkError("the model imports no default-domain (ai.onnx) opset",
                           file=self.source)

    def _prepare(self) -> None:
        from onnx import numpy_helper

        if self.opset < MIN_OPSET:
            raise NetworkError(f"opset {self.opset} is too old; opsets {MIN_OPSET} and newer "
                               "are supported", file=self.source)
        if len(self.model.functions):
            try:
                from onnx import inliner

                self.model = inliner.inline_local_functions(self.model)
                self.graph = self.model.graph
            except Exception as exc:  # pragma: no cover - depends on the onnx version
                raise NetworkError(f"cannot inline the model's local functions: {exc}",
                                   file=self.source) from None
        self.inits: dict[str, np.ndarray] = {}
        for t in self.graph.initializer:
            try:
                self.inits[t.name] = numpy_helper.to_array(t)
            except Exception as exc:
                raise NetworkError(f"cannot read initializer {t.name!r}: {exc}",
                                   file=self.source) from None
        for t in self.graph.sparse_initializer:
            raise NetworkError(f"sparse initializer {t.values.name!r} is not supported",
                               file=self.source)
        # Metadata of values (dynamo exports put the parameter kind and the folding
        # history of initializers there).
        self.value_meta: dict[str, dict[str, str]] = {}
        for vi in list(self.graph.value_info) + list(self.graph.input):
            props = {p.key: p.value for p in vi.metadata_props}
            if props:
                self.value_meta.setdefault(vi.name, {}).update(props)
        for t in self.graph.initializer:
            props = {p.key: p.value for p in t.metadata_props}
            if props:
                self.value_meta.setdefault(t.name, {}).update(props)
        # PyTorch's dynamo exporter marks parameters and buffers (and tags every node);
        # its other initializers are constants it made (val_3, scalar_tensor_default).
        self.torch_meta = any(_INPUT_KIND in m for m in self.value_meta.values()) or any(
            p.key.startswith("pkg.torch.onnx") for n in self.graph.node
            for p in n.metadata_props)
        # Static shapes from ONNX shape inference (with data propagation).
        self.shapes: dict[str, tuple | None] = {}
        from .onnx_budget import infer_shapes_bounded

        inferred = infer_shapes_bounded(self.model)
        for vi in (list(inferred.graph.value_info) + list(inferred.graph.input)
                   + list(inferred.graph.output)):
            self.shapes[vi.name] = self._shape_of_type(vi.type)
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.graph.node):
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(i)
        self.graph_outputs = {o.name for o in self.graph.output}
        self._find_buffers()
        self.env: dict[str, Any] = {}
        for name, value in self.inits.items():
            self.env[name] = self._init_value(name, value)

    @staticmethod
    def _shape_of_type(tp: Any) -> tuple | None:
        if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
            return None
        dims = []
        for d in tp.tensor_type.shape.dim:
            dims.append(int(d.dim_value) if d.HasField("dim_value") else None)
        return tuple(dims)

    def _init_value(self, name: str, value: np.ndarray) -> Any:
        """An initializer is a parameter unless its role says constant: integer and bool
        arrays are constants, and so are the constants PyTorch's dynamo exporter makes
        (``val_3``, ``scalar_tensor_default``, ``beta_cast``): in its files parameters and
        buffers are marked, or keep their dotted module path when an optimizer rewrote
        them (a BatchNorm fused into a Gemm, a transposed weight), or were folded from a
        root-level parameter (not a scalar)."""
        if value.dtype.kind not in "f":
            return _C(value, name)
        if not self.torch_meta:
            return _P(name, name)
        meta = self.value_meta.get(name, {})
        folded = self._folded_from(name)
        if meta.get(_INPUT_KIND) in ("PARAMETER", "BUFFER") or "." in name \
                or any("." in f for f in folded) or (folded and value.size > 1):
            return _P(name, name)
        return _C(value, name)

    def _trainable(self, init: str) -> bool:
        if init in self.buffer_inits:
            return False
        return self.value_meta.get(init, {}).get(_INPUT_KIND) != "BUFFER"

    def _find_buffers(self) -> None:
        """Initializers that reach the running mean/variance inputs of a
        BatchNormalization (through shape-only ops) are buffers, not trainable."""
        producer = {o: n for n in self.graph.node for o in n.output}
        stack = [n.input[k] for n in self.graph.node if n.op_type == "BatchNormalization"
                 for k in (3, 4) if len(n.input) > k]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self.inits:
                self.buffer_inits.add(name)
            node = producer.get(name)
            if node is not None and node.op_type in _SHAPE_ONLY:
                stack.append(node.input[0])

    def _folded_from(self, init: str) -> list[str]:
        raw = self.value_meta.get(init, {}).get(_FOLDED_FROM)
        if not raw:
            return []
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return []
        return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]

    # ------------------------------------------------------------------ run
    def run(self) -> OnnxImport:
        self._prepare()
        inputs = []
        init_names = set(self.inits)
        for vi in self.graph.input:
            if vi.name in init_names:
                continue
            input_id = self._unique_input_id(vi.name, inputs)
            inputs.append(input_id)
            self._add_node({"name": input_id, "op": "placeholder", "target": input_id})
            self.env[vi.name] = _T(input_id, self.shapes.get(vi.name))
        if not inputs:
            raise NetworkError("the model has no inputs (every graph input has an "
                               "initializer)", file=self.source)
        for i, node in enumerate(self.graph.node):
            if i in self.done:
                continue
            self._convert(i, node)
        outputs = []
        for o in self.graph.output:
            if o.name not in self.env:
                raise NetworkError(f"graph output {o.name!r} is not computed by any node",
                                   file=self.source)
            value = self.env[o.name]
            ref = self.tensor(value, None, hint=o.name)
            outputs.append(ref)
        out_name = self._node_name("output")
        self.nodes.append({"name": out_name, "op": "output", "target": "output",
                           "args": [outputs] if len(outputs) > 1 else [outputs[0]]})
        self._prune()
        for init, targets in self.trainable_uses.items():
            if len(targets) > 1:
                self.warnings.append(
                    f"initializer {init!r} is shared by {', '.join(targets)}; imported as "
                    "independent copies (training unties them)")
        network_id = self.network_id or _sanitize(self.graph.name or "net", "net")
        try:
            network = Network.build(network_id, inputs, self.layers, self.nodes, self.free,
                                    source=self.source)
        except NetworkError as exc:  # pragma: no cover - an importer bug, not user input
            raise NetworkError(f"the imported network is invalid ({exc.message}); please "
                               "report this with the model", file=self.source,
                               entry=exc.entry) from None
        elem = {vi.type.tensor_type.elem_type for vi in self.graph.input
                if vi.name not in self.inits}
        dtype = "float64" if 11 in elem else "float32"
        return OnnxImport(network, self.params, self.names, self.warnings, self.opset,
                          self.producer, dtype)

    def _unique_input_id(self, name: str, taken: list[str]) -> str:
        base = name if ID_PATTERN.match(name) else _sanitize(name, "input_")
        out, k = base, 1
        while out in taken or out in self.node_names:
            out, k = f"{base}_{k}", k + 1
        return out

    def _prune(self) -> None:
        """Drop nodes (and the free parameters they read) that no output depends on."""
        by_name = {n["name"]: n for n in self.nodes}
        live: set[str] = set()
        stack = [n["name"] for n in self.nodes if n["op"] in ("output", "placeholder")]
        while stack:
            name = stack.pop()
            if name in live:
                continue
            live.add(name)
            node = by_name[name]
            for ref in _node_refs(node):
                if ref in by_name and ref not in live:
                    stack.append(ref)
        self.nodes = [n for n in self.nodes if n["name"] in live]
        used_free = {n["target"] for n in self.nodes if n["op"] == "get_attr"}
        dropped = [f for f in self.free if f["id"] not in used_free]
        self.free = [f for f in self.free if f["id"] in used_free]
        for f in dropped:
            group, array = f["id"].split(".", 1)
            self.params[group].pop(array, None)
            if not self.params[group]:
                del self.params[group]
            self.names = [e for e in self.names if e.target != f["id"]]
            for init in list(self.trainable_uses):
                self.trainable_uses[init] = [t for t in self.trainable_uses[init]
                                             if t != f["id"]]
        used_layers = {n["target"] for n in self.nodes if n["op"] == "call_module"}
        for layer in [x for x in self.layers if x["layer_id"] not in used_layers]:
            self.layers.remove(layer)
            self.params.pop(layer["layer_id"], None)
            self.names = [e for e in self.names if e.group != layer["layer_id"]]

    # ------------------------------------------------------------------ errors
    def _where(self, node: Any) -> str:
        return f"node {node.name or node.op_type!r}"

    def error(self, node: Any, message: str) -> NetworkError:
        return NetworkError(f"ONNX op {node.op_type} (opset {self.opset}): {message}",
                            file=self.source, entry=self._where(node))

    def unsupported(self, node: Any, why: str = "") -> NetworkError:
        what = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") \
            else node.op_type
        extra = f" ({why})" if why else ""
        return NetworkError(
            f"ONNX op {what!r} (opset {self.opset}) is not supported{extra}; supported ops: "
            f"{', '.join(SUPPORTED_OPS)}", file=self.source, entry=self._where(node))

    # ------------------------------------------------------------------ naming
    def _node_name(self, base: str) -> str:
        base = _sanitize(base, "n")
        out, k = base, 1
        while out in self.node_names:
            out, k = f"{base}_{k}", k + 1
        self.node_names.add(out)
        return out

    def _add_node(self, node: dict) -> str:
        node.setdefault("args", [])
        node.setdefault("kwargs", {})
        if node["name"] not in self.node_names:
            self.node_names.add(node["name"])
        self.nodes.append(node)
        return node["name"]

    def _free_group_ok(self, group: str) -> bool:
        return group not in self.layer_ids and group not in _RESERVED

    def _layer_id_ok(self, lid: str) -> bool:
        return lid not in self.layer_ids and lid not in self.groups and lid not in _RESERVED

    def _unique_layer_id(self, base: str) -> str:
        base = _sanitize(base, "layer_")
        if base in _RESERVED:
            base = f"{base}_"
        out, k = base, 1
        while not self._layer_id_ok(out):
            out, k = f"{base}_{k}", k + 1
        return out

    def _fallback_layer_id(self, layer_type: str) -> str:
        base = {"PReLU": "prelu"}.get(layer_type, layer_type)
        base = re.sub(r"(\d)d$", r"\1d", base)
        base = re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower().replace("_1d", "1d") \
            .replace("_2d", "2d").replace("_3d", "3d")
        k = self._counter.get(base, 0)
        while True:
            candidate = f"{base}_{k}"
            k += 1
            if self._layer_id_ok(candidate):
                self._counter[base] = k
                return candidate

    def _meta(self, node: Any) -> dict[str, str]:
        return {p.key: p.value for p in node.metadata_props}

    def _scope_path(self, node: Any) -> str | None:
        """The PyTorch module path a node came from: dynamo's ``name_scopes`` metadata
        (``['', 'block', 'block.0', 'linear']`` -> ``block.0``), else a TorchScript-style
        node name (``/block/block.0/Gemm`` -> ``block.0``)."""
        raw = self._meta(node).get(_NAME_SCOPES)
        if raw:
            try:
                scopes = [str(x) for x in ast.literal_eval(raw)]
            except (ValueError, SyntaxError, TypeError):
                scopes = []
            modules = [x for x in scopes[1:-1] if x]
            if modules:
                full = all(b.startswith(a + ".") for a, b in zip(modules, modules[1:]))
                return modules[-1] if full else ".".join(modules)
            if scopes:
                return None
        name = node.name or ""
        if name.startswith("/") and name.count("/") >= 2:
            parts = [p for p in name.split("/")[1:-1] if p]
            if parts:
                return parts[-1]
        return None

    def _module_class(self, node: Any) -> str:
        """The class of the module a node came from (dynamo's ``class_hierarchy``)."""
        raw = self._meta(node).get(_CLASS_HIERARCHY)
        if not raw:
            return ""
        try:
            classes = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return ""
        return str(classes[-2]) if isinstance(classes, (list, tuple)) and len(classes) >= 2 \
            else ""

    def _layer_id(self, node: Any, layer_type: str, sources: Mapping[str, Any]) -> str:
        """Layer id: our own metadata; else the exporter's module scope when the module
        there is of this layer type; else the PyTorch parameter names of the arrays
        (``fc.weight`` -> ``fc``); else any module scope; else type and counter."""
        own = self._meta(node).get(META_LAYER)
        if own and ID_PATTERN.match(own) and self._layer_id_ok(own):
            return own
        path = self._scope_path(node)
        cls = self._module_class(node).rsplit(".", 1)[-1]
        if path and cls == layer_type:
            return self._unique_layer_id(path)
        for array, src in sources.items():
            if not isinstance(src, _P):
                continue
            for cand in (src.alias, src.init, *self._folded_from(src.init)):
                prefix, dot, suffix = cand.rpartition(".")
                if dot and prefix and suffix == array:
                    return self._unique_layer_id(prefix)
        if path:
            return self._unique_layer_id(path)
        return self._fallback_layer_id(layer_type)

    def _free_id(self, p: _P, trainable: bool) -> str:
        candidates = [(p.alias, ""), (p.init, "")]
        candidates += [(f, "_folded") for f in self._folded_from(p.init)]
        for cand, suffix in candidates:
            prefix, dot, last = cand.rpartition(".")
            if dot and prefix and last:
                group, array = _sanitize(prefix, "p_"), _sanitize(last, "p_") + suffix
                if self._free_group_ok(group):
                    return self._unique_free(group, array)
        return self._unique_free("params", _sanitize(p.alias, "p"))

    def _unique_free(self, group: str, array: str) -> str:
        out, k = array, 1
        while f"{group}.{out}" in self.free_ids:
            out, k = f"{array}_{k}", k + 1
        return f"{group}.{out}"

    # ------------------------------------------------------------------ values
    def value(self, name: str, node: Any) -> Any:
        if not name:
            return None
        try:
            return self.env[name]
        except KeyError:
            raise self.error(node, f"input {name!r} is not defined before this node") \
                from None

    def inputs(self, node: Any) -> list[Any]:
        return [self.value(n, node) for n in node.input]

    def shape(self, v: Any) -> tuple | None:
        if isinstance(v, _T):
            return v.shape
        if isinstance(v, _C):
            return tuple(v.value.shape)
        if isinstance(v, _P):
            return tuple(self.inits[v.init].shape)
        if isinstance(v, _Lazy) and v.kind == "transpose":
            s = self.shape(v.args[0])
            return tuple(s[i] for i in v.args[1])
        if isinstance(v, _Lazy) and v.kind == "reshape":
            return tuple(v.args[1])
        return None

    def rank(self, v: Any) -> int | None:
        s = self.shape(v)
        return None if s is None else len(s)

    def static_shape(self, v: Any) -> tuple[int, ...] | None:
        s = self.shape(v)
        if s is None or any(d is None for d in s):
            return None
        return tuple(int(d) for d in s)

    def array(self, v: Any) -> np.ndarray | None:
        """The value of a constant or parameter (None for runtime values)."""
        if isinstance(v, _C):
            return v.value
        if isinstance(v, _P):
            return self.inits[v.init]
        if isinstance(v, _Lazy) and v.kind == "transpose":
            return np.transpose(self.inits[v.args[0].init], v.args[1])
        if isinstance(v, _Lazy) and v.kind == "reshape":
            return self.inits[v.args[0].init].reshape(v.args[1])
        return None

    def static(self, node: Any, index: int, what: str, default: Any = None) -> Any:
        """Input ``index`` as a numpy constant (absent: ``default``)."""
        if index >= len(node.input) or not node.input[index]:
            return default
        v = self.value(node.input[index], node)
        a = self.array(v)
        if a is None:
            raise self.error(node, f"{what} (input {index}) must be known at import (a "
                             "constant or initializer), but it is computed from the network "
                             "inputs")
        return a

    def bind(self, node: Any, index: int, ref: str, shape: Sequence[int] | None = None
             ) -> None:
        """Output ``index`` of ``node`` is the IR node ``ref``; ``shape`` (our own static
        shape) fills in where ONNX shape inference found none."""
        out = node.output[index]
        inferred = self.shapes.get(out)
        if shape is not None and (inferred is None or any(d is None for d in inferred)):
            inferred = tuple(int(d) for d in shape)
        self.env[out] = _T(ref, inferred)

    def alias(self, node: Any, index: int, v: Any) -> None:
        out = node.output[index]
        if isinstance(v, _T):
            shape = self.shapes.get(out, v.shape)
            self.env[out] = _T(v.ref, shape if shape is not None else v.shape)
        elif isinstance(v, _P):
            self.env[out] = _P(v.init, out)
        else:
            self.env[out] = v

    def tensor(self, v: Any, node: Any, *, hint: str = "const") -> str:
        """An IR node name holding ``v`` (creating get_attr nodes for parameters and
        constants on first use)."""
        if isinstance(v, _T):
            return v.ref
        if isinstance(v, _P):
            return self._get_attr_param(v)
        if isinstance(v, _C):
            return self._get_attr_const(v, hint)
        if isinstance(v, _Lazy):
            return self._materialize(v)
        raise self.error(node, "missing input")

    def _materialize(self, v: _Lazy) -> str:
        """The IR node of a lazy value (made once, whichever consumer asks first)."""
        key = ("lazy", id(v))
        if key in self.get_attr_cache:
            return self.get_attr_cache[key]
        out = v.node.output[0]
        if v.kind == "transpose":
            ref = self.emit("permute", [self._get_attr_param(v.args[0])],
                            {"dims": list(v.args[1])})
        elif v.kind == "reshape":
            ref = self.emit("reshape", [self._get_attr_param(v.args[0])],
                            {"shape": list(v.args[1])})
        elif v.kind == "compare":
            op, a, b = v.args
            ref = self.emit(_COMPARE[op], [self.operand(a, v.node, b),
                                           self.operand(b, v.node, a)], name=out)
        elif v.kind == "float":  # a comparison cast to float: 1.0 where true, else 0.0
            ref = self.emit("where", [self._materialize(v.args[0]), 1.0, 0.0], name=out)
        else:  # sign
            ref = self.emit("sign", [self.tensor(v.args[0], v.node)], name=out)
        self.get_attr_cache[key] = ref
        return ref

    def _get_attr_param(self, p: _P) -> str:
        key = ("param", p.init)
        if key in self.get_attr_cache:
            return self.get_attr_cache[key]
        trainable = self._trainable(p.init)
        fid = self._free_id(p, trainable)
        value = self.inits[p.init]
        self._register_free(fid, value, trainable)
        kind = "free" if trainable else "buffer"
        via = p.alias if p.alias != p.init else ""
        self.names.append(NameEntry(p.init, *fid.split(".", 1), kind, "", via))
        if trainable:
            self.trainable_uses.setdefault(p.init, []).append(fid)
        ref = self._add_node({"name": self._node_name(fid.replace(".", "_")),
                              "op": "get_attr", "target": fid})
        self.get_attr_cache[key] = ref
        return ref

    def _get_attr_const(self, c: _C, hint: str) -> str:
        key = ("const", id(c))
        if key in self.get_attr_cache:
            return self.get_attr_cache[key]
        value = np.asarray(c.value)
        if value.dtype.kind != "f":
            value = value.astype(np.float32)
        fid = self._unique_free("constants", _sanitize(c.name if c.name != "const" else hint,
                                                       "c"))
        self._register_free(fid, value, False)
        ref = self._add_node({"name": self._node_name(fid.replace(".", "_")),
                              "op": "get_attr", "target": fid})
        self.get_attr_cache[key] = ref
        return ref

    def _register_free(self, fid: str, value: np.ndarray, trainable: bool) -> None:
        group, array = fid.split(".", 1)
        self.free.append({"id": fid, "shape": list(value.shape), "trainable": trainable})
        self.free_ids.add(fid)
        self.groups.add(group)
        self.params.setdefault(group, {})[array] = np.array(value)

    def operand(self, v: Any, node: Any, other: Any = None) -> Any:
        """A node name, or a Python number for a size-1 constant that does not change the
        result's rank."""
        if isinstance(v, _C) and v.value.size == 1 and v.value.dtype.kind in "fiub":
            other_rank = self.rank(other) if other is not None else None
            if v.value.ndim == 0 or (other_rank is not None and v.value.ndim <= other_rank):
                x = v.value.reshape(()).item()
                return float(x) if v.value.dtype.kind in "fb" or not float(x).is_integer() \
                    else int(x)
        return self.tensor(v, node)

    def emit(self, fn: str, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None,
             *, name: str | None = None) -> str:
        ref = self._node_name(name or fn)
        kw = dict(kwargs or {})
        self.nodes.append({"name": ref, "op": "call_function", "target": fn,
                           "args": list(args), "kwargs": kw})
        self.prov[ref] = (fn, tuple(args), kw)
        return ref

    def out_name(self, node: Any, index: int = 0) -> str:
        return node.output[index] if index < len(node.output) else node.op_type

    def attrs(self, node: Any) -> dict[str, Any]:
        from onnx import helper, numpy_helper

        out = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode("utf-8")
            elif hasattr(v, "dims") and hasattr(v, "data_type"):
                v = numpy_helper.to_array(v)
            out[a.name] = v
        return out

    def used(self, node: Any, index: int) -> bool:
        """Whether output ``index`` of ``node`` is read by anything."""
        if index >= len(node.output) or not node.output[index]:
            return False
        name = node.output[index]
        return name in self.graph_outputs or bool(self.consumers.get(name))

    def sole_consumer(self, name: str) -> tuple[int, Any] | None:
        """The single node reading value ``name`` (None if several, or a graph output)."""
        if name in self.graph_outputs:
            return None
        users = self.consumers.get(name, [])
        if len(set(users)) != 1:
            return None
        i = users[0]
        if i in self.done:
            return None
        return i, self.graph.node[i]

    # ------------------------------------------------------------------ layers
    def add_layer(self, node: Any, layer_type: str, args: dict[str, Any],
                  arrays: Mapping[str, tuple[np.ndarray, Any, str]],
                  inputs: Sequence[str], *, out_hint: str | None = None) -> str:
        """Add a layer (arrays: name -> (value, source value, transform)) and call it."""
        spec = LAYERS[layer_type]
        if spec.spatial_dims == 1:  # PyTorch writes 1-d sizes as ints (LPPool1d needs it)
            args = {k: _compact(v) for k, v in args.items()}
        config = spec.resolve_args(args, file=self.source, entry=self._where(node))
        shapes = spec.array_shapes(config)
        for name, (value, _, _) in arrays.items():
            if tuple(value.shape) != tuple(shapes.get(name, ())):
                raise self.error(node, f"array {name!r} of the {layer_type} has shape "
                                 f"{tuple(value.shape)}, expected {shapes.get(name)}")
        key = None
        if arrays and all(isinstance(v[1], _P) for v in arrays.values()):
            key = (layer_type, repr(sorted(args.items())),
                   tuple((k, v[1].init, v[2]) for k, v in sorted(arrays.items())))
            if key in self.shared_layers:  # the same module called again (weight sharing)
                lid = self.shared_layers[key]
                ref = self._node_name(out_hint or lid)
                self._add_node({"name": ref, "op": "call_module", "target": lid,
                                "args": list(inputs)})
                return ref
        lid = self._layer_id(node, layer_type, {k: v[1] for k, v in arrays.items()})
        if key is not None:
            self.shared_layers[key] = lid
        self._check_fused(node, lid, layer_type, arrays)
        self.layer_ids.add(lid)
        self.layers.append({"layer_id": lid, "layer_type": layer_type, "args": args})
        trainable = {a.name: a.trainable for a in spec.arrays}
        for name, (value, src, transform) in arrays.items():
            self.params.setdefault(lid, {})[name] = np.array(value)
            if isinstance(src, _Lazy) and src.kind == "transpose":
                src = src.args[0]
            if isinstance(src, _P):
                kind = "layer" if trainable[name] else "buffer"
                via = src.alias if src.alias != src.init else ""
                folded = self._folded_from(src.init)
                if folded and not via:
                    via = "folded from " + ", ".join(folded)
                self.names.append(NameEntry(src.init, lid, name, kind, transform, via))
                if trainable[name]:
                    self.trainable_uses.setdefault(src.init, []).append(f"{lid}.{name}")
            elif isinstance(src, _C):
                self.names.append(NameEntry(src.name, lid, name, "constant", transform))
        ref = self._node_name(out_hint or lid)
        self._add_node({"name": ref, "op": "call_module", "target": lid, "args": list(inputs)})
        return ref

    def _check_fused(self, node: Any, lid: str, layer_type: str,
                     arrays: Mapping[str, tuple[np.ndarray, Any, str]]) -> None:
        meta = self._meta(node)
        rule = meta.get(_RULE, "")
        cls = self._module_class(node)
        reason = ""
        if "fuse" in rule.lower():
            reason = f"the exporter's optimizer rewrote it ({rule})"
        elif cls and "BatchNorm" in cls and not layer_type.startswith("BatchNorm"):
            reason = f"the exporter attributes it to a {cls.rsplit('.', 1)[-1]} module"
        elif layer_type.startswith(("Conv", "Linear")) and node.op_type != "MatMul":
            weight = arrays.get("weight", (None, None, ""))[1]
            if isinstance(weight, _P) and weight.init.startswith("onnx::") \
                    and self._scope_path(node):
                reason = (f"its weight {weight.init!r} is an export-time constant, not the "
                          "module's parameter")
        if reason:
            self.warnings.append(
                f"layer {lid!r} ({layer_type}): weights fused at export ({reason}); another "
                "layer such as a BatchNorm was probably folded into it, so the imported "
                f"{lid}.weight/{lid}.bias are the fused values and training them is not "
                "training the original module. Export without constant folding (dynamo: "
                "optimize=False; TorchScript: do_constant_folding=False) to keep the layers "
                "apart.")

    # ------------------------------------------------------------------ dispatch
    def _convert(self, index: int, node: Any) -> None:
        if node.domain not in ("", "ai.onnx"):
            raise self.unsupported(node, f"custom domain {node.domain!r}")
        handler = _HANDLERS.get(node.op_type)
        if handler is None:
            raise self.unsupported(node)
        self.index = index
        ins = self.inputs(node)
        # Fold nodes whose inputs are all constants.
        if node.op_type not in _NO_FOLD and all(
                v is None or isinstance(v, _C) for v in ins) and ins:
            if self._fold(node, ins):
                return
        if node.op_type in ("Shape", "Size") and self._fold_shape(node, ins[0]):
            return
        handler(self, node, ins)

    def _fold(self, node: Any, ins: Sequence[Any]) -> bool:
        if node.op_type == "Identity":
            self.env[node.output[0]] = ins[0]
            return True
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        self._check_fold_budget(node, ins)
        feeds, graph_inputs = {}, []
        for name, v in zip(node.input, ins):
            if v is not None and name not in feeds:
                feeds[name] = v.value
                graph_inputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(v.value.dtype), v.value.shape))
        outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
        graph = helper.make_graph([node], "fold", graph_inputs, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            results = ReferenceEvaluator(model).run(None, feeds)
        except Exception as exc:
            raise self.error(node, f"cannot fold this constant subgraph: {exc}") from None
        for name, value in zip([o for o in node.output if o], results):
            self.env[name] = _C(np.asarray(value), name)
        return True

    def _check_fold_budget(self, node: Any, ins: Sequence[Any]) -> None:
        """Refuse to fold a node whose outputs would exceed ``max_folded_elements``."""
        from petab_sciml import limits

        from .onnx_budget import folded_elements

        size = folded_elements(node, [None if v is None else v.value for v in ins],
                               self.attrs(node), self.opset)
        if size is not None:
            limits.check("max_folded_elements", f"elements of the folded output of ONNX op "
                         f"{node.op_type}", size, file=self.source, entry=self._where(node))

    def _fold_shape(self, node: Any, v: Any) -> bool:
        shape = self.static_shape(v)
        if shape is None:
            return False
        if node.op_type == "Size":
            value = np.array(math.prod(shape), dtype=np.int64)
        else:
            a = self.attrs(node)
            value = np.array(shape, dtype=np.int64)[a.get("start", 0):a.get("end", None)]
        self.env[node.output[0]] = _C(value, node.output[0])
        return True

    # ------------------------------------------------------------------ helpers
    def norm_axis(self, node: Any, axis: int, rank: int | None, *, extra: int = 0) -> int:
        if axis >= 0:
            return axis
        if rank is None:
            raise self.error(node, f"negative axis {axis} needs the input rank, which shape "
                             "inference could not determine")
        return axis + rank + extra

    def index_on(self, node: Any, axis: int, item: Any, rank: int | None) -> list:
        """A getitem index applying ``item`` on ``axis`` (negative axes via Ellipsis)."""
        full = {"slice": [None, None, None]}
        if axis >= 0:
            return [full] * axis + [item]
        return ["...", item] + [full] * (-axis - 1)

    def slice_axis(self, x: str, node: Any, axis: int, start: int | None, stop: int | None,
                   rank: int | None, *, step: int | None = None) -> str:
        return self.emit("getitem", [x], {"index": self.index_on(
            node, axis, {"slice": [start, stop, step]}, rank)})

    def pad(self, node: Any, x: str, shape: tuple | None, begins: Sequence[int],
            ends: Sequence[int], mode: str = "constant", value: float = 0.0) -> str:
        """Pad ``x`` (ONNX Pad semantics: ``begins``/``ends`` per axis, negative pads crop)
        with the catalogue function ``pad`` (PyTorch's ``F.pad``); non-constant modes that
        ``F.pad`` cannot express (other axes than the last three, negative pads, wrapping
        more than once) with ``getitem`` + ``cat``."""
        if not any(begins) and not any(ends):
            return x
        if mode not in _PAD_MODES:
            raise self.error(node, f"pad mode {mode!r} is not supported")
        rank = len(begins)
        first = min(a for a in range(rank) if begins[a] or ends[a])
        k = rank - first  # F.pad lists (begin, end) pairs from the last axis backwards
        if mode != "constant":
            # PyTorch pads the last 1, 2 or 3 axes of inputs of rank k+1 or k+2.
            k = next((kk for kk in range(k, 4) if rank in (kk + 1, kk + 2)), 0)
            sizes = [None if shape is None else shape[a] for a in range(rank)]
            if not k or any(int(b) < 0 or int(e) < 0 for b, e in zip(begins, ends)) or any(
                    n is not None and (max(int(b), int(e)) >= n if mode == "reflect"
                                       else max(int(b), int(e)) > n if mode == "wrap"
                                       else False)
                    for n, b, e in zip(sizes, begins, ends)):
                return self._pad_pieces(node, x, shape, begins, ends, mode)
        pads: list[int] = []
        for a in range(rank - 1, rank - 1 - k, -1):
            pads += [int(begins[a]), int(ends[a])]
        kwargs: dict[str, Any] = {"pad": pads}
        if mode != "constant":
            kwargs["mode"] = _PAD_MODES[mode]
        elif value != 0.0:
            kwargs["value"] = _f32(value)
        return self.emit("pad", [x], kwargs)

    def _pad_pieces(self, node: Any, x: str, shape: tuple | None, begins: Sequence[int],
                    ends: Sequence[int], mode: str) -> str:
        """Non-constant ONNX padding as slices of ``x`` concatenated along each axis."""
        rank = len(begins)
        cur = list(shape) if shape is not None else None
        for axis in range(rank):
            b, e = int(begins[axis]), int(ends[axis])
            if b == 0 and e == 0:
                continue
            if b < 0 or e < 0:  # negative pads crop
                size = None if cur is None else cur[axis]
                stop = None if e >= 0 else (e if size is None else size + e)
                x = self.slice_axis(x, node, axis, max(-b, 0), stop, rank)
                if cur is not None and cur[axis] is not None:
                    cur[axis] = cur[axis] + min(b, 0) + min(e, 0)
                b, e = max(b, 0), max(e, 0)
                if b == 0 and e == 0:
                    continue
            size = None if cur is None else cur[axis]
            if size is None:
                raise self.error(node, f"{mode} padding of axis {axis} needs its static size "
                                 "here (PyTorch's F.pad pads only the last three axes)")
            if mode == "reflect":
                if b >= size or e >= size:
                    raise self.error(node, f"reflect padding of {max(b, e)} exceeds the "
                                     f"axis size {size} - 1")
                idx_b = list(range(b, 0, -1))
                idx_e = [size - 2 - k for k in range(e)]
            elif mode == "edge":
                idx_b, idx_e = [0] * b, [size - 1] * e
            else:  # wrap
                idx_b = [(size - b + k) % size for k in range(b)]
                idx_e = [k % size for k in range(e)]
            before = [self.slice_axis(x, node, axis, k, k + 1, rank) for k in idx_b]
            after = [self.slice_axis(x, node, axis, k, k + 1, rank) for k in idx_e]
            x = self.emit("cat", [before + [x] + after], {"dim": axis})
            if cur is not None and cur[axis] is not None:
                cur[axis] += b + e
        return x

    def broadcast_old(self, node: Any, a: Any, b: Any) -> Any:
        """Opsets < 7: ``broadcast=1, axis=k`` aligns B with A starting at axis k."""
        at = self.attrs(node)
        if self.opset >= 7 or not at.get("broadcast") or "axis" not in at:
            return b
        ra, rb = self.rank(a), self.rank(b)
        if ra is None or rb is None:
            return b
        axis = at["axis"] if at["axis"] >= 0 else at["axis"] + ra
        trailing = ra - axis - rb
        if trailing <= 0:
            return b
        arr = self.array(b)
        if isinstance(b, _C):
            return _C(arr.reshape(arr.shape + (1,) * trailing), b.name)
        ref = self.tensor(b, node)
        target = list(self.static_shape(b) or ()) + [1] * trailing
        if self.static_shape(b) is None:
            raise self.error(node, "legacy axis broadcasting needs B's static shape")
        return _T(self.emit("reshape", [ref], {"shape": target}), tuple(target))


def _node_refs(node: Mapping[str, Any]) -> list[str]:
    """Node names a node dict reads (positional args only: we never pass refs by keyword)."""
    if node["op"] in ("placeholder", "get_attr"):
        return []
    out: list[str] = []
    for a in node.get("args", []):
        if isinstance(a, str):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(x for x in a if isinstance(x, str))
    return out


# ============================================================================ handlers
_HANDLERS: dict[str, Any] = {}
_NO_FOLD = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike",
            "Bernoulli", "Multinomial"}


def _handles(*ops: str):
    def deco(fn):
        for op in ops:
            _HANDLERS[op] = fn
        return fn
    return deco


@_handles(*_UNARY)
def _unary(im: _Importer, node: Any, ins: list) -> None:
    x = im.tensor(ins[0], node)
    im.bind(node, 0, im.emit(_UNARY[node.op_type], [x], name=im.out_name(node)))


@_handles("Identity")
def _identity(im: _Importer, node: Any, ins: list) -> None:
    im.alias(node, 0, ins[0])


@_handles("Cast", "CastLike")
def _cast(im: _Importer, node: Any, ins: list) -> None:
    if node.op_type == "Cast":
        to = im.attrs(node).get("to")
    else:
        like = ins[1]
        arr = im.array(like)
        to = 1 if arr is None or arr.dtype.kind == "f" else -1
    x = ins[0]
    if isinstance(x, _Lazy) and x.kind == "compare":
        if to == 9:  # BOOL: already one
            im.alias(node, 0, x)
            return
        if to in _FLOAT_TYPES:  # 1.0 / 0.0 (materialised as a where)
            im.env[node.output[0]] = _Lazy("float", (x,), node)
            return
    if to not in _FLOAT_TYPES:
        raise im.error(node, "casting a network value to a non-float type is not supported "
                       "(networks compute in floating point; comparisons are bool)")
    im.alias(node, 0, x)


@_handles("Constant")
def _constant(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    if "value" in a:
        value = np.asarray(a["value"])
    elif "value_float" in a:
        value = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        value = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        value = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        value = np.array(a["value_ints"], dtype=np.int64)
    else:
        raise im.error(node, f"Constant with attribute {sorted(a)} is not supported")
    im.env[node.output[0]] = _C(value, node.output[0])


@_handles("Shape", "Size", "ConstantOfShape", "Range", "Not", "And", "Or",
          "Floor", "Ceil", "Round", "Mod", "NonZero", "ArgMax", "ArgMin")
def _fold_only(im: _Importer, node: Any, ins: list) -> None:
    raise im.unsupported(node, "only supported on values known at import (they are folded); "
                         "here it depends on the network inputs" + (
                             " and shape inference found no static shape"
                             if node.op_type in ("Shape", "Size") else ""))


@_handles("Elu", "Celu")
def _elu(im: _Importer, node: Any, ins: list) -> None:
    alpha = _f32(im.attrs(node).get("alpha", 1.0))
    im.bind(node, 0, im.emit(node.op_type.lower(), [im.tensor(ins[0], node)],
                             {"alpha": alpha}, name=im.out_name(node)))


@_handles("LeakyRelu")
def _leaky(im: _Importer, node: Any, ins: list) -> None:
    alpha = _f32(im.attrs(node).get("alpha", 0.01))
    im.bind(node, 0, im.emit("leaky_relu", [im.tensor(ins[0], node)],
                             {"negative_slope": alpha}, name=im.out_name(node)))


@_handles("Selu")
def _selu(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    alpha, gamma = a.get("alpha", _SELU_ALPHA), a.get("gamma", _SELU_GAMMA)
    x = im.tensor(ins[0], node)
    if _close(alpha, _SELU_ALPHA, 1e-6) and _close(gamma, _SELU_GAMMA, 1e-6):
        im.bind(node, 0, im.emit("selu", [x], name=im.out_name(node)))
        return
    e = im.emit("elu", [x], {"alpha": _f32(alpha)})
    im.bind(node, 0, im.emit("mul", [e, _f32(gamma)], name=im.out_name(node)))


@_handles("HardSigmoid")
def _hardsigmoid(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    alpha, beta = a.get("alpha", 0.2), a.get("beta", 0.5)
    x = im.tensor(ins[0], node)
    if _close(alpha, 1 / 6, 1e-6) and _close(beta, 0.5, 1e-6):
        im.bind(node, 0, im.emit("hardsigmoid", [x], name=im.out_name(node)))
        return
    y = im.emit("add", [im.emit("mul", [x, _f32(alpha)]), _f32(beta)])
    im.bind(node, 0, im.emit("clamp", [y], {"min": 0.0, "max": 1.0}, name=im.out_name(node)))


@_handles("Gelu")
def _gelu(im: _Importer, node: Any, ins: list) -> None:
    approx = im.attrs(node).get("approximate", "none")
    im.bind(node, 0, im.emit("gelu", [im.tensor(ins[0], node)], {"approximate": approx},
                             name=im.out_name(node)))


@_handles("Clip")
def _clip(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    if im.opset < 11:
        lo, hi = a.get("min"), a.get("max")
    else:
        lo = im.static(node, 1, "min")
        hi = im.static(node, 2, "max")
    lo = None if lo is None else _f32(np.asarray(lo).reshape(()).item())
    hi = None if hi is None else _f32(np.asarray(hi).reshape(()).item())
    x = ins[0]
    if lo is None and hi is None:
        im.alias(node, 0, x)
        return
    im.bind(node, 0, im.emit("clamp", [im.tensor(x, node)], {"min": lo, "max": hi},
                             name=im.out_name(node)))


@_handles("Softmax", "LogSoftmax")
def _softmax(im: _Importer, node: Any, ins: list) -> None:
    fn = "softmax" if node.op_type == "Softmax" else "log_softmax"
    x = ins[0]
    rank = im.rank(x)
    axis = im.attrs(node).get("axis", -1 if im.opset >= 13 else 1)
    ref = im.tensor(x, node)
    if im.opset >= 13:
        im.bind(node, 0, im.emit(fn, [ref], {"dim": axis}, name=im.out_name(node)))
        return
    # Opsets < 13: softmax over the input coerced to 2-D at ``axis``.
    if rank is None:
        raise im.error(node, "opset < 13 softmax needs the input rank")
    axis = im.norm_axis(node, axis, rank)
    if axis == rank - 1:
        im.bind(node, 0, im.emit(fn, [ref], {"dim": -1}, name=im.out_name(node)))
        return
    shape = im.static_shape(x)
    if shape is None:
        raise im.error(node, "opset < 13 softmax over several axes needs a static shape")
    flat = im.emit("flatten", [ref], {"start_dim": axis, "end_dim": -1})
    s = im.emit(fn, [flat], {"dim": -1})
    im.bind(node, 0, im.emit("reshape", [s], {"shape": list(shape)}, name=im.out_name(node)))


@_handles("Reciprocal")
def _reciprocal(im: _Importer, node: Any, ins: list) -> None:
    im.bind(node, 0, im.emit("div", [1.0, im.tensor(ins[0], node)], name=im.out_name(node)))


@_handles(*_BINARY)
def _binary(im: _Importer, node: Any, ins: list) -> None:
    a, b = ins[0], im.broadcast_old(node, ins[0], ins[1])
    if node.op_type == "Mul":
        for s, other in ((a, b), (b, a)):
            if isinstance(s, _Lazy) and s.kind == "sign" and _is_relu_abs(im, other, s.args[0]):
                im.alias(node, 0, s.args[0])  # sign(y) * relu(|y|) == y
                return
    fn = _BINARY[node.op_type]
    x = im.operand(a, node, b)
    y = im.operand(b, node, a)
    if not isinstance(x, str) and not isinstance(y, str):  # pragma: no cover - folded
        raise im.error(node, "both operands are numbers")
    im.bind(node, 0, im.emit(fn, [x, y], name=im.out_name(node)))


def _is_relu_abs(im: _Importer, v: Any, y: Any) -> bool:
    if not isinstance(v, _T) or not isinstance(y, _T):
        return False
    p = im.prov.get(v.ref)
    if not p or p[0] != "relu":
        return False
    q = im.prov.get(p[1][0])
    return bool(q) and q[0] == "abs" and q[1][0] == y.ref


@_handles("Sum", "Mean", "Max", "Min")
def _variadic(im: _Importer, node: Any, ins: list) -> None:
    vals = [v for v in ins if v is not None]
    if len(vals) == 1:
        im.alias(node, 0, vals[0])
        return
    if node.op_type in ("Max", "Min"):  # numbers last: they become clamp bounds
        vals.sort(key=lambda v: isinstance(v, _C) and v.value.size == 1)
    acc = im.tensor(vals[0], node)
    for i, v in enumerate(vals[1:], start=1):
        last = i == len(vals) - 1 and node.op_type in ("Sum", "Max", "Min")
        name = im.out_name(node) if last else None
        other = im.operand(v, node, vals[0])
        if node.op_type in ("Sum", "Mean"):
            acc = im.emit("add", [acc, other], name=name)
        elif not isinstance(other, str):  # max(x, c) = clamp(x, min=c)
            bound = "min" if node.op_type == "Max" else "max"
            acc = im.emit("clamp", [acc], {bound: _f32(other)}, name=name)
        else:
            fn = "maximum" if node.op_type == "Max" else "minimum"
            acc = im.emit(fn, [acc, other], name=name)
    if node.op_type == "Mean":
        acc = im.emit("div", [acc, float(len(vals))], name=im.out_name(node))
    im.bind(node, 0, acc)


@_handles(*_COMPARE)
def _compare(im: _Importer, node: Any, ins: list) -> None:
    b = im.broadcast_old(node, ins[0], ins[1])
    im.env[node.output[0]] = _Lazy("compare", (node.op_type, ins[0], b), node)


@_handles("Sign")
def _sign(im: _Importer, node: Any, ins: list) -> None:
    im.env[node.output[0]] = _Lazy("sign", (ins[0],), node)


@_handles("Where")
def _where(im: _Importer, node: Any, ins: list) -> None:
    cond, x, y = ins
    # softplus(x, beta, threshold) as PyTorch exporters write it:
    # Where(Greater(beta*x, threshold), x, Softplus(beta*x) / beta)
    if isinstance(cond, _Lazy) and cond.kind == "compare" and cond.args[0] == "Greater" \
            and isinstance(x, _T) and isinstance(y, _T):
        bx, thr = cond.args[1], im.array(cond.args[2])
        if isinstance(bx, _T) and thr is not None and thr.size == 1:
            beta = _softplus_beta(im, x.ref, bx.ref, y.ref)
            if beta is not None:
                im.bind(node, 0, im.emit("softplus", [x.ref], {
                    "beta": beta, "threshold": _f32(thr.reshape(()).item())},
                    name=im.out_name(node)))
                return
    if isinstance(cond, _C):  # a constant mask: a bool tensor from a float constant
        mask = _C(np.asarray(cond.value, dtype=np.float32), cond.name)
        c = im.emit("gt", [im.tensor(mask, node, hint="mask"), 0.5])
    else:
        c = im.tensor(cond, node)  # a comparison (or a bool tensor made of one)
    ranks = [r for r in (im.rank(cond), im.rank(x), im.rank(y)) if r is not None]
    top = _T("", (None,) * max(ranks)) if ranks else None
    a, b = im.operand(x, node, top), im.operand(y, node, top)
    im.bind(node, 0, im.emit("where", [c, a, b], name=im.out_name(node)))


def _softplus_beta(im: _Importer, x: str, bx: str, y: str) -> float | None:
    """beta if ``y`` is softplus(bx)/beta with bx = beta*x (beta = 1: either may be absent)."""
    mul_beta = 1.0
    if bx != x:
        p = im.prov.get(bx)
        if not p or p[0] != "mul" or x not in p[1]:
            return None
        other = [a for a in p[1] if a != x]
        if len(other) != 1 or isinstance(other[0], str):
            return None
        mul_beta = float(other[0])
    sp, div_beta = y, 1.0
    q = im.prov.get(y)
    if q and q[0] == "div" and not isinstance(q[1][1], str):
        sp, div_beta = q[1][0], float(q[1][1])
    r = im.prov.get(sp)
    if not r or r[0] != "softplus" or r[1][0] != bx or r[2] or not _close(mul_beta, div_beta):
        return None
    return _f32(mul_beta)


@_handles("Erf")
def _erf(im: _Importer, node: Any, ins: list) -> None:
    """GELU as exporters decompose it: x * 0.5 * (1 + erf(x / sqrt(2))), any order."""
    v = ins[0]
    x = None
    p = im.prov.get(v.ref) if isinstance(v, _T) else None
    if p and p[0] == "div" and isinstance(p[1][0], str) and not isinstance(p[1][1], str) \
            and _close(p[1][1], math.sqrt(2), 1e-4):
        x = p[1][0]
    elif p and p[0] == "mul":
        a, b = p[1]
        if isinstance(a, str) and not isinstance(b, str) and _close(b, 1 / math.sqrt(2), 1e-4):
            x = a
        elif isinstance(b, str) and not isinstance(a, str) \
                and _close(a, 1 / math.sqrt(2), 1e-4):
            x = b
    chain = _gelu_chain(im, node, x) if x is not None else None
    if chain is None:
        im.bind(node, 0, im.emit("erf", [im.tensor(v, node)], name=im.out_name(node)))
        return
    last, consumed = chain
    im.done.update(consumed)
    ref = im.emit("gelu", [x], {"approximate": "none"}, name=last.output[0])
    im.env[last.output[0]] = _T(ref, im.shapes.get(last.output[0]))


def _gelu_chain(im: _Importer, erf: Any, x: str) -> tuple[Any, list[int]] | None:
    nxt = im.sole_consumer(erf.output[0])
    if not nxt or nxt[1].op_type != "Add":
        return None
    i_add, add = nxt
    other = [n for n in add.input if n != erf.output[0]]
    if len(other) != 1 or not _is_const(im, other[0], 1.0):
        return None
    cur, consumed, need = add, [i_add], {"x", "half"}
    while need:
        nxt = im.sole_consumer(cur.output[0])
        if not nxt or nxt[1].op_type != "Mul":
            break
        i, mul = nxt
        other = [n for n in mul.input if n != cur.output[0]]
        if len(other) != 1:
            return None
        o = other[0]
        if "half" in need and _is_const(im, o, 0.5):
            need.discard("half")
        elif "x" in need and isinstance(im.env.get(o), _T) and im.env[o].ref == x:
            need.discard("x")
        else:
            return None
        consumed.append(i)
        cur = mul
    if need:
        return None
    return cur, consumed


def _is_const(im: _Importer, name: str, value: float) -> bool:
    """Whether ``name`` is a size-1 constant equal to ``value`` (looking ahead at
    Constant nodes that come later in the graph)."""
    v = im.env.get(name)
    if v is None:
        node = next((n for n in im.graph.node if name in n.output), None)
        if node is None or node.op_type != "Constant":
            return False
        a = im.attrs(node)
        raw = a.get("value", a.get("value_float", a.get("value_int")))
        if raw is None:
            return False
        v = _C(np.asarray(raw))
    return isinstance(v, _C) and v.value.size == 1 and _close(float(v.value.reshape(())), value)


# ---------------------------------------------------------------- linear algebra
def _as_weight(im: _Importer, v: Any) -> tuple[np.ndarray, _P, bool] | None:
    """(value as stored, parameter, transposed-already) if ``v`` is a 2-D parameter."""
    if isinstance(v, _P) and im.inits[v.init].ndim == 2:
        return im.inits[v.init], v, False
    if isinstance(v, _Lazy) and v.kind == "transpose" and tuple(v.args[1]) == (1, 0) \
            and im.inits[v.args[0].init].ndim == 2:
        return im.inits[v.args[0].init], v.args[0], True
    return None


def _weight_named(im: _Importer, p: _P) -> bool:
    """Whether an initializer is named like a module's weight (``fc.weight``)."""
    return any(n.endswith(".weight") for n in (p.alias, p.init, *im._folded_from(p.init)))


def _bias_of(im: _Importer, node: Any, out_name: str, n_out: int, in_rank: int | None
             ) -> tuple[np.ndarray, _P, int, str] | None:
    """A following ``Add(out, b)`` whose b is a parameter of n_out values."""
    nxt = im.sole_consumer(out_name)
    if not nxt or nxt[1].op_type != "Add":
        return None
    i, add = nxt
    other = [n for n in add.input if n != out_name]
    if len(other) != 1 or len(add.input) != 2:
        return None
    b = im.env.get(other[0])
    if not isinstance(b, _P):
        return None
    value = im.inits[b.init]
    if value.shape == (n_out,) or (value.shape == (1, n_out) and (in_rank or 0) >= 2):
        return value.reshape(n_out), b, i, "" if value.ndim == 1 else "reshaped"
    return None


@_handles("Transpose")
def _transpose(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    perm = im.attrs(node).get("perm")
    if perm is None:
        if rank is None:
            raise im.error(node, "Transpose without perm needs the input rank")
        perm = list(range(rank))[::-1]
    perm = [int(p) for p in perm]
    if isinstance(x, _P):
        im.env[node.output[0]] = _Lazy("transpose", (x, tuple(perm)), node)
        return
    im.bind(node, 0, im.emit("permute", [im.tensor(x, node)], {"dims": perm},
                             name=im.out_name(node)))


@_handles("MatMul")
def _matmul(im: _Importer, node: Any, ins: list) -> None:
    a, b = ins
    w = _as_weight(im, b)
    if w is not None and isinstance(a, _T):
        stored, src, pre_t = w
        weight = stored if pre_t else stored.T
        n_out, n_in = weight.shape
        bias = _bias_of(im, node, node.output[0], n_out, im.rank(a))
        # x @ W.T, x @ W + b and x @ <module>.weight are linear layers; a bare x @ W with a
        # root-level parameter W stays a matmul with W under its own name.
        if pre_t or bias is not None or _weight_named(im, src):
            arrays = {"weight": (weight, src, "" if pre_t else "transposed")}
            out_node = node
            if bias is not None:
                value, bsrc, i_add, how = bias
                arrays["bias"] = (value, bsrc, how)
                im.done.add(i_add)
                out_node = im.graph.node[i_add]
            ref = im.add_layer(node, "Linear", {"in_features": int(n_in),
                                                "out_features": int(n_out),
                                                "bias": bias is not None}, arrays, [a.ref])
            im.env[out_node.output[0]] = _T(ref, im.shapes.get(out_node.output[0]))
            return
    im.bind(node, 0, im.emit("matmul", [im.tensor(a, node), im.tensor(b, node)],
                             name=im.out_name(node)))


@_handles("Gemm")
def _gemm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    trans_a, trans_b = int(at.get("transA", 0)), int(at.get("transB", 0))
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    if c is not None and beta == 0.0:
        c = None
    if isinstance(c, _C) and not np.any(c.value):
        c = None
    x = im.tensor(a, node)
    if trans_a:
        x = im.emit("transpose", [x], {"dim0": 0, "dim1": 1})
    if isinstance(b, _P) and im.inits[b.init].ndim == 2:
        stored = im.inits[b.init]
        weight = stored if trans_b else stored.T
        notes = [] if trans_b else ["transposed"]
        if alpha != 1.0:
            weight = weight * np.asarray(alpha, dtype=weight.dtype)
            notes.append(f"scaled by alpha={_f32(alpha)}")
        n_out, n_in = weight.shape
        arrays = {"weight": (weight, b, ", ".join(notes))}
        extra = None
        if isinstance(c, _P) and im.inits[c.init].size == n_out \
                and im.inits[c.init].ndim <= 2 and im.inits[c.init].shape[-1:] == (n_out,):
            bias = im.inits[c.init].reshape(n_out)
            note = [] if im.inits[c.init].ndim == 1 else ["reshaped"]
            if beta != 1.0:
                bias = bias * np.asarray(beta, dtype=bias.dtype)
                note.append(f"scaled by beta={_f32(beta)}")
            arrays["bias"] = (bias, c, ", ".join(note))
        elif c is not None:
            extra = c
        ref = im.add_layer(node, "Linear", {"in_features": int(n_in), "out_features": int(n_out),
                                            "bias": "bias" in arrays}, arrays, [x])
        if extra is not None:
            cc = im.operand(extra, node, a)
            if beta != 1.0:
                cc = im.emit("mul", [cc, _f32(beta)]) if isinstance(cc, str) else cc * beta
            ref = im.emit("add", [ref, cc], name=im.out_name(node))
        im.bind(node, 0, ref)
        return
    y = im.tensor(b, node)
    if trans_b:
        y = im.emit("transpose", [y], {"dim0": 0, "dim1": 1})
    out = im.emit("matmul", [x, y])
    if alpha != 1.0:
        out = im.emit("mul", [out, _f32(alpha)])
    if c is not None:
        cc = im.operand(c, node, a)
        if beta != 1.0:
            cc = im.emit("mul", [cc, _f32(beta)]) if isinstance(cc, str) else cc * beta
        out = im.emit("add", [out, cc])
    im.bind(node, 0, out)


@_handles("Einsum")
def _einsum(im: _Importer, node: Any, ins: list) -> None:
    """Bilinear as our exporter writes it: Einsum('...i,oij,...j->...o') (+ Add bias)."""
    eq = im.attrs(node).get("equation", "").replace(" ", "")
    m = re.fullmatch(r"\.\.\.(\w),(\w)(\w)(\w),\.\.\.(\w)->\.\.\.(\w)", eq)
    if m and len(ins) == 3 and isinstance(ins[1], _P):
        i1, o, i2, j2, j1, o2 = m.groups()
        if i1 == i2 and j1 == j2 and o == o2 and len({i1, j1, o}) == 3:
            weight = im.inits[ins[1].init]
            n_out, n1, n2 = weight.shape
            bias = _bias_of(im, node, node.output[0], n_out, None)
            arrays = {"weight": (weight, ins[1], "")}
            out_node = node
            if bias is not None:
                value, bsrc, i_add, how = bias
                arrays["bias"] = (value, bsrc, how)
                im.done.add(i_add)
                out_node = im.graph.node[i_add]
            ref = im.add_layer(node, "Bilinear", {
                "in1_features": int(n1), "in2_features": int(n2), "out_features": int(n_out),
                "bias": bias is not None}, arrays,
                [im.tensor(ins[0], node), im.tensor(ins[2], node)])
            im.env[out_node.output[0]] = _T(ref, im.shapes.get(out_node.output[0]))
            return
    raise im.unsupported(node, f"equation {eq!r}; only the Bilinear form "
                         "'...i,oij,...j->...o' is recognised")


# ---------------------------------------------------------------- convolutions
def _conv_geometry(im: _Importer, node: Any, x: Any, kernel: Sequence[int],
                   transpose: bool = False) -> dict[str, Any]:
    at = im.attrs(node)
    n = len(kernel)
    strides = [int(s) for s in at.get("strides", [1] * n)]
    dil = [int(d) for d in at.get("dilations", [1] * n)]
    pads = [int(p) for p in at.get("pads", [0] * (2 * n))]
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER") and not transpose:
        shape = im.shape(x)
        spatial = None if shape is None else shape[-n:]
        if spatial is None or any(d is None for d in spatial):
            if all(s == 1 for s in strides) and auto == "SAME_UPPER":
                return {"strides": strides, "dil": dil, "same": True, "n": n,
                        "begins": [0] * n, "ends": [0] * n}
            raise im.error(node, f"auto_pad={auto} needs static input sizes")
        pads_b, pads_e = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dil):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        pads = pads_b + pads_e
    elif auto == "VALID":
        pads = [0] * (2 * n)
    return {"strides": strides, "dil": dil, "same": False, "n": n,
            "begins": pads[:n], "ends": pads[n:]}


def _layer_source(im: _Importer, node: Any, v: Any, what: str) -> tuple[np.ndarray, Any]:
    a = im.array(v)
    if a is None:
        raise im.error(node, f"the {what} is computed from the network inputs; only "
                       "initializer (or constant) weights are supported")
    return a, v


@_handles("Conv")
def _conv(im: _Importer, node: Any, ins: list) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    weight, wsrc = _layer_source(im, node, w, "weight")
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise im.error(node, f"{n}-D convolution is not supported (1-D to 3-D are)")
    kernel = [int(k) for k in weight.shape[2:]]
    g = _conv_geometry(im, node, x, kernel)
    group = int(im.attrs(node).get("group", 1))
    ref = im.tensor(x, node)
    sym = [min(b_, e_) for b_, e_ in zip(g["begins"], g["ends"])]
    extra_b = [b_ - s for b_, s in zip(g["begins"], sym)]
    extra_e = [e_ - s for e_, s in zip(g["ends"], sym)]
    if any(extra_b) or any(extra_e):  # zero-pad the asymmetric rest explicitly
        ref = im.pad(node, ref, im.shape(x), [0, 0] + extra_b, [0, 0] + extra_e)
    args: dict[str, Any] = {
        "in_channels": int(weight.shape[1] * group), "out_channels": int(weight.shape[0]),
        "kernel_size": kernel, "stride": g["strides"],
        "padding": "same" if g["same"] else sym, "dilation": g["dil"], "groups": group,
        "bias": b is not None,
    }
    arrays = {"weight": (weight, wsrc, "")}
    if b is not None:
        arrays["bias"] = (*_layer_source(im, node, b, "bias"), "")
    im.bind(node, 0, im.add_layer(node, f"Conv{n}d", args, arrays, [ref]))


@_handles("ConvTranspose")
def _conv_transpose(im: _Importer, node: Any, ins: list) -> None:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    weight, wsrc = _layer_source(im, node, w, "weight")
    n = weight.ndim - 2
    if n not in (1, 2, 3):
        raise im.error(node, f"{n}-D transposed convolution is not supported")
    at = im.attrs(node)
    kernel = [int(k) for k in weight.shape[2:]]
    group = int(at.get("group", 1))
    g = _conv_geometry(im, node, x, kernel, transpose=True)
    out_pad = [int(p) for p in at.get("output_padding", [0] * n)]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = im.static_shape(x)
        if shape is None:
            raise im.error(node, "output_shape/auto_pad needs static input sizes")
        spatial = shape[-n:]
        target = [int(t) for t in at["output_shape"]][-n:] if "output_shape" in at else \
            [s * st for s, st in zip(spatial, g["strides"])]
        begins, ends = [], []
        for i in range(n):
            full = g["strides"][i] * (spatial[i] - 1) + out_pad[i] + \
                (kernel[i] - 1) * g["dil"][i] + 1
            total = full - target[i]
            if total < 0:
                out_pad[i] += -total
                total = 0
            if auto == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                ends.append(total // 2)
                begins.append(total - total // 2)
        g["begins"], g["ends"] = begins, ends
    for i in range(n):
        if out_pad[i] and out_pad[i] >= max(g["strides"][i], g["dil"][i]):
            raise im.error(node, f"output_padding {out_pad[i]} must be smaller than the stride "
                           "or the dilation (a PyTorch restriction)")
    sym = [min(b_, e_) for b_, e_ in zip(g["begins"], g["ends"])]
    args: dict[str, Any] = {
        "in_channels": int(weight.shape[0]), "out_channels": int(weight.shape[1] * group),
        "kernel_size": kernel, "stride": g["strides"], "padding": sym,
        "output_padding": out_pad, "groups": group, "bias": b is not None,
        "dilation": g["dil"],
    }
    arrays = {"weight": (weight, wsrc, "")}
    if b is not None:
        arrays["bias"] = (*_layer_source(im, node, b, "bias"), "")
    ref = im.add_layer(node, f"ConvTranspose{n}d", args, arrays, [im.tensor(x, node)])
    # Asymmetric pads: crop the rest from the output.
    for i in range(n):
        cb, ce = g["begins"][i] - sym[i], g["ends"][i] - sym[i]
        if cb or ce:
            ref = im.slice_axis(ref, node, 2 + i, cb or None, -ce if ce else None, n + 2)
    im.bind(node, 0, ref)


# ---------------------------------------------------------------- normalisation
def _affine(im: _Importer, node: Any, scale: Any, bias: Any, n: int
            ) -> tuple[bool, dict[str, tuple[np.ndarray, Any, str]]]:
    """(affine, arrays) for norm layers: constant ones/zeros mean not affine."""
    s = im.array(scale)
    bb = im.array(bias) if bias is not None else np.zeros(n, dtype=np.float32)
    if s is None or bb is None:
        raise im.error(node, "scale and bias must be initializers or constants")
    if isinstance(scale, _C) and (bias is None or isinstance(bias, _C)) \
            and np.all(s == 1) and not np.any(bb):
        return False, {}
    arrays = {"weight": (s.reshape(n), scale, ""),
              "bias": (bb.reshape(n), bias, "" if bias is not None else "zeros (absent)")}
    return True, arrays


@_handles("BatchNormalization")
def _batchnorm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    for k in range(1, len(node.output)):
        if im.used(node, k):
            raise im.error(node, "the running-statistics outputs of a training-mode "
                           "BatchNormalization are not supported")
    if im.opset < 9 and at.get("spatial", 1) == 0:
        raise im.error(node, "spatial=0 (per-activation statistics) is not supported")
    x = ins[0]
    rank = im.rank(x)
    if rank not in (2, 3, 4, 5):
        raise im.error(node, f"BatchNormalization needs an input of rank 2 to 5 (got "
                       f"{'unknown' if rank is None else rank})")
    mean = im.array(ins[3])
    var = im.array(ins[4])
    if mean is None or var is None or im.array(ins[1]) is None or im.array(ins[2]) is None:
        return _batchnorm_generic(im, node, ins, rank, _f32(at.get("epsilon", 1e-5)))
    c = int(mean.size)
    affine, arrays = _affine(im, node, ins[1], ins[2], c)
    momentum = at.get("momentum", 0.9)
    args = {"num_features": c, "eps": _f32(at.get("epsilon", 1e-5)),
            "momentum": _f32(1.0 - _f32(momentum)), "affine": affine,
            "track_running_stats": True}
    arrays["running_mean"] = (mean.reshape(c), ins[3], "")
    arrays["running_var"] = (var.reshape(c), ins[4], "")
    if at.get("training_mode", 0):
        im.warnings.append(f"{im._where(node)}: training_mode=1 BatchNormalization imported "
                           "as a BatchNorm layer; it uses batch statistics only when the "
                           "network runs in training mode")
    n = 1 if rank <= 3 else rank - 2
    im.bind(node, 0, im.add_layer(node, f"BatchNorm{n}d", args, arrays, [im.tensor(x, node)]))


def _batchnorm_generic(im: _Importer, node: Any, ins: list, rank: int, eps: float) -> None:
    """Inference BatchNorm of computed statistics:
    (x - mean) * scale / sqrt(var + eps) + bias, per channel (axis 1)."""
    x, scale, bias, mean, var = (im.tensor(v, node) for v in ins[:5])

    def per_channel(ref: str, v: Any) -> str:
        shape = im.static_shape(v)
        if shape is None or len(shape) != 1:
            raise im.error(node, "statistics of unknown shape")
        return im.emit("reshape", [ref], {"shape": [int(shape[0])] + [1] * (rank - 2)}) \
            if rank > 2 else ref

    m, s, b = per_channel(mean, ins[3]), per_channel(scale, ins[1]), per_channel(bias, ins[2])
    v = per_channel(var, ins[4])
    inv = im.emit("div", [s, im.emit("sqrt", [im.emit("add", [v, eps])])])
    y = im.emit("mul", [im.emit("sub", [x, m]), inv])
    im.bind(node, 0, im.emit("add", [y, b], name=im.out_name(node)))


@_handles("InstanceNormalization")
def _instancenorm(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank not in (3, 4, 5):
        raise im.error(node, "InstanceNormalization needs an input of rank 3 to 5")
    scale = im.array(ins[1])
    if scale is None:
        raise im.error(node, "scale must be an initializer or constant")
    c = int(scale.size)
    affine, arrays = _affine(im, node, ins[1], ins[2], c)
    args = {"num_features": c, "eps": _f32(im.attrs(node).get("epsilon", 1e-5)),
            "affine": affine, "track_running_stats": False}
    im.bind(node, 0, im.add_layer(node, f"InstanceNorm{rank - 2}d", args, arrays,
                                  [im.tensor(x, node)]))


@_handles("LayerNormalization")
def _layernorm(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    for k in range(1, len(node.output)):
        if im.used(node, k):
            raise im.error(node, "the Mean/InvStdDev outputs are not supported")
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    shape = im.shape(x)
    axis = int(at.get("axis", -1))
    eps = _f32(at.get("epsilon", 1e-5))
    s = im.array(scale)
    if shape is None or s is None:
        raise im.error(node, "LayerNormalization needs the input rank and a constant scale")
    axis = im.norm_axis(node, axis, len(shape))
    normalized = shape[axis:]
    ref = im.tensor(x, node)
    if all(d is not None for d in normalized):
        normalized = [int(d) for d in normalized]
        size = math.prod(normalized)
        b = im.array(bias) if bias is not None else None
        if s.size == size and (b is None or b.size == size):
            args: dict[str, Any] = {"normalized_shape": normalized, "eps": eps}
            arrays: dict[str, tuple[np.ndarray, Any, str]] = {}
            ones = isinstance(scale, _C) and np.all(s == 1)
            zero_bias = b is None or (isinstance(bias, _C) and not np.any(b))
            if ones and zero_bias:
                args["elementwise_affine"] = False
            else:
                arrays["weight"] = (s.reshape(normalized), scale,
                                    "" if s.shape == tuple(normalized) else "reshaped")
                if not zero_bias:
                    arrays["bias"] = (b.reshape(normalized), bias,
                                      "" if b.shape == tuple(normalized) else "reshaped")
                else:
                    args["bias"] = False
            im.bind(node, 0, im.add_layer(node, "LayerNorm", args, arrays, [ref]))
            return
    # Generic: (x - mean) / sqrt(var + eps) * scale + bias over the trailing axes.
    dims = list(range(axis - len(shape), 0))
    mu = im.emit("mean", [ref], {"dim": dims, "keepdim": True})
    d = im.emit("sub", [ref, mu])
    var = im.emit("mean", [im.emit("mul", [d, d])], {"dim": dims, "keepdim": True})
    y = im.emit("div", [d, im.emit("sqrt", [im.emit("add", [var, eps])])])
    y = im.emit("mul", [y, im.operand(scale, node, x)])
    if bias is not None:
        y = im.emit("add", [y, im.operand(bias, node, x)])
    im.bind(node, 0, y)


@_handles("Dropout")
def _dropout(im: _Importer, node: Any, ins: list) -> None:
    if im.used(node, 1):
        raise im.error(node, "the mask output of Dropout is not supported")
    if im.opset < 12:
        p = float(im.attrs(node).get("ratio", 0.5))
    else:
        ratio = im.static(node, 1, "ratio", np.array(0.5))
        p = float(np.asarray(ratio).reshape(()))
    layer_type = im._meta(node).get(META_LAYER_TYPE, "Dropout")
    if layer_type not in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        layer_type = "Dropout"
    ref = im.add_layer(node, layer_type, {"p": _f32(p)}, {}, [im.tensor(ins[0], node)])
    im.bind(node, 0, ref)


# ---------------------------------------------------------------- pooling
def _pool_args(im: _Importer, node: Any, x: Any) -> tuple[dict, list[int], list[int], int]:
    at = im.attrs(node)
    kernel = [int(k) for k in at["kernel_shape"]]
    n = len(kernel)
    g = _conv_geometry(im, node, x, kernel)
    if g["same"]:
        raise im.error(node, "auto_pad SAME needs static input sizes")
    return {"kernel_size": kernel, "stride": g["strides"], "dilation": g["dil"],
            "ceil_mode": bool(at.get("ceil_mode", 0))}, g["begins"], g["ends"], n


def _pool_padding(kernel: Sequence[int], dil: Sequence[int], begins: Sequence[int],
                  ends: Sequence[int]) -> list[int] | None:
    """Symmetric PyTorch padding if allowed (at most half the effective kernel)."""
    if list(begins) != list(ends):
        return None
    for p, k, d in zip(begins, kernel, dil):
        if p > ((k - 1) * d + 1) // 2:
            return None
    return list(begins)


@_handles("MaxPool")
def _maxpool(im: _Importer, node: Any, ins: list) -> None:
    if im.used(node, 1):
        raise im.error(node, "the Indices output of MaxPool is not supported")
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    ref = im.tensor(x, node)
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    if padding is None:
        ref = im.pad(node, ref, im.shape(x), [0, 0] + begins, [0, 0] + ends,
                     value=-np.inf)
        padding = [0] * n
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "dilation": g["dilation"], "ceil_mode": g["ceil_mode"]}
    im.bind(node, 0, im.add_layer(node, f"MaxPool{n}d", args, {}, [ref]))


@_handles("AveragePool")
def _avgpool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    if any(d != 1 for d in g["dilation"]):
        raise im.error(node, "dilated average pooling is not supported (PyTorch has none)")
    include = bool(im.attrs(node).get("count_include_pad", 0))
    ref = im.tensor(x, node)
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    if padding is None:
        if not include:
            raise im.error(node, "asymmetric padding with count_include_pad=0 is not "
                           "supported")
        ref = im.pad(node, ref, im.shape(x), [0, 0] + begins, [0, 0] + ends)
        padding = [0] * n
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "ceil_mode": g["ceil_mode"], "count_include_pad": include}
    im.bind(node, 0, im.add_layer(node, f"AvgPool{n}d", args, {}, [ref]))


@_handles("LpPool")
def _lppool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    g, begins, ends, n = _pool_args(im, node, x)
    p = float(im.attrs(node).get("p", 2))
    if any(d != 1 for d in g["dilation"]) or g["ceil_mode"]:
        raise im.error(node, "dilated or ceil_mode LpPool is not supported")
    ref = im.tensor(x, node)
    if not any(begins) and not any(ends) and p.is_integer() and int(p) % 2 == 0:
        args = {"norm_type": p, "kernel_size": g["kernel_size"], "stride": g["stride"]}
        im.bind(node, 0, im.add_layer(node, f"LPPool{n}d", args, {}, [ref]))
        return
    # (sum over the window of |x|^p)^(1/p) = (avgpool(|x|^p, zero padding) * k)^(1/p)
    powered = im.emit("pow", [im.emit("abs", [ref]), p])
    padding = _pool_padding(g["kernel_size"], g["dilation"], begins, ends)
    if padding is None:
        powered = im.pad(node, powered, im.shape(x), [0, 0] + begins, [0, 0] + ends)
        padding = [0] * n
    args = {"kernel_size": g["kernel_size"], "stride": g["stride"], "padding": padding,
            "count_include_pad": True}
    pooled = im.add_layer(node, f"AvgPool{n}d", args, {}, [powered])
    total = im.emit("mul", [pooled, float(math.prod(g["kernel_size"]))])
    im.bind(node, 0, im.emit("pow", [total, 1.0 / p], name=im.out_name(node)))


@_handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank not in (3, 4, 5):
        raise im.error(node, f"{node.op_type} needs an input of rank 3 to 5")
    kind = "Avg" if node.op_type == "GlobalAveragePool" else "Max"
    args: dict[str, Any] = {"output_size": 1}
    im.bind(node, 0, im.add_layer(node, f"Adaptive{kind}Pool{rank - 2}d", args, {},
                                  [im.tensor(x, node)]))


@_handles("GlobalLpPool")
def _global_lp(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    if rank is None or rank < 3:
        raise im.error(node, "GlobalLpPool needs an input of known rank >= 3")
    p = float(im.attrs(node).get("p", 2))
    ref = im.emit("pow", [im.emit("abs", [im.tensor(x, node)]), p])
    s = im.emit("sum", [ref], {"dim": list(range(2, rank)), "keepdim": True})
    im.bind(node, 0, im.emit("pow", [s, 1.0 / p], name=im.out_name(node)))


# ---------------------------------------------------------------- shapes
def _flatten_range(in_shape: Sequence[int | None], out_shape: Sequence[int]
                   ) -> tuple[int, int] | None:
    """(start, end) if ``out_shape`` merges in_shape[start:end+1] and keeps the rest."""
    r, ro = len(in_shape), len(out_shape)
    if ro >= r or ro == 0:
        return None
    merged = r - ro + 1
    for s in range(0, r - merged + 1):
        e = s + merged - 1
        head, tail = in_shape[:s], in_shape[e + 1:]
        if list(out_shape[:s]) != list(head) or list(out_shape[s + 1:]) != list(tail):
            continue
        block = in_shape[s:e + 1]
        if all(d is not None for d in block) and math.prod(block) == out_shape[s]:
            return s, e
    return None


def _flatten_layer(im: _Importer, node: Any, ref: str, start: int, end: int, rank: int
                   ) -> str:
    args = {"start_dim": start, "end_dim": -1 if end == rank - 1 else end}
    return im.add_layer(node, "Flatten", args, {}, [ref])


@_handles("Flatten")
def _flatten(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    axis = int(im.attrs(node).get("axis", 1))
    ref = im.tensor(x, node)
    if rank is not None:
        axis = im.norm_axis(node, axis, rank)
    if axis == 1 and rank is not None and rank >= 2:
        im.bind(node, 0, _flatten_layer(im, node, ref, 1, rank - 1, rank))
        return
    if axis == 0:
        im.bind(node, 0, im.emit("reshape", [ref], {"shape": [1, -1]}, name=im.out_name(node)))
        return
    if rank is None:
        raise im.error(node, "Flatten needs the input rank")
    if axis == rank:
        im.bind(node, 0, im.emit("reshape", [ref], {"shape": [-1, 1]}, name=im.out_name(node)))
        return
    inner = im.emit("flatten", [ref], {"start_dim": axis, "end_dim": -1})
    im.bind(node, 0, im.emit("flatten", [inner], {"start_dim": 0, "end_dim": axis - 1},
                             name=im.out_name(node)))


def _prelu_slope(im: _Importer, node: Any, x: Any, shape: Sequence[int]) -> bool:
    """Keep ``Reshape``/``Unsqueeze`` of a parameter that only feeds a PRelu slope lazy
    (exporters reshape PyTorch's (C,) weight to (C, 1, ...)), so that PRelu can lift it to
    a PReLU layer with the parameter's name and layout."""
    if not isinstance(x, _P):
        return False
    user = im.sole_consumer(node.output[0])
    if user is None or user[1].op_type != "PRelu" or list(user[1].input[1:2]) != \
            [node.output[0]]:
        return False
    im.env[node.output[0]] = _Lazy("reshape", (x, tuple(int(d) for d in shape)), node)
    return True


@_handles("Reshape")
def _reshape(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    if im.opset < 5:  # pragma: no cover - below MIN_OPSET
        raise im.error(node, "Reshape with a shape attribute")
    target = [int(t) for t in im.static(node, 1, "shape")]
    allowzero = int(im.attrs(node).get("allowzero", 0))
    if isinstance(x, _P):
        value = im.inits[x.init]
        full = [value.shape[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
        try:
            new_shape = np.empty(value.shape, dtype=np.int8).reshape(full).shape
        except ValueError:
            new_shape = None
        if new_shape is not None and _prelu_slope(im, node, x, new_shape):
            return
    in_shape = im.shape(x)
    ref = im.tensor(x, node)
    # Resolve 0 (copy) entries.
    if not allowzero and 0 in target:
        if in_shape is None:
            raise im.error(node, "Reshape with 0 entries needs the input rank")
        for i, t in enumerate(target):
            if t == 0:
                if in_shape[i] is None:
                    if target == [0, -1] and len(in_shape) >= 2:
                        im.bind(node, 0, _flatten_layer(im, node, ref, 1, len(in_shape) - 1,
                                                        len(in_shape)))
                        return
                    raise im.error(node, "Reshape copies a dynamic dimension")
                target[i] = int(in_shape[i])
    out = im.static_shape(_T("", im.shapes.get(node.output[0])))
    if out is None and in_shape is not None and all(d is not None for d in in_shape) \
            and target.count(-1) <= 1:
        total = math.prod(in_shape)
        known = math.prod(t for t in target if t != -1)
        out = tuple(total // known if t == -1 else t for t in target) if known else None
    if in_shape is not None and out is not None:
        fr = _flatten_range(in_shape, out)
        if fr is not None:
            im.bind(node, 0, _flatten_layer(im, node, ref, fr[0], fr[1], len(in_shape)))
            return
    elif in_shape is not None and len(target) == 2 and target[0] == -1 and len(in_shape) >= 2:
        inner = in_shape[1:]
        if all(d is not None for d in inner) and math.prod(inner) == target[1]:
            im.bind(node, 0, _flatten_layer(im, node, ref, 1, len(in_shape) - 1,
                                            len(in_shape)))
            return
    im.bind(node, 0, im.emit("reshape", [ref], {"shape": list(out or target)},
                             name=im.out_name(node)), out)


def _axes(im: _Importer, node: Any, ins: list, index: int = 1) -> list[int] | None:
    at = im.attrs(node)
    if "axes" in at:
        return [int(a) for a in at["axes"]]
    if len(ins) > index and ins[index] is not None:
        return [int(a) for a in np.asarray(im.static(node, index, "axes")).reshape(-1)]
    return None


@_handles("Squeeze")
def _squeeze(im: _Importer, node: Any, ins: list) -> None:
    axes = _axes(im, node, ins)
    x = im.tensor(ins[0], node)
    kwargs = {} if axes is None else {"dim": axes if len(axes) != 1 else axes[0]}
    im.bind(node, 0, im.emit("squeeze", [x], kwargs, name=im.out_name(node)))


@_handles("Unsqueeze")
def _unsqueeze(im: _Importer, node: Any, ins: list) -> None:
    axes = _axes(im, node, ins)
    if not axes:
        raise im.error(node, "Unsqueeze without axes")
    if isinstance(ins[0], _P):
        value = im.inits[ins[0].init]
        out_rank = value.ndim + len(axes)
        shape = np.expand_dims(np.empty(value.shape, dtype=np.int8),
                               tuple(a + out_rank if a < 0 else a for a in axes)).shape
        if _prelu_slope(im, node, ins[0], shape):
            return
    rank = im.rank(ins[0])
    ref = im.tensor(ins[0], node)
    if len(axes) == 1:
        im.bind(node, 0, im.emit("unsqueeze", [ref], {"dim": axes[0]}, name=im.out_name(node)))
        return
    if rank is None:
        raise im.error(node, "Unsqueeze of several axes needs the input rank")
    out_rank = rank + len(axes)
    norm = sorted(a + out_rank if a < 0 else a for a in axes)
    for k, a in enumerate(norm):
        last = k == len(norm) - 1
        ref = im.emit("unsqueeze", [ref], {"dim": a}, name=im.out_name(node) if last else None)
    im.bind(node, 0, ref)


@_handles("Concat")
def _concat(im: _Importer, node: Any, ins: list) -> None:
    axis = int(im.attrs(node).get("axis", 1 if im.opset < 4 else 0))
    refs = [im.tensor(v, node, hint=f"{node.output[0]}_{i}") for i, v in enumerate(ins)
            if v is not None and not (im.shape(v) is not None and 0 in (im.shape(v) or ()))]
    if len(refs) == 1:
        im.alias(node, 0, _T(refs[0]))
        return
    im.bind(node, 0, im.emit("cat", [refs], {"dim": axis}, name=im.out_name(node)))


@_handles("Split")
def _split(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    axis = int(at.get("axis", 0))
    if "split" in at:
        sizes = [int(s) for s in at["split"]]
    elif len(ins) > 1 and ins[1] is not None:
        sizes = [int(s) for s in np.asarray(im.static(node, 1, "split")).reshape(-1)]
    else:
        size = None if shape is None else shape[axis]
        if size is None:
            raise im.error(node, "an equal Split needs the static size of the split axis")
        k = len(node.output)
        chunk = -(-int(size) // k) if "num_outputs" in at else int(size) // k
        sizes = [min(chunk, int(size) - i * chunk) for i in range(k)]
    ref = im.tensor(x, node)
    start = 0
    for i, s in enumerate(sizes):
        if i < len(node.output) and node.output[i]:
            r = im.slice_axis(ref, node, axis, start, start + s, rank)
            im.bind(node, i, r)
        start += s


@_handles("Slice")
def _slice(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    if im.opset < 10:
        at = im.attrs(node)
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in np.asarray(im.static(node, 1, "starts")).reshape(-1)]
        ends = [int(v) for v in np.asarray(im.static(node, 2, "ends")).reshape(-1)]
        axes_v = im.static(node, 3, "axes")
        axes = list(range(len(starts))) if axes_v is None else \
            [int(v) for v in np.asarray(axes_v).reshape(-1)]
        steps_v = im.static(node, 4, "steps")
        steps = [1] * len(starts) if steps_v is None else \
            [int(v) for v in np.asarray(steps_v).reshape(-1)]
    if any(s == 0 for s in steps):
        raise im.error(node, "slice steps must not be 0")
    if rank is not None:
        axes = [a + rank if a < 0 else a for a in axes]
    ref = im.tensor(x, node)
    if any(s < 0 for s in steps):
        # x[start:end:-k] on an axis of size n is flip(x)[n-1-start : n-1-end : k].
        flipped = []
        for i, (st, en, a, sp) in enumerate(zip(starts, ends, axes, steps)):
            if sp > 0:
                continue
            size = None if shape is None or a >= len(shape) else shape[a]
            starts[i], ends[i] = _flipped_bounds(im, node, int(st), int(en), size)
            steps[i] = -sp
            flipped.append(a)
        ref = im.emit("flip", [ref], {"dims": flipped})
    if any(a < 0 for a in axes) and any(a >= 0 for a in axes):
        raise im.error(node, "mixed negative and positive axes need the input rank")
    items: dict[int, dict] = {}
    for s, e, a, st in zip(starts, ends, axes, steps):
        size = None if shape is None else shape[a]
        s, e = int(s), int(e)
        start = None if s == 0 else s
        if s <= -_INT_MAX:
            start = None
        stop = None if (e >= _INT_MAX or (size is not None and e >= size)) else e
        if e <= -_INT_MAX:
            stop = 0
        items[a] = {"slice": [start, stop, None if st == 1 else st]}
    full = {"slice": [None, None, None]}
    if all(a >= 0 for a in axes):
        index = [items.get(i, full) for i in range(max(axes) + 1)]
    else:
        lo = min(axes)
        index = ["..."] + [items.get(i, full) for i in range(lo, 0)]
    if all(it == full for it in index if it != "..."):
        im.bind(node, 0, ref)  # a plain flip
        return
    im.bind(node, 0, im.emit("getitem", [ref], {"index": index}, name=im.out_name(node)))


def _flipped_bounds(im: _Importer, node: Any, start: int, end: int, size: int | None
                    ) -> tuple[int, int]:
    """ONNX Slice bounds of a negative step on an axis of ``size`` as bounds on the flipped
    axis (start clamped to [0, n-1], end to [-1, n-1]); negative bounds need no size."""
    big = _INT_MAX // 2
    if size is not None:
        st = min(max(start + size if start < 0 else start, 0), size - 1)
        en = min(max(end + size if end < 0 else end, -1), size - 1)
        return size - 1 - st, size - 1 - en
    if start >= big:  # from the last element
        fst = 0
    elif -big < start < 0:
        fst = -1 - start
    else:
        raise im.error(node, f"a negative-step slice from {start} needs the static axis size")
    if end <= -big:  # to the first element
        fen = _INT_MAX
    elif end < 0:
        fen = -1 - end
    else:
        raise im.error(node, f"a negative-step slice to {end} needs the static axis size")
    return fst, fen


@_handles("Gather")
def _gather(im: _Importer, node: Any, ins: list) -> None:
    data = ins[0]
    idx = im.array(ins[1])
    if idx is None:
        raise im.unsupported(node, "indices computed from the network inputs (an embedding "
                             "lookup) need integer network inputs, which PEtab SciML "
                             "networks do not have")
    shape = im.shape(data)
    rank = None if shape is None else len(shape)
    axis = int(im.attrs(node).get("axis", 0))
    if rank is not None:
        axis = im.norm_axis(node, axis, rank)
    size = None if shape is None else shape[axis]
    flat = np.asarray(idx).reshape(-1).astype(np.int64)
    if np.any(flat < 0):
        if size is None:
            raise im.error(node, "negative indices need the static axis size")
        flat = np.where(flat < 0, flat + size, flat)
    ref = im.tensor(data, node)
    if np.asarray(idx).ndim == 0:
        im.bind(node, 0, im.emit("getitem", [ref], {"index": im.index_on(
            node, axis, int(flat[0]), rank)}, name=im.out_name(node)))
        return
    out = _take(im, node, ref, axis, flat, rank)
    if np.asarray(idx).ndim > 1:
        if shape is None or any(d is None for d in shape):
            raise im.error(node, "multi-dimensional indices need a static data shape")
        new = list(shape[:axis]) + list(np.asarray(idx).shape) + list(shape[axis + 1:])
        out = im.emit("reshape", [out], {"shape": [int(d) for d in new]})
    im.bind(node, 0, out)


def _take(im: _Importer, node: Any, ref: str, axis: int, indices: np.ndarray,
          rank: int | None) -> str:
    """``ref`` indexed along ``axis`` by constant non-negative indices (runs of
    consecutive indices become one slice; the pieces are concatenated)."""
    runs: list[list[int]] = []
    for k in (int(i) for i in indices):
        if runs and k == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([k, k + 1])
    pieces = [im.slice_axis(ref, node, axis, a, b, rank) for a, b in runs]
    return pieces[0] if len(pieces) == 1 else im.emit("cat", [pieces], {"dim": axis})


@_handles("GatherND")
def _gather_nd(im: _Importer, node: Any, ins: list) -> None:
    """GatherND with constant indices: linearise the indexed leading axes, take, reshape."""
    idx = im.array(ins[1])
    if idx is None:
        raise im.unsupported(node, "indices computed from the network inputs")
    if int(im.attrs(node).get("batch_dims", 0)) != 0:
        raise im.error(node, "batch_dims != 0 is not supported")
    shape = im.static_shape(ins[0])
    idx = np.asarray(idx).astype(np.int64)
    k = idx.shape[-1]
    if shape is None or k > len(shape):
        raise im.error(node, "GatherND needs the data's static shape")
    lead, rest = shape[:k], list(shape[k:])
    idx = np.where(idx < 0, idx + np.array(lead), idx)
    flat = np.ravel_multi_index(tuple(np.moveaxis(idx.reshape(-1, k), -1, 0)), lead)
    ref = im.tensor(ins[0], node)
    if k > 1:
        ref = im.emit("reshape", [ref], {"shape": [math.prod(lead)] + rest})
    out = _take(im, node, ref, 0, flat, 1 + len(rest))
    target = list(idx.shape[:-1]) + rest
    if target != [len(flat)] + rest:
        out = im.emit("reshape", [out], {"shape": [int(d) for d in target]},
                      name=im.out_name(node))
    im.bind(node, 0, out, target)


def _tile(im: _Importer, node: Any, ref: str, repeats: Sequence[int]) -> str:
    for axis, r in enumerate(repeats):
        if r == 1:
            continue
        if r < 1:
            raise im.error(node, f"repeat count {r} is not supported")
        ref = im.emit("cat", [[ref] * int(r)], {"dim": axis})
    return ref


@_handles("Tile")
def _tile_op(im: _Importer, node: Any, ins: list) -> None:
    repeats = [int(r) for r in np.asarray(im.static(node, 1, "repeats")).reshape(-1)]
    out = _tile(im, node, im.tensor(ins[0], node), repeats)
    if out == im.tensor(ins[0], node):
        im.alias(node, 0, ins[0])
    else:
        shape = im.static_shape(ins[0])
        im.bind(node, 0, out, None if shape is None else
                [d * r for d, r in zip(shape, repeats)])


@_handles("Expand")
def _expand(im: _Importer, node: Any, ins: list) -> None:
    target = [int(t) for t in np.asarray(im.static(node, 1, "shape")).reshape(-1)]
    shape = im.static_shape(ins[0])
    if shape is None:
        raise im.error(node, "Expand needs the input's static shape")
    rank = max(len(shape), len(target))
    src = (1,) * (rank - len(shape)) + tuple(shape)
    tgt = [1] * (rank - len(target)) + target
    ref = im.tensor(ins[0], node)
    for _ in range(rank - len(shape)):
        ref = im.emit("unsqueeze", [ref], {"dim": 0})
    repeats = [t if s == 1 else 1 for s, t in zip(src, tgt)]
    out = _tile(im, node, ref, repeats)
    im.bind(node, 0, out, [max(s, t) for s, t in zip(src, tgt)])


@_handles("Pad")
def _pad_op(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    mode = at.get("mode", "constant")
    if im.opset < 11:
        pads = [int(p) for p in at.get("pads", at.get("paddings", []))]
        value = float(at.get("value", 0.0))
    else:
        pads = [int(p) for p in np.asarray(im.static(node, 1, "pads")).reshape(-1)]
        cv = im.static(node, 2, "constant_value")
        value = 0.0 if cv is None or np.asarray(cv).size == 0 else \
            float(np.asarray(cv).reshape(-1)[0])
    axes_v = im.static(node, 3, "axes") if im.opset >= 18 else None
    if rank is None:
        raise im.error(node, "Pad needs the input rank")
    begins, ends = [0] * rank, [0] * rank
    axes = list(range(rank)) if axes_v is None else \
        [int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(axes_v).reshape(-1)]
    k = len(axes)
    for i, a in enumerate(axes):
        begins[a], ends[a] = pads[i], pads[k + i]
    ref = im.pad(node, im.tensor(x, node), shape, begins, ends, mode, value)
    im.bind(node, 0, ref)


_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceSumSquare": "sum",
           "ReduceL1": "sum", "ReduceL2": "sum", "ReduceLogSum": "sum",
           "ReduceLogSumExp": "sum"}


@_handles(*_REDUCE)
def _reduce(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    axes = _axes(im, node, ins)
    x = ins[0]
    rank = im.rank(x)
    ref = im.tensor(x, node)
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            im.alias(node, 0, x)
            return
        if keep:
            if rank is None:
                raise im.error(node, "reducing all axes with keepdims needs the input rank")
            axes = list(range(rank))
    op = node.op_type
    if op == "ReduceSumSquare" or op == "ReduceL2":
        ref = im.emit("mul", [ref, ref])
    elif op == "ReduceL1":
        ref = im.emit("abs", [ref])
    elif op == "ReduceLogSumExp":
        ref = im.emit("exp", [ref])
    kwargs: dict[str, Any] = {"keepdim": keep}
    if axes:
        kwargs["dim"] = axes
    last = op in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1")
    out = im.emit(_REDUCE[op], [ref], kwargs, name=im.out_name(node) if last else None)
    if op == "ReduceL2":
        out = im.emit("sqrt", [out], name=im.out_name(node))
    elif op in ("ReduceLogSum", "ReduceLogSumExp"):
        out = im.emit("log", [out], name=im.out_name(node))
    im.bind(node, 0, out)


@_handles("ReduceMax", "ReduceMin")
def _reduce_max(im: _Importer, node: Any, ins: list) -> None:
    """ReduceMax/ReduceMin as amax/amin (no axes: over everything)."""
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    x = ins[0]
    axes = _axes(im, node, ins)
    if not axes and at.get("noop_with_empty_axes", 0):
        im.alias(node, 0, x)
        return
    kwargs: dict[str, Any] = {"keepdim": keep}
    if axes:
        kwargs["dim"] = axes
    fn = "amax" if node.op_type == "ReduceMax" else "amin"
    im.bind(node, 0, im.emit(fn, [im.tensor(x, node)], kwargs, name=im.out_name(node)))


@_handles("ReduceProd")
def _reduce_prod(im: _Importer, node: Any, ins: list) -> None:
    """ReduceProd as prod, one axis at a time (torch.prod reduces one dimension)."""
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    x = ins[0]
    axes = _axes(im, node, ins)
    ref = im.tensor(x, node)
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            im.alias(node, 0, x)
            return
        im.bind(node, 0, im.emit("prod", [ref], {"keepdim": keep}, name=im.out_name(node)))
        return
    if len(axes) == 1:
        im.bind(node, 0, im.emit("prod", [ref], {"dim": axes[0], "keepdim": keep},
                                 name=im.out_name(node)))
        return
    for a in axes:
        ref = im.emit("prod", [ref], {"dim": a, "keepdim": True})
    if not keep:
        ref = im.emit("squeeze", [ref], {"dim": axes}, name=im.out_name(node))
    im.bind(node, 0, ref)


@_handles("PRelu")
def _prelu(im: _Importer, node: Any, ins: list) -> None:
    """A PReLU layer when the slope is an initializer (or constant) of one value or one per
    channel (axis 1, PyTorch's layout); else where(x > 0, x, slope * x)."""
    x, slope = ins
    rank = im.rank(x)
    value = im.array(slope)
    if value is not None and value.dtype.kind == "f":
        c = int(value.size)
        ok = c == 1
        if not ok and rank is not None and rank >= 2:
            if im.opset < 7 and value.ndim == 1:  # legacy: a 1-d slope is per channel
                ok = True
            elif value.ndim <= rank:
                ok = (1,) * (rank - value.ndim) + tuple(value.shape) == \
                    (1, c) + (1,) * (rank - 2)
            dim = (im.shape(x) or (None, None))[1]
            ok = ok and (dim is None or dim == c)
        if ok:
            src = slope.args[0] if isinstance(slope, _Lazy) else slope
            how = "" if value.ndim == 1 else "reshaped"
            ref = im.add_layer(node, "PReLU", {"num_parameters": c},
                               {"weight": (value.reshape(c), src, how)},
                               [im.tensor(x, node)], out_hint=im.out_name(node))
            im.bind(node, 0, ref)
            return
    ref = im.tensor(x, node)
    s = im.operand(slope, node, x)
    s_shape = im.shape(slope)
    if isinstance(s, str) and im.opset < 7 and s_shape is not None and len(s_shape) == 1 \
            and s_shape[0] != 1:
        if rank is None:
            raise im.error(node, "channel-wise PRelu needs the input rank")
        s = im.emit("reshape", [s], {"shape": [int(s_shape[0])] + [1] * (rank - 2)})
    im.bind(node, 0, im.emit("where", [im.emit("gt", [ref, 0.0]), ref,
                                       im.emit("mul", [ref, s])], name=im.out_name(node)))


@_handles("DepthToSpace", "SpaceToDepth")
def _depth_space(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    bs = int(at["blocksize"])
    shape = im.static_shape(ins[0])
    if shape is None or len(shape) != 4:
        raise im.error(node, f"{node.op_type} needs a static 4-D input shape")
    b, c, h, w = shape
    ref = im.tensor(ins[0], node)
    if node.op_type == "DepthToSpace":
        if at.get("mode", "DCR") == "DCR":
            t = im.emit("reshape", [ref], {"shape": [b, bs, bs, c // bs**2, h, w]})
            t = im.emit("permute", [t], {"dims": [0, 3, 4, 1, 5, 2]})
        else:
            t = im.emit("reshape", [ref], {"shape": [b, c // bs**2, bs, bs, h, w]})
            t = im.emit("permute", [t], {"dims": [0, 1, 4, 2, 5, 3]})
        out = im.emit("reshape", [t], {"shape": [b, c // bs**2, h * bs, w * bs]},
                      name=im.out_name(node))
    else:
        t = im.emit("reshape", [ref], {"shape": [b, c, h // bs, bs, w // bs, bs]})
        t = im.emit("permute", [t], {"dims": [0, 3, 5, 1, 2, 4]})
        out = im.emit("reshape", [t], {"shape": [b, c * bs**2, h // bs, w // bs]},
                      name=im.out_name(node))
    im.bind(node, 0, out)


SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_HANDLERS))
"""ONNX op types the importer knows (some only on constants or inside patterns)."""


# ----------------------------------------------------------------------------- entry
def import_model(model: Any, *, source: str | None = None, network_id: str | None = None
                 ) -> OnnxImport:
    """Import an ``onnx.ModelProto``; see :func:`petab_sciml.formats.onnx.import_onnx`."""
    return _Importer(model, source=source, network_id=network_id).run()


__all__ = ["NameEntry", "OnnxImport", "SUPPORTED_OPS", "import_model", "META_LAYER",
           "META_LAYER_TYPE"]
