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
from typing import Any

import numpy as np

from petab_sciml.catalogue import LAYERS
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import ID_PATTERN, Network

from ..graph_building import reachable
from ..onnx_budget import folded_elements, infer_shapes_bounded
from .functions import expand_functions
from .registry import HANDLERS, NO_FOLD, PREPASSES
from .values import _C, _P, _T, NameEntry, OnnxImport, _compact, _f32, _Lazy, _sanitize

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
"""Oldest default-domain opset read (the ONNX test data uses opsets 6-12; 13+ is the
common case)."""

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

_COMPARE = {"Greater": "gt", "Less": "lt", "GreaterOrEqual": "ge", "LessOrEqual": "le",
            "Equal": "eq"}
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}
"""ONNX Pad modes -> F.pad modes."""
_INPUT_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13}
"""Element types a graph input may have: FLOAT, the integers of 8 to 64 bits, BOOL,
FLOAT16 and DOUBLE (onnx ``TensorProto`` numbers).  Refused: BFLOAT16, the FLOAT8 and
FLOAT4 types and 2/4-bit integers, whose rounding the backends do not emulate, and 0
(undefined)."""
_SHAPE_ONLY = {"Identity", "Expand", "Tile", "Reshape", "Unsqueeze", "Squeeze", "Cast",
               "CastLike", "Flatten", "Transpose"}


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
        self._next_suffix: dict[str, int] = {}
        self.layers: list[dict] = []
        self.layer_ids: set[str] = set()
        self.free: list[dict] = []
        self.free_ids: set[str] = set()
        self.groups: set[str] = set()  # free-parameter groups
        self.params: dict[str, dict[str, np.ndarray]] = {}
        self.names: list[NameEntry] = []
        self.prov: dict[str, tuple[str, tuple, dict]] = {}
        self.get_attr_cache: dict[tuple, str] = {}
        self.cached_values: list[Any] = []
        """The constants and lazy values ``get_attr_cache`` holds by ``id``: kept alive, so
        that a later object cannot reuse the id of a freed one and hit its entry."""
        self.done: set[int] = set()
        self.trainable_uses: dict[str, list[str]] = {}
        self.shared_layers: dict[tuple, str] = {}
        self.buffer_inits: set[str] = set()
        self._counter: dict[str, int] = {}
        self.inference_error: str | None = None
        self.sources: dict[str, list[str]] = {}
        """Initializers a value folded ahead of conversion was computed from."""

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
        # ops ONNX defines as functions of other ops: their bodies, as onnx's *_expanded
        self.model = expand_functions(self.model, HANDLERS, self.opset, self.source)
        self.graph = self.model.graph
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
        self.elem_types: dict[str, int] = {}
        inferred = self._infer_shapes()
        for vi in (list(inferred.graph.value_info) + list(inferred.graph.input)
                   + list(inferred.graph.output)):
            self.shapes[vi.name] = self._shape_of_type(vi.type)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                self.elem_types[vi.name] = vi.type.tensor_type.elem_type
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

    def _infer_shapes(self) -> Any:
        """The model with ONNX shape inference's value types.

        Inference runs on a copy in the current IR: files of IR versions 3 to 6 list every
        initializer among the graph inputs (as overridable defaults, often without a
        shape), and inference then neither uses their values (a Reshape's target shape)
        nor, below IR 4, their shapes; the copy keeps initializers as constants only.
        When inference fails the reason is kept, and errors that need a rank or shape
        say that inference failed and why.
        """
        onnx = self.onnx
        probe = onnx.ModelProto()
        probe.CopyFrom(self.model)
        inits = {t.name for t in probe.graph.initializer}
        kept = [vi for vi in probe.graph.input if vi.name not in inits]
        del probe.graph.input[:]
        probe.graph.input.extend(kept)
        probe.ir_version = max(int(probe.ir_version), 4)  # initializers need not be inputs
        try:
            plain = onnx.shape_inference.infer_shapes(probe, data_prop=False)
        except Exception as exc:  # noqa: BLE001 - any failure means no shapes
            first = str(exc).strip().splitlines()
            self.inference_error = f"{type(exc).__name__}: {first[0] if first else ''}"
        else:
            # Data propagation only where it cannot materialise a huge Range.
            return infer_shapes_bounded(probe, plain)
        self.warnings.append(f"ONNX shape inference failed on this model "
                             f"({self.inference_error}); ops that need a static rank or "
                             "shape cannot be converted")
        return probe

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
            self._check_input_type(vi)
            input_id = self._unique_input_id(vi.name, inputs)
            inputs.append(input_id)
            self._add_node({"name": input_id, "op": "placeholder", "target": input_id})
            self.env[vi.name] = _T(input_id, self.shapes.get(vi.name))
        if not inputs:
            raise NetworkError("the model has no inputs (every graph input has an "
                               "initializer)", file=self.source)
        for fn in PREPASSES:
            fn(self)
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
            if value is None or (o.type.WhichOneof("value") not in (None, "tensor_type")):
                raise NetworkError(f"graph output {o.name!r} is not a tensor (a sequence, map "
                                   "or optional); networks return tensors", file=self.source)
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
            # the initializers' values are read: what the file declares, it holds
            backed = sum(int(a.size) for a in self.inits.values())
            network = Network.build(network_id, inputs, self.layers, self.nodes, self.free,
                                    source=self.source, backed_elements=backed)
        except NetworkError as exc:  # pragma: no cover - an importer bug, not user input
            raise NetworkError(f"the imported network is invalid ({exc.message}); please "
                               "report this with the model", file=self.source,
                               entry=exc.entry) from None
        elem = {vi.type.tensor_type.elem_type for vi in self.graph.input
                if vi.name not in self.inits}
        dtype = "float64" if 11 in elem else "float32"
        return OnnxImport(network, self.params, self.names, self.warnings, self.opset,
                          self.producer, dtype)

    def _check_input_type(self, vi: Any) -> None:
        """Graph inputs are float32/float64 (or float16, computed in float32), integers or
        bools; low-precision floats (bfloat16, float8, float4) would need every later value
        rounded to them, which the backends do not emulate."""
        from onnx import helper

        elem = vi.type.tensor_type.elem_type
        if not vi.type.HasField("tensor_type"):
            raise NetworkError(f"graph input {vi.name!r} is not a tensor (a sequence, map or "
                               "optional); networks take tensors", file=self.source)
        if elem not in _INPUT_TYPES:
            name = (helper.tensor_dtype_to_string(elem).removeprefix("TensorProto.")
                    if elem else "of undefined element type")
            raise NetworkError(f"graph input {vi.name!r} is {name}: the backends compute in "
                               "float32 or float64 (integers of 8 to 64 bits, bool) and do "
                               "not emulate it; export the network in float32",
                               file=self.source)
        if elem == 10:   # FLOAT16
            self.warnings.append(f"graph input {vi.name!r} is float16: the network computes "
                                 "in float32 (results differ from a float16 run by float16 "
                                 "rounding)")

    def _unique_input_id(self, name: str, taken: list[str]) -> str:
        base = name if ID_PATTERN.match(name) else _sanitize(name, "input_")
        out, k = base, 1
        while out in taken or out in self.node_names:
            out, k = f"{base}_{k}", k + 1
        return out

    def _prune(self) -> None:
        """Drop nodes (and the free parameters they read) that no output depends on."""
        live = reachable(self.nodes, ("output", "placeholder"), _node_refs)
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
        if re.search(r"\b(rank|shape|sizes?)\b", message):
            if self.inference_error:
                message += (f" (ONNX shape inference failed on this model: "
                            f"{self.inference_error})")
            else:
                blind = [n for n in node.input if n and n not in self.inits
                         and self.shapes.get(n) is None]
                if blind:
                    message += (" (ONNX shape inference found no shape for "
                                f"{', '.join(repr(n) for n in blind)})")
        return NetworkError(f"ONNX op {node.op_type} (opset {self.opset}): {message}",
                            file=self.source, entry=self._where(node))

    def unsupported(self, node: Any, why: str = "") -> NetworkError:
        what = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") \
            else node.op_type
        extra = f" ({why})" if why else ""
        return NetworkError(
            f"ONNX op {what!r} (opset {self.opset}) is not supported{extra}; supported ops: "
            f"{', '.join(sorted(HANDLERS))}", file=self.source, entry=self._where(node))

    # ------------------------------------------------------------------ naming
    def _node_name(self, base: str) -> str:
        base = _sanitize(base, "n")
        out, k = base, self._next_suffix.get(base, 1)
        if out in self.node_names:
            out = f"{base}_{k}"
            while out in self.node_names:
                k += 1
                out = f"{base}_{k}"
            self._next_suffix[base] = k + 1   # the next free suffix starts here
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
        """``v``'s shape with every size known, or None.  Where shape inference left a
        size open (inside an expanded function's body, a shape computed in the graph),
        the part of the graph computing ``v`` runs on ones of the inputs' static shapes."""
        s = self.shape(v)
        if (s is None or any(d is None for d in s)) and isinstance(v, _T) and v.onnx:
            s = self._shape_by_running(v.onnx)
        if s is None or any(d is None for d in s):
            return None
        return tuple(int(d) for d in s)

    def needed_shape(self, node: Any, v: Any, what: str) -> tuple[int, ...]:
        """``v``'s static shape, or an error naming the node and ``what`` needs it."""
        shape = self.static_shape(v)
        if shape is None:
            raise self.error(node, f"{node.op_type} needs the static shape of {what} (ONNX "
                             "shape inference found none, and running the graph did not "
                             "give one)")
        return shape

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

    def folded(self, node: Any, index: int, what: str) -> tuple[np.ndarray, list[str]]:
        """Input ``index`` as a numpy array, also when the graph computes it from
        initializers and constants only (exporters reorder recurrent gates in the graph);
        returns the value and the initializers it comes from."""
        name = node.input[index]
        v = self.env.get(name)
        if v is not None:
            a = self.array(v)
            if a is not None:
                return a, [v.init] if isinstance(v, _P) else self.sources.get(name, [])
        try:
            return self.fold_value(name)
        except ValueError as exc:
            raise self.error(node, f"{what} (input {index}) {exc}") from None

    def fold_value(self, name: str) -> tuple[np.ndarray, list[str]]:
        """The value ONNX value ``name`` has whatever the network inputs are (computed
        from initializers, constants and static shapes), and the initializers it comes
        from; ValueError if it depends on the network inputs' values."""
        producer = {o: n for n in self.graph.node for o in n.output}
        needed, leaves, stack, seen = [], [], [name], set()
        known: dict[str, np.ndarray] = {}
        while stack:
            current = stack.pop()
            if not current or current in seen:
                continue
            seen.add(current)
            value = self.inits.get(current)
            if value is None and isinstance(self.env.get(current), _C):
                value = self.env[current].value  # folded already
            source = producer.get(current)
            if value is None and source is not None and source.op_type == "Shape":
                shape = self.shapes.get(source.input[0])
                if shape is not None and all(d is not None for d in shape):
                    at = self.attrs(source)
                    value = np.array(shape, dtype=np.int64)[at.get("start", 0):
                                                            at.get("end", None)]
            if value is not None:
                leaves.append(current)
                known[current] = value
                continue
            if source is None or source.op_type in NO_FOLD:
                raise ValueError("must be known at import (a constant, an initializer or "
                                 "computed from those), but it is computed from the network "
                                 "inputs")
            needed.append(source)
            stack.extend(source.input)
        if name in known:
            return known[name], [name] if name in self.inits else []
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        order = {id(n): i for i, n in enumerate(self.graph.node)}
        needed = sorted({id(n): n for n in needed}.values(), key=lambda n: order[id(n)])
        inputs = [helper.make_tensor_value_info(
            leaf, helper.np_dtype_to_tensor_dtype(known[leaf].dtype), known[leaf].shape)
            for leaf in leaves]
        graph = helper.make_graph(needed, "fold", inputs,
                                  [helper.make_tensor_value_info(name, 0, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        try:
            (value,) = ReferenceEvaluator(model).run(None, known)
        except Exception as exc:  # noqa: BLE001 - reported with the node
            raise ValueError(f"cannot be computed from its initializers: {exc}") from None
        return np.asarray(value), sorted(leaf for leaf in leaves if leaf in self.inits)

    def bind(self, node: Any, index: int, ref: str, shape: Sequence[int] | None = None
             ) -> None:
        """Output ``index`` of ``node`` is the IR node ``ref``; ``shape`` (our own static
        shape) fills in where ONNX shape inference found none."""
        out = node.output[index]
        inferred = self.shapes.get(out)
        if shape is not None and (inferred is None or any(d is None for d in inferred)):
            inferred = tuple(int(d) for d in shape)
        self.env[out] = _T(ref, inferred, out)

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
        self.cached_values.append(v)
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
        self.cached_values.append(c)
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
        trainable = {a.name: a.trainable for a in spec.array_specs(config)}
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
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise self.unsupported(node)
        self.index = index
        ins = self.inputs(node)
        # Fold nodes whose inputs are all constants.
        if node.op_type not in NO_FOLD and all(
                v is None or isinstance(v, _C) for v in ins) and ins:
            if self._fold(node, ins):
                return
        if node.op_type in ("Shape", "Size") and self._fold_shape(node, ins[0]):
            return
        handler(self, node, ins)

    def convert_inner(self, node: Any) -> None:
        """Convert a node of a subgraph (an If branch taken at import), in place of the
        node that holds it."""
        outer = self.index
        try:
            self._convert(outer, node)
        finally:
            self.index = outer

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

        size = folded_elements(node, [None if v is None else v.value for v in ins],
                               self.attrs(node), self.opset)
        if size is not None:
            limits.check("max_folded_elements", f"elements of the folded output of ONNX op "
                         f"{node.op_type}", size, file=self.source, entry=self._where(node))

    def _fold_shape(self, node: Any, v: Any) -> bool:
        shape = self.static_shape(v)
        if shape is None:
            shape = self._shape_by_running(node.input[0])
        if shape is None:
            return False
        if node.op_type == "Size":
            value = np.array(math.prod(shape), dtype=np.int64)
        else:
            a = self.attrs(node)
            value = np.array(shape, dtype=np.int64)[a.get("start", 0):a.get("end", None)]
        self.env[node.output[0]] = _C(value, node.output[0])
        return True

    def _shape_by_running(self, name: str) -> tuple[int, ...] | None:
        """The shape of value ``name`` found by running the part of the graph that
        computes it (onnx's reference evaluator, on ones of the graph inputs' static
        shapes): where shape inference stops (pads or shapes computed in the graph, an
        If), the sizes are still fixed by the input shapes.  None if an input has no
        static shape or the run fails."""
        cache = self.__dict__.setdefault("_run_shapes", {})
        if name in cache:
            return cache[name]
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        producer = {o: n for n in self.graph.node for o in n.output}
        needed, stack, seen, feeds = {}, [name], set(), {}
        graph_inputs = {vi.name: vi for vi in self.graph.input}
        result = None
        while stack:
            current = stack.pop()
            if not current or current in seen:
                continue
            seen.add(current)
            if current in self.inits:
                feeds[current] = self.inits[current]
                continue
            if current in graph_inputs:
                shape = self.shapes.get(current)
                if shape is None or any(d is None for d in shape):
                    cache[name] = None
                    return None
                elem = graph_inputs[current].type.tensor_type.elem_type
                feeds[current] = np.ones(shape, helper.tensor_dtype_to_np_dtype(elem))
                continue
            source = producer.get(current)
            if source is None:
                cache[name] = None
                return None
            needed[id(source)] = source
            stack.extend(source.input)
            for attr in source.attribute:  # outer-scope values read by If/Loop bodies
                if attr.g.node:
                    stack.extend(i for n in attr.g.node for i in n.input)
        order = {id(n): i for i, n in enumerate(self.graph.node)}
        nodes = sorted(needed.values(), key=lambda n: order[id(n)])
        inputs = [helper.make_tensor_value_info(
            k, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.shape(v))
            for k, v in feeds.items()]
        graph = helper.make_graph(nodes, "shape", inputs,
                                  [helper.make_tensor_value_info(name, 0, None)])
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            with np.errstate(all="ignore"):
                (value,) = ReferenceEvaluator(model).run(None, feeds)
            result = tuple(int(d) for d in np.shape(value))
        except Exception:  # noqa: BLE001 - no shape then
            result = None
        cache[name] = result
        return result

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
