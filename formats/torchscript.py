"""TorchScript archives (``torch.jit.save`` of scripted or traced modules) -> network IR.

Reading loads the archive with ``torch.jit.load`` and lifts its module graph:

* submodules that are catalogue layers (their TorchScript class is
  ``torch.nn.modules.*.<Type>`` with ``original_name`` ``<Type>``: ``Linear``,
  ``Conv1d``, ...) become layers.  Their arguments are read from the module's attributes
  when it was scripted, and from the constants of its forward graph and the shapes of its
  arrays when it was traced (traced modules keep no attributes);
* the forward order comes from the root's forward graph after function inlining and
  constant propagation: calls of layer submodules become ``call_module`` nodes, other
  submodules (``nn.Sequential``, activation modules, user modules) are lifted through,
  aten ops and ``torch.nn.functional`` calls become catalogue functions
  (``call_function``);
* parameters and buffers keep their ``state_dict`` names, with module paths mapped to
  PEtab ids as :mod:`petab_sciml.formats.torch_fx` does (``block.0`` -> ``block_0``);
  arrays of non-layer modules become free parameters (``params.scale`` at the root).

Loading an archive runs TorchScript code and unpickles objects from it, so reading
refuses unless ``trust_code=True`` (``--trust-code`` on the command line); the check comes
before the file is opened.  torch is imported only when an archive is read.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, LAYERS, REQUIRED, canonical_function
from petab_sciml.errors import NetworkError, require
from petab_sciml.formats.pytorch_file import check_trust
from petab_sciml.formats.torch_fx import plain_value
from petab_sciml.network import FreeParameter, Network, unique_node_name
from petab_sciml.plugins import NetworkFormat

__all__ = ["read", "read_with_parameters", "network_from_torchscript", "FORMAT"]

INT64_MAX = 2**63 - 1
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MANGLE = re.compile(r"___torch_mangle_\d+\.")
_TENSOR_KINDS = ("tensor", "tensor|number", "tensors")


# ----------------------------------------------------------------------------- values
class _Training:
    """The ``training`` flag of a module: unknown until run time."""

    def __repr__(self) -> str:
        return "self.training"


TRAINING = _Training()


@dataclass(frozen=True)
class _T:
    """A tensor: the value of the IR node ``name``."""

    name: str


@dataclass(frozen=True)
class _Mod:
    """A (sub)module at ``path`` of the root."""

    path: str
    obj: Any = field(compare=False, repr=False)


@dataclass(frozen=True)
class _Size:
    """``tensor.size(dim)``: known only at run time."""

    tensor: str
    dim: int


@dataclass(frozen=True)
class _Sizes:
    """``tensor.size()``."""

    tensor: str


@dataclass(frozen=True)
class _Param:
    """An array of a traced layer's own graph (``weight``, ``bias``, ...)."""

    name: str


@dataclass(frozen=True)
class _Input:
    """A graph input of a traced layer's own graph."""

    index: int


_UNKNOWN = object()


def _qualified(type_name: str) -> str:
    """``__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear`` ->
    ``torch.nn.modules.linear.Linear``."""
    name = _MANGLE.sub("", str(type_name))
    return name[len("__torch__."):] if name.startswith("__torch__.") else name


def _all_nodes(block: Any) -> Iterator[Any]:
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _all_nodes(sub)


# ----------------------------------------------------------------------------- graphs
_PROTECT = {"prim::CallMethod": "petab_sciml::protected_method",
            "prim::CallFunction": "petab_sciml::protected_function"}
_RESTORE = {v: k for k, v in _PROTECT.items()}


def _function_name(node: Any) -> str | None:
    """Catalogue name of a ``prim::CallFunction`` of a ``torch.nn.functional`` function."""
    qualified = _qualified(node.inputsAt(0).type().annotation_str)
    return canonical_function("call_function", qualified)


def _swap(graph: Any, kinds: Mapping[str, str], keep: Any = None) -> None:
    """Replace nodes of ``kinds`` by nodes of the mapped kind (same inputs, outputs and
    ``name`` attribute); ``keep(node)`` False leaves a node alone."""
    for node in list(_all_nodes(graph)):
        kind = node.kind()
        if kind not in kinds or (keep is not None and not keep(node)):
            continue
        new = graph.create(kinds[kind], list(node.inputs()), node.outputsSize())
        if node.hasAttribute("name"):
            new.s_("name", node.s("name"))
        new.insertBefore(node)
        for old_out, new_out in zip(node.outputs(), new.outputs()):
            new_out.setType(old_out.type())
            old_out.replaceAllUsesWith(new_out)
        node.destroy()


def _prepared(torch: Any, graph: Any) -> Any:
    """A copy of ``graph`` with plain functions inlined (method calls and catalogue
    ``torch.nn.functional`` calls kept), constants propagated and dead code removed."""
    g = graph.copy()
    _swap(g, _PROTECT, keep=lambda n: n.kind() == "prim::CallMethod"
          or _function_name(n) is not None)
    torch._C._jit_pass_inline(g)
    _swap(g, _RESTORE)
    torch._C._jit_pass_constant_propagation(g)
    torch._C._jit_pass_dce(g)
    return g


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


# ----------------------------------------------------------------------------- lifting
class _Lifter:
    """Abstract interpretation of a TorchScript module's graphs into IR nodes."""

    def __init__(self, torch: Any, root: Any, source: object | None):
        from petab_sciml.formats.torch_fx import ROOT_GROUP, module_path_id

        self.torch = torch
        self.root = root
        self.source = None if source is None else str(source)
        self.path_id = module_path_id
        self.layers: dict[str, dict[str, Any]] = {}
        self.layer_paths: dict[str, str] = {}
        self.free: dict[str, FreeParameter] = {}
        self.params: dict[str, dict[str, np.ndarray]] = {}
        self.nodes: list[dict[str, Any]] = []
        self.taken: set[str] = set()
        self.attr_nodes: dict[str, _T] = {}
        self.ids: dict[str, list[str]] = {}
        for path, _ in root.named_modules():
            if path:
                self.ids.setdefault(module_path_id(path), []).append(path)
        group = ROOT_GROUP
        while group in self.ids:
            group += "_"
        self.root_group = group
        self.graphs: dict[tuple[str, str], Any] = {}
        self.where = ""
        self.rebind: tuple[int, _T] | None = None

    # ------------------------------------------------------------------ errors
    def error(self, message: str, entry: str | None = None) -> NetworkError:
        return NetworkError(message, file=self.source, entry=entry or self.where or None)

    # ------------------------------------------------------------------ naming
    def fresh(self, base: str) -> str:
        return unique_node_name(base, self.taken)

    def module_id(self, path: str) -> str:
        ident = self.path_id(path)
        others = [p for p in self.ids.get(ident, []) if p != path]
        if others:
            raise self.error(f"submodules {path!r} and {others[0]!r} both map to the id "
                             f"{ident!r}; rename one of them", f"submodule {path!r}")
        return ident

    # ------------------------------------------------------------------ emitting
    def ir(self, value: Any) -> Any:
        if isinstance(value, _T):
            return value.name
        if isinstance(value, (list, tuple)):
            return [self.ir(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.ir(v) for k, v in value.items()}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (_Size, _Sizes)):
            raise self.error(f"a tensor size ({value.tensor}.size()) is used as a value; "
                             "sizes known only at run time are not supported here")
        if value is TRAINING:
            raise self.error("the module's training flag is used as a value; only dropout "
                             "may depend on it")
        raise self.error(f"unsupported value {value!r} ({type(value).__name__})")

    def emit(self, op: str, target: str, args: list[Any], kwargs: dict[str, Any] | None = None,
             base: str | None = None) -> _T:
        name = self.fresh(base or target)
        self.nodes.append({"name": name, "op": op, "target": target,
                           "args": [self.ir(a) for a in args],
                           "kwargs": {k: self.ir(v) for k, v in (kwargs or {}).items()}})
        return _T(name)

    def call(self, function: str, values: Mapping[str, Any]) -> _T:
        """A ``call_function`` node of the catalogue function with ``values`` by parameter
        name: tensors and required parameters positional, the rest as keywords when they
        differ from their defaults (ignored parameters dropped)."""
        spec = FUNCTIONS[function]
        unknown = set(values) - set(spec.param_names)
        if unknown:  # pragma: no cover - a bug in the op table
            raise self.error(f"internal: {function} has no parameter {sorted(unknown)}")
        last = max((i for i, p in enumerate(spec.params)
                    if p.name in values and (p.kind in _TENSOR_KINDS or p.default is REQUIRED)),
                   default=-1)
        args, kwargs = [], {}
        for i, p in enumerate(spec.params):
            if i <= last:
                args.append(values.get(p.name, p.default))
            elif p.name in values and not p.ignored and not _same(values[p.name], p.default):
                kwargs[p.name] = values[p.name]
        return self.emit("call_function", function, args, kwargs, base=function)

    def call_layer(self, layer_id: str, inputs: Sequence[Any]) -> _T:
        for x in inputs:
            if not isinstance(x, _T):
                raise self.error(f"layer {layer_id!r} is called with {x!r}; expected tensors")
        return self.emit("call_module", layer_id, list(inputs), base=layer_id)

    # ------------------------------------------------------------------ modules
    def layer_type(self, module: _Mod) -> str | None:
        if not module.path:
            return None
        qualified = _qualified(module.obj._c.qualified_name)
        cls = qualified.rsplit(".", 1)[-1]
        if (cls in LAYERS and qualified.startswith("torch.nn.modules.")
                and getattr(module.obj, "original_name", cls) == cls):
            return cls
        return None

    def add_layer(self, module: _Mod, layer_type: str) -> str:
        if module.path in self.layer_paths:
            return self.layer_paths[module.path]
        layer_id = self.module_id(module.path)
        entry = f"submodule {module.path!r} ({layer_type})"
        args, arrays = _layer_args(self.torch, self, module.obj, layer_type, entry)
        self.layers[layer_id] = {"layer_id": layer_id, "layer_type": layer_type, "args": args}
        if arrays:
            self.params[layer_id] = arrays
        self.layer_paths[module.path] = layer_id
        return layer_id

    def synthetic_layer(self, layer_type: str, args: dict[str, Any], base: str) -> str:
        layer_id = base
        i = 0
        while layer_id in self.layers or layer_id in self.ids or layer_id == self.root_group:
            i += 1
            layer_id = f"{base}_{i}"
        LAYERS[layer_type].resolve_args(args, file=self.source, entry=f"layer {layer_id!r}")
        self.layers[layer_id] = {"layer_id": layer_id, "layer_type": layer_type, "args": args}
        return layer_id

    def graph_of(self, module: _Mod, method: str) -> Any:
        key = (module.path, method)
        if key not in self.graphs:
            try:
                fn = getattr(module.obj, method)
                graph = fn.graph
            except AttributeError:
                raise self.error(f"submodule {module.path or '<root>'!r} has no TorchScript "
                                 f"method {method!r}") from None
            self.graphs[key] = _prepared(self.torch, graph)
        return self.graphs[key]

    def attribute(self, owner: Any, name: str) -> Any:
        if not isinstance(owner, _Mod):
            raise self.error(f"attribute {name!r} of a non-module value {owner!r}")
        if name == "training":
            return TRAINING
        try:
            child = getattr(owner.obj, name)
        except AttributeError:
            raise self.error(f"module {owner.path or '<root>'!r} has no attribute "
                             f"{name!r}") from None
        path = f"{owner.path}.{name}" if owner.path else name
        if isinstance(child, self.torch.jit.ScriptModule):
            return _Mod(path, child)
        if isinstance(child, self.torch.Tensor):
            return self.tensor_attribute(owner, name, child)
        return plain_value(child)

    def tensor_attribute(self, owner: _Mod, name: str, tensor: Any) -> _T:
        layer_type = self.layer_type(owner)
        if layer_type is not None:
            layer_id = self.add_layer(owner, layer_type)
            arrays = [a.name for a in LAYERS[layer_type].arrays]
            if name not in arrays:
                raise self.error(f"{name!r} is not an array of {layer_type} (arrays: "
                                 f"{', '.join(arrays)})", f"submodule {owner.path!r}")
            target = f"{layer_id}.{name}"
        else:
            group = self.module_id(owner.path) if owner.path else self.root_group
            if not _ID.match(name):
                raise self.error(f"array {name!r} of module {owner.path or '<root>'!r} is not "
                                 "a valid PEtab id")
            target = f"{group}.{name}"
            if target not in self.free:
                params = dict(owner.obj.named_parameters(recurse=False))
                trainable = name in params and bool(tensor.requires_grad)
                self.free[target] = FreeParameter(target, tuple(tensor.shape), trainable)
                self.params.setdefault(group, {})[name] = _numpy(tensor)
        if target not in self.attr_nodes:
            self.attr_nodes[target] = self.emit("get_attr", target, [],
                                                base=target.replace(".", "_"))
        return self.attr_nodes[target]

    def constant_tensor(self, tensor: Any) -> _T:
        i = 0
        while f"{self.root_group}.constant{i}" in self.free:
            i += 1
        target = f"{self.root_group}.constant{i}"
        self.free[target] = FreeParameter(target, tuple(tensor.shape), False)
        self.params.setdefault(self.root_group, {})[f"constant{i}"] = _numpy(tensor)
        node = self.emit("get_attr", target, [], base=f"constant{i}")
        self.attr_nodes[target] = node
        return node

    # ------------------------------------------------------------------ interpretation
    def run_method(self, module: _Mod, method: str, args: Sequence[Any]) -> list[Any]:
        graph = self.graph_of(module, method)
        inputs = list(graph.inputs())
        if len(inputs) != len(args) + 1:
            raise self.error(f"{module.path or '<root>'}.{method} takes {len(inputs) - 1} "
                             f"argument(s), got {len(args)}")
        env: dict[int, Any] = {inputs[0].unique(): module}
        for v, a in zip(inputs[1:], args):
            env[v.unique()] = a
        outer = self.where
        self.where = f"forward of {module.path!r}" if module.path else ""
        try:
            self.run_block(graph, env)
        finally:
            self.where = outer
        return [env[v.unique()] for v in graph.outputs()]

    def run_block(self, block: Any, env: dict[int, Any]) -> None:
        for node in block.nodes():
            outputs = list(node.outputs())
            values = [env.get(v.unique(), _UNKNOWN) for v in node.inputs()]
            self.rebind = None
            result = self.node(node, values, env)
            if self.rebind is not None:  # an in-place op: later uses see its result
                env[self.rebind[0]] = self.rebind[1]
                self.rebind = None
            if len(outputs) == 1:
                env[outputs[0].unique()] = result
            elif outputs:
                if not isinstance(result, (list, tuple)) or len(result) != len(outputs):
                    raise self.error(f"{node.kind()}: expected {len(outputs)} values")
                for v, r in zip(outputs, result):
                    env[v.unique()] = r

    def node(self, node: Any, values: list[Any], env: dict[int, Any]) -> Any:
        kind = node.kind()
        if kind == "prim::Constant":
            value = _constant(node.output())
            if isinstance(value, self.torch.Tensor):
                return self.tensor_value(value)
            return value
        if kind == "prim::GetAttr":
            return self.attribute(values[0], node.s("name"))
        if kind == "prim::CallMethod":
            module = values[0]
            if not isinstance(module, _Mod):
                raise self.error(f"method call on {module!r}")
            method = node.s("name")
            layer_type = self.layer_type(module)
            # Traced modules name the k-th call of a shared submodule "forward<k>".
            if layer_type is not None and re.fullmatch(r"forward\d*", method):
                layer_id = self.add_layer(module, layer_type)
                spec = LAYERS[layer_type]
                while len(values) - 1 > spec.n_inputs and values[-1] is None:
                    values = values[:-1]  # optional arguments left at None (output_size)
                if len(values) - 1 != spec.n_inputs:
                    raise self.error(f"layer {module.path!r} ({layer_type}) is called with "
                                     f"{len(values) - 1} argument(s); expected "
                                     f"{spec.n_inputs}")
                return self.call_layer(layer_id, values[1:])
            results = self.run_method(module, method, values[1:])
            return results[0] if len(results) == 1 else results
        if kind == "prim::CallFunction":
            return self.call_function(node, values[1:])
        if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            return list(values) if kind == "prim::ListConstruct" else tuple(values)
        if kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            return list(values[0])
        if kind in ("prim::TupleIndex", "aten::__getitem__") and isinstance(
                values[0], (list, tuple)) and isinstance(values[1], int):
            return values[0][values[1]]
        if kind == "prim::If":
            return self.run_if(node, values[0], env)
        if kind in ("prim::unchecked_cast", "prim::NumToTensor", "aten::Int", "aten::Float",
                    "aten::ScalarImplicit", "prim::device", "prim::dtype"):
            return values[0] if kind not in ("prim::device", "prim::dtype") else _UNKNOWN
        if kind == "aten::warn":
            return None
        if kind == "prim::RaiseException":
            raise self.error("the forward raises an exception for this module (a check in "
                             "its code failed while lifting)")
        if kind == "prim::Loop":
            raise self.error("loops (prim::Loop) are not supported; unroll them or use "
                             "nn.Sequential")
        if kind.startswith("aten::"):
            return self.aten(node, values)
        scalar = _scalar_op(kind, values)
        if scalar is not _UNKNOWN:
            return scalar
        raise self.error(f"unsupported TorchScript operation {kind}")

    def tensor_value(self, tensor: Any) -> Any:
        if tensor.dim() == 0:
            return tensor.item()
        return self.constant_tensor(tensor)

    def run_if(self, node: Any, cond: Any, env: dict[int, Any]) -> Any:
        if not isinstance(cond, bool):
            what = "the training flag" if cond is TRAINING else "a value known only at run time"
            raise self.error(f"an if-statement depends on {what}; only control flow on "
                             "constants can be lifted")
        block = list(node.blocks())[0 if cond else 1]
        self.run_block(block, env)
        outs = [env.get(v.unique(), _UNKNOWN) for v in block.outputs()]
        return outs[0] if len(outs) == 1 else outs

    def call_function(self, node: Any, args: list[Any]) -> Any:
        name = _function_name(node)
        if name is None:  # pragma: no cover - inlined by _prepared
            raise self.error(f"cannot lift a call of {node.inputsAt(0).type().annotation_str}")
        spec = FUNCTIONS[name]
        if len(args) > len(spec.params):
            raise self.error(f"{name} is called with {len(args)} arguments; the catalogue "
                             f"signature has {len(spec.params)}")
        return self.call(name, dict(zip(spec.param_names, args)))

    # ------------------------------------------------------------------ aten ops
    def aten(self, node: Any, values: list[Any]) -> Any:
        kind = node.kind()[len("aten::"):]
        try:
            names = _schema_names(node)
        except ValueError:
            names = ()
        a = dict(zip(names, values))
        base = kind[:-1] if kind.endswith("_") and not kind.endswith("__") else kind
        handler = _ATEN.get(base)
        if handler is None or not any(isinstance(v, (_T, _Size, _Sizes, _Mod)) or (
                isinstance(v, (list, tuple)) and any(isinstance(x, _T) for x in v))
                for v in values):
            scalar = _scalar_op(node.kind(), values)  # arithmetic on constants
            if scalar is not _UNKNOWN:
                return scalar
        if handler is None:
            raise self.error(f"aten::{kind} is not supported (no catalogue function for it)")
        result = handler(self, a)
        first = node.inputsAt(0) if node.inputsSize() else None
        if base != kind and first is not None and isinstance(result, _T):
            # In-place op: later uses of the input see the result.
            self.rebind = (first.unique(), result)
        return result


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _numpy(tensor: Any) -> np.ndarray:
    return tensor.detach().cpu().numpy().copy()


_SCALAR_OPS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "neg": operator.neg, "eq": operator.eq, "ne": operator.ne,
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "__not__": operator.not_, "__is__": operator.is_, "__isnot__": operator.is_not,
    "__and__": operator.and_, "__or__": operator.or_, "len": len,
}


def _scalar_op(kind: str, values: list[Any]) -> Any:
    """Evaluate an op on Python constants (what constant propagation left over)."""
    name = kind.split("::", 1)[-1]
    fn = _SCALAR_OPS.get(name)
    if fn is None or not values:
        return _UNKNOWN
    if not all(v is None or isinstance(v, (bool, int, float, str, list, tuple))
               for v in values):
        return _UNKNOWN
    try:
        return fn(*values)
    except Exception:  # noqa: BLE001
        return _UNKNOWN


# ----------------------------------------------------------------------------- op table
def _t(lifter: _Lifter, value: Any, what: str) -> _T:
    if not isinstance(value, _T):
        raise lifter.error(f"{what}: expected a tensor, got {value!r}")
    return value


def _unary(function: str):
    return lambda lf, a: lf.call(function, {"input": _t(lf, a["self"], function)})


def _with(function: str, **renames: str):
    """Handler passing ``self`` as ``input`` and the named aten args (aten name ->
    catalogue name)."""

    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values = {"input": a["self"]}
        for aten_name, name in renames.items():
            if aten_name in a:
                values[name] = a[aten_name]
        return lf.call(function, values)

    return handler


def _elu(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("scale", 1) != 1 or a.get("input_scale", 1) != 1:
        raise lf.error("aten::elu with scale or input_scale other than 1 is not supported")
    return lf.call("elu", {"input": a["self"], "alpha": a["alpha"]})


def _softmax(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        if a.get("dtype") is not None:
            raise lf.error(f"{function} with a dtype is not supported")
        return lf.call(function, {"input": a["self"], "dim": a["dim"]})

    return handler


def _binary(function: str, alpha: bool = False):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values = {"input": a["self"], "other": a["other"]}
        if alpha and a.get("alpha", 1) != 1:
            values["alpha"] = a["alpha"]
        return lf.call(function, values)

    return handler


def _rsub(lf: _Lifter, a: dict[str, Any]) -> _T:
    values = {"input": a["other"], "other": a["self"]}
    if a.get("alpha", 1) != 1:
        values["alpha"] = a["alpha"]
    return lf.call("sub", values)


def _div(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("rounding_mode") is not None:
        raise lf.error("division with a rounding_mode is not supported")
    return lf.call("div", {"input": a["self"], "other": a["other"]})


def _clamp(lf: _Lifter, a: dict[str, Any]) -> _T:
    values = {"input": a["self"]}
    for key in ("min", "max"):
        if a.get(key) is not None:
            if isinstance(a[key], _T):
                raise lf.error("clamp with tensor bounds is not supported")
            values[key] = float(a[key])
    return lf.call("clamp", values)


def _reshape(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "reshape")
    shape = a.get("shape", a.get("size"))
    shape = list(shape) if isinstance(shape, (list, tuple)) else shape
    if isinstance(shape, _Sizes) and shape.tensor == x.name:
        return x
    if isinstance(shape, list) and any(isinstance(s, _Size) for s in shape):
        dynamic = [i for i, s in enumerate(shape) if isinstance(s, _Size)]
        if any(shape[i].tensor != x.name for i in dynamic):
            raise lf.error("reshape to sizes of another tensor is not supported")
        k = len(dynamic)
        if dynamic == list(range(k)) and all(shape[i].dim == i for i in dynamic):
            if shape[k:] == [-1]:
                return lf.call("flatten", {"input": x, "start_dim": k})
        if k == 1 and -1 not in shape:
            shape[dynamic[0]] = -1
        else:
            raise lf.error(f"reshape to a shape with run-time sizes {shape!r} is not "
                           "supported (one run-time size, or leading sizes then -1, are)")
    return lf.call("reshape", {"input": x, "shape": shape})


def _getitem(lf: _Lifter, x: _T, dim: int, item: Any) -> _T:
    full = {"slice": [None, None, None]}
    if dim >= 0:
        index = [full] * dim + [item]
    else:
        index = ["..."] + [item] + [full] * (-dim - 1)
    return lf.call("getitem", {"input": x, "index": index})


def _slice(lf: _Lifter, a: dict[str, Any]) -> _T:
    x = _t(lf, a["self"], "slice")
    start, end, step = a.get("start"), a.get("end"), a.get("step", 1)
    if end is not None and isinstance(end, int) and end >= INT64_MAX:
        end = None
    if any(not (v is None or isinstance(v, int)) for v in (start, end, step)):
        raise lf.error("slices with run-time bounds are not supported")
    if start in (None, 0) and end is None and step in (None, 1):
        return x
    return _getitem(lf, x, a["dim"], {"slice": [start, end, None if step == 1 else step]})


def _select(lf: _Lifter, a: dict[str, Any]) -> _T:
    x = _t(lf, a["self"], "select")
    if not isinstance(a["index"], int):
        raise lf.error("select with a run-time index is not supported")
    return _getitem(lf, x, a["dim"], a["index"])


def _reduce(function: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        if a.get("dtype") is not None:
            raise lf.error(f"{function} with a dtype is not supported")
        values: dict[str, Any] = {"input": a["self"]}
        dim = a.get("dim")
        if isinstance(dim, list) and not dim:
            dim = None
        if dim is not None:
            values["dim"] = dim
            values["keepdim"] = bool(a.get("keepdim", False))
        return lf.call(function, values)

    return handler


def _reduce_dims(function: str):
    """amax/amin: ``dim`` (a list, empty = every dimension) and ``keepdim``."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        values: dict[str, Any] = {"input": a["self"], "dim": list(a.get("dim") or [])}
        values["keepdim"] = bool(a.get("keepdim", False))
        return lf.call(function, values)

    return handler


def _prod(lf: _Lifter, a: dict[str, Any]) -> _T:
    if a.get("dtype") is not None:
        raise lf.error("prod with a dtype is not supported")
    values: dict[str, Any] = {"input": a["self"]}
    if a.get("dim") is not None:
        values["dim"] = a["dim"]
        values["keepdim"] = bool(a.get("keepdim", False))
    return lf.call("prod", values)


def _pad(mode: str | None = None):
    """aten::pad (mode and value as arguments) and its lowerings: constant_pad_nd,
    reflection_padNd, replication_padNd, _pad_circular."""
    def handler(lf: _Lifter, a: dict[str, Any]) -> _T:
        pad = a.get("pad", a.get("padding"))
        if not isinstance(pad, (list, tuple)) or not all(isinstance(p, int) for p in pad):
            raise lf.error("padding with run-time sizes is not supported")
        values: dict[str, Any] = {"input": a["self"], "pad": list(pad),
                                  "mode": mode or a.get("mode") or "constant"}
        if values["mode"] == "constant" and a.get("value") is not None:
            values["value"] = float(a["value"])
        return lf.call("pad", values)

    return handler


def _squeeze(lf: _Lifter, a: dict[str, Any]) -> _T:
    values: dict[str, Any] = {"input": a["self"]}
    if a.get("dim") is not None:
        values["dim"] = a["dim"]
    return lf.call("squeeze", values)


def _dropout(layer_type: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        x = _t(lf, a["input"], layer_type)
        train = a.get("train")
        if train is False or a.get("p") == 0:
            return x
        if train is not TRAINING and train is not True:
            raise lf.error(f"dropout whose training flag is {train!r} is not supported")
        layer_id = lf.synthetic_layer(layer_type, {"p": float(a["p"])}, "dropout")
        return lf.call_layer(layer_id, [x])

    return handler


def _identity(lf: _Lifter, a: dict[str, Any]) -> Any:
    return a["self"]


def _size(lf: _Lifter, a: dict[str, Any]) -> Any:
    x = _t(lf, a["self"], "size")
    if a.get("dim") is None:
        return _Sizes(x.name)
    return _Size(x.name, a["dim"])


def _unsupported(message: str):
    def handler(lf: _Lifter, a: dict[str, Any]) -> Any:
        raise lf.error(message)

    return handler


_ATEN: dict[str, Any] = {
    **{name: _unary(fn) for name, fn in {
        "relu": "relu", "relu6": "relu6", "tanh": "tanh", "sigmoid": "sigmoid",
        "selu": "selu", "silu": "silu", "hardswish": "hardswish",
        "hardsigmoid": "hardsigmoid", "mish": "mish", "log_sigmoid": "logsigmoid",
        "exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "neg": "neg",
        "erf": "erf", "special_erf": "erf", "sign": "sign", "sin": "sin", "cos": "cos",
    }.items()},
    **{name: _binary(fn) for name, fn in {
        "gt": "gt", "greater": "gt", "lt": "lt", "less": "lt", "ge": "ge",
        "greater_equal": "ge", "le": "le", "less_equal": "le", "eq": "eq",
        "maximum": "maximum", "minimum": "minimum",
    }.items()},
    "where": lambda lf, a: lf.call("where", {"condition": a["condition"], "input": a["self"],
                                             "other": a["other"]}),
    "amax": _reduce_dims("amax"),
    "amin": _reduce_dims("amin"),
    "prod": _prod,
    "flip": lambda lf, a: lf.call("flip", {"input": a["self"], "dims": list(a["dims"])}),
    "pad": _pad(),
    "constant_pad_nd": _pad("constant"),
    **{f"reflection_pad{n}d": _pad("reflect") for n in (1, 2, 3)},
    **{f"replication_pad{n}d": _pad("replicate") for n in (1, 2, 3)},
    "_pad_circular": _pad("circular"),
    "hardtanh": _with("hardtanh", min_val="min_val", max_val="max_val"),
    "leaky_relu": _with("leaky_relu", negative_slope="negative_slope"),
    "gelu": _with("gelu", approximate="approximate"),
    "softplus": _with("softplus", beta="beta", threshold="threshold"),
    "celu": _with("celu", alpha="alpha"),
    "elu": _elu,
    "softmax": _softmax("softmax"),
    "log_softmax": _softmax("log_softmax"),
    "add": _binary("add", alpha=True),
    "sub": _binary("sub", alpha=True),
    "rsub": _rsub,
    "mul": _binary("mul"),
    "div": _div,
    "reciprocal": lambda lf, a: lf.call("div", {"input": 1.0, "other": a["self"]}),
    "pow": lambda lf, a: lf.call("pow", {"input": a["self"], "exponent": a["exponent"]}),
    "matmul": _binary("matmul"),
    "clamp": _clamp,
    "clip": _clamp,
    "clamp_min": lambda lf, a: _clamp(lf, {"self": a["self"], "min": a["min"]}),
    "clamp_max": lambda lf, a: _clamp(lf, {"self": a["self"], "max": a["max"]}),
    "cat": lambda lf, a: lf.call("cat", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "concat": lambda lf, a: lf.call("cat", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "stack": lambda lf, a: lf.call("stack", {"tensors": a["tensors"], "dim": a.get("dim", 0)}),
    "flatten": lambda lf, a: lf.call("flatten", {"input": a["self"],
                                                 "start_dim": a.get("start_dim", 0),
                                                 "end_dim": a.get("end_dim", -1)}),
    "reshape": _reshape,
    "view": _reshape,
    "permute": lambda lf, a: lf.call("permute", {"input": a["self"], "dims": a["dims"]}),
    "transpose": lambda lf, a: lf.call("transpose", {"input": a["self"], "dim0": a["dim0"],
                                                     "dim1": a["dim1"]}),
    "t": lambda lf, a: lf.call("transpose", {"input": a["self"], "dim0": 0, "dim1": -1}),
    "squeeze": _squeeze,
    "unsqueeze": lambda lf, a: lf.call("unsqueeze", {"input": a["self"], "dim": a["dim"]}),
    "slice": _slice,
    "select": _select,
    "sum": _reduce("sum"),
    "mean": _reduce("mean"),
    "dropout": _dropout("Dropout"),
    "alpha_dropout": _dropout("AlphaDropout"),
    "feature_dropout": _unsupported("functional channel dropout (F.dropout1d/2d/3d) outside "
                                    "a Dropout1d/2d/3d module is not supported"),
    "feature_alpha_dropout": _unsupported("functional feature alpha dropout is not "
                                          "supported"),
    "contiguous": _identity,
    "detach": _identity,
    "clone": _identity,
    "alias": _identity,
    "size": _size,
    "linear": _unsupported("functional linear (F.linear) outside an nn.Linear module is not "
                           "supported; use nn.Linear"),
}


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
        return
    if layer_type == "PReLU":
        if weight is not None:
            put("num_parameters", weight.shape[0])
        return  # init (the default initial weight) is not in a traced module
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
        return
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


# ----------------------------------------------------------------------------- public API
def network_from_torchscript(
    module: Any,
    net_id: str | None = None,
    *,
    input_ids: Sequence[str] | None = None,
    source: object | None = None,
) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """Lift a loaded TorchScript module (``torch.jit.ScriptModule``) to the IR.

    Returns ``(network, {group: {array: ndarray}})``.  ``net_id`` defaults to the
    module's ``original_name``; ``input_ids`` name the inputs (default: the forward's
    argument names).
    """
    torch = require("torch", "torch")
    if not isinstance(module, torch.jit.ScriptModule):
        raise NetworkError(f"expected a TorchScript module, got {type(module).__name__}",
                           file=source)
    lifter = _Lifter(torch, module, source)
    if net_id is None:
        net_id = getattr(module, "original_name", "") or "net"
        if not _ID.match(net_id):
            net_id = "net"
    root = _Mod("", module)
    graph = lifter.graph_of(root, "forward")
    placeholders = []
    for v in list(graph.inputs())[1:]:
        name = lifter.fresh(re.sub(r"\.\d+$", "", v.debugName()) or "input")
        placeholders.append(name)
        lifter.nodes.append({"name": name, "op": "placeholder", "target": name})
    _run_root(lifter, graph, root, placeholders)
    inputs = list(placeholders)
    if input_ids is not None:
        if isinstance(input_ids, str) or len(input_ids) != len(inputs):
            raise NetworkError(f"input_ids lists {list(input_ids)!r} but the forward takes "
                               f"{len(inputs)} input(s) ({', '.join(inputs)})", file=source,
                               entry="input_ids")
        inputs = list(input_ids)
    nodes = _prune(lifter.nodes)
    used_free = {n["target"] for n in nodes if n["op"] == "get_attr"}
    free = [p for pid, p in lifter.free.items() if pid in used_free]
    params = {g: dict(arrays) for g, arrays in lifter.params.items()}
    for pid in set(lifter.free) - used_free:
        group, array = pid.split(".", 1)
        params.get(group, {}).pop(array, None)
    params = {g: arrays for g, arrays in params.items() if arrays}
    network = Network.build(net_id, inputs, list(lifter.layers.values()), nodes, free,
                            source=source)
    return network, params


def _run_root(lifter: _Lifter, graph: Any, root: _Mod, placeholders: list[str]) -> None:
    inputs = list(graph.inputs())
    env: dict[int, Any] = {inputs[0].unique(): root}
    for v, name in zip(inputs[1:], placeholders):
        env[v.unique()] = _T(name)

    lifter.run_block(graph, env)
    results = [env[v.unique()] for v in graph.outputs()]
    result = results[0] if len(results) == 1 else tuple(results)
    if isinstance(result, _T):
        args: list[Any] = [result.name]
    elif isinstance(result, (list, tuple)) and result and all(
            isinstance(r, _T) for r in result):
        args = [[r.name for r in result]]
    else:
        raise lifter.error(f"the forward must return a tensor or a tuple of tensors, got "
                           f"{result!r}")
    lifter.nodes.append({"name": "output", "op": "output", "target": "output", "args": args})


def _prune(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop function and get_attr nodes whose values nothing uses."""
    by_name = {n["name"]: n for n in nodes}
    used: set[str] = set()
    stack = [n["name"] for n in nodes if n["op"] in ("output", "placeholder", "call_module")]
    while stack:
        name = stack.pop()
        if name in used:
            continue
        used.add(name)
        refs: list[str] = []
        _names(by_name[name].get("args", []), refs)
        _names(by_name[name].get("kwargs", {}), refs)
        stack.extend(r for r in refs if r in by_name)
    return [n for n in nodes if n["name"] in used]


def _names(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _names(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _names(v, out)


def read_with_parameters(
    path: str | os.PathLike,
    *,
    trust_code: bool = False,
    net_id: str | None = None,
    input_ids: Sequence[str] | None = None,
) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """``(network, {group: {array: ndarray}})`` of a TorchScript archive.

    Refuses (:class:`~petab_sciml.formats.pytorch_file.UntrustedCodeError`) unless
    ``trust_code=True``: loading an archive runs code from it.
    """
    path = Path(path)
    check_trust(path, trust_code=trust_code, what="TorchScript archive")
    torch = require("torch", "torch")
    if not path.is_file():
        raise NetworkError("no such file", file=path)
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise NetworkError(f"not a loadable TorchScript archive: {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
                           file=path) from None
    try:
        return network_from_torchscript(module, net_id, input_ids=input_ids, source=path)
    except NetworkError as exc:
        raise NetworkError(exc.message, file=path, entry=exc.entry) from None


def read(path: str | os.PathLike, *, trust_code: bool = False, net_id: str | None = None,
         input_ids: Sequence[str] | None = None, **options: Any) -> Network:
    """The network IR of a TorchScript archive (refuses unless ``trust_code=True``)."""
    network, _ = read_with_parameters(path, trust_code=trust_code, net_id=net_id,
                                      input_ids=input_ids, **options)
    return network


FORMAT = NetworkFormat(name="torchscript", extensions=(".pt", ".torchscript", ".jit"),
                       read=read, write=None, runs_code=True)
