"""Export a ``torch.nn.Module`` to the network IR by symbolic tracing (``torch.fx``).

:func:`network_from_module` traces a module with ``torch.fx`` and turns the graph into a
validated :class:`~petab_sciml.network.Network`:

* ``call_module`` nodes of catalogue layers (``torch.nn.Linear``, ``torch.nn.Conv2d``,
  ...) become layers whose arguments are read back from the module's attributes;
  parameter-free ``torch.nn`` modules outside the catalogue (``nn.ReLU``, ``nn.Softmax``,
  ``nn.Identity``, ...) are traced through, so they appear as catalogue functions;
* ``call_function``/``call_method`` nodes become catalogue functions (canonical name as
  target for functions, the method name for methods);
* ``get_attr`` of a layer's array gives ``layer.array``; of any other parameter or buffer
  a free parameter (``params.name`` for arrays of the root module, ``<submodule>.name``
  otherwise);
* placeholders become the network inputs.

A catalogue layer exported on its own becomes a one-layer network (layer id ``layer1``,
inputs ``net_input`` or ``net_input1``, ``net_input2``).

Submodule paths such as ``block.0`` are not PEtab ids: they are mapped to ids by
replacing every other character with ``_`` (``block_0``; a leading digit gets the prefix
``layer_``).  :func:`parameters_from_module` applies the same mapping to read a module's
arrays in IR naming.

torch is imported only when a function of this module is called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, LAYERS, LayerSpec, canonical_function
from petab_sciml.errors import NetworkError, require
from petab_sciml.formats.torch_fx_trace import (
    _catalogue_type,
    _concrete_placeholders,
    _guard_nodes,
    _trace,
    _wrap_root_layer,
)
from petab_sciml.network import FreeParameter, Network

__all__ = ["network_from_module", "parameters_from_module", "module_path_id"]

ROOT_GROUP = "params"
"""Group of free parameters that are attributes of the traced module itself."""

_NON_ID = re.compile(r"[^A-Za-z0-9_]")


# ----------------------------------------------------------------------------- naming
def module_path_id(path: str) -> str:
    """The PEtab id of a submodule path (``block.0`` -> ``block_0``, ``0`` -> ``layer_0``)."""
    out = _NON_ID.sub("_", path)
    if not out or out[0].isdigit():
        out = f"layer_{out}"
    return out


class _Ids:
    """Submodule path <-> id mapping of one module, with collision detection."""

    def __init__(self, module: Any):
        self.paths: dict[str, list[str]] = {}
        for path, _ in module.named_modules(remove_duplicate=False):
            if path:
                self.paths.setdefault(module_path_id(path), [])
                if path not in self.paths[module_path_id(path)]:
                    self.paths[module_path_id(path)].append(path)
        group = ROOT_GROUP
        while group in self.paths:
            group += "_"
        self.root_group = group

    def id_of(self, path: str) -> str:
        ident = module_path_id(path)
        others = [p for p in self.paths.get(ident, []) if p != path]
        if others:
            raise NetworkError(
                f"submodules {path!r} and {others[0]!r} both map to the id {ident!r}; "
                "rename one of them", entry=f"submodule {path!r}")
        return ident

    def path_of(self, ident: str) -> str | None:
        paths = self.paths.get(ident, [])
        if len(paths) > 1:
            raise NetworkError(f"submodules {paths[0]!r} and {paths[1]!r} both map to the id "
                               f"{ident!r}; rename one of them", entry=f"group {ident!r}")
        return paths[0] if paths else None


# ----------------------------------------------------------------------------- layer args
def plain_value(value: Any) -> Any:
    """Tuples and numpy scalars as plain YAML-writable lists and Python numbers."""
    if isinstance(value, (tuple, list)):
        return [plain_value(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _layer_args(torch: Any, spec: LayerSpec, module: Any, path: str) -> dict[str, Any]:
    """Every catalogue argument of ``spec`` read back from a torch layer ``module``."""
    args: dict[str, Any] = {}
    for arg in spec.args:
        if not arg.torch:
            if arg.kind == "none":
                continue  # null is its only value: writing it adds nothing PyTorch accepts
            other = getattr(arg.default, "other", None)  # default copies another argument
            args[arg.name] = args[other] if other in args else arg.default
            continue
        if not hasattr(module, arg.name):
            if arg.ignored:
                continue  # device, dtype: constructor-only, no effect on the result
            raise NetworkError(f"cannot read argument {arg.name!r} from the {spec.type} "
                               "module", entry=f"submodule {path!r}")
        value = getattr(module, arg.name)
        if arg.kind == "bool" and (value is None or isinstance(value, torch.Tensor)):
            value = value is not None  # bias: a Parameter or None
        args[arg.name] = plain_value(value)
    return args


# ----------------------------------------------------------------------------- functions
@cache
def _function_index() -> dict[int, tuple[str, str]]:
    """``id(callable) -> (spelling, canonical name)`` for every catalogue spelling that
    names a torch, torch.nn.functional or operator callable."""
    import operator

    torch = require("torch", "torch")
    functional = torch.nn.functional
    namespaces = (("torch.nn.functional.", functional), ("F.", functional),
                  ("torch.special.", torch.special), ("torch.", torch),
                  ("operator.", operator), ("_operator.", operator))
    index: dict[int, tuple[str, str]] = {}
    for name, spec in FUNCTIONS.items():
        for spelling in (name, *spec.aliases):
            for prefix, namespace in namespaces:
                if spelling.startswith(prefix) and "." not in spelling[len(prefix):]:
                    obj = getattr(namespace, spelling[len(prefix):], None)
                    if callable(obj):
                        index.setdefault(id(obj), (spelling, name))
                    break
    return index


def _spelling(target: Any) -> str:
    module = getattr(target, "__module__", None)
    name = getattr(target, "__name__", None)
    if module and name:
        return f"{module}.{name}"
    return repr(target)


def _function_name(target: Any) -> str | None:
    """Canonical catalogue name of a ``call_function`` target, or None."""
    name = canonical_function("call_function", _spelling(target))
    if name is not None:
        return name
    found = _function_index().get(id(target))
    return found[1] if found else None


def _owner(node: Any) -> str:
    """`` (inside submodule 'path' (Class))`` for nodes traced through a submodule."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, cls = list(stack.values())[-1]
    cls_name = getattr(cls, "__name__", str(cls))
    return f" (inside submodule {path!r}, {cls_name})"


# ----------------------------------------------------------------------------- export
def network_from_module(
    module: Any,
    net_id: str,
    *,
    input_ids: Sequence[str] | None = None,
    concrete_args: Mapping[str, Any] | None = None,
) -> Network:
    """Trace ``module`` with ``torch.fx`` and return its validated network IR.

    ``input_ids`` name the network inputs in the order of the forward's tensor arguments
    (default: the placeholder names).  ``concrete_args`` is passed to the tracer (fix
    non-tensor arguments such as flags); those arguments are not network inputs.
    Raises :class:`NetworkError` naming the submodule or node for anything outside the
    catalogue.
    """
    torch = require("torch", "torch")
    module = _wrap_root_layer(torch, module)
    graph = _trace(torch, module, concrete_args)
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    dropped = _guard_nodes(torch, nodes, _concrete_placeholders(module, placeholders,
                                                                 concrete_args))
    converter = _FxConverter(torch, module, dropped)
    for node in nodes:
        if node.name not in dropped:
            converter.convert(node)
    out_nodes = converter.out_nodes
    inputs = [n["name"] for n in out_nodes if n["op"] == "placeholder"]
    if input_ids is not None:
        if isinstance(input_ids, str) or len(input_ids) != len(inputs):
            raise NetworkError(f"input_ids lists {list(input_ids)!r} but the forward takes "
                               f"{len(inputs)} input(s) ({', '.join(inputs)})",
                               entry="input_ids")
        inputs = list(input_ids)
    return Network.build(net_id, inputs, list(converter.layers.values()), out_nodes,
                         list(converter.free.values()))


class _FxConverter:
    """torch.fx nodes -> IR node dicts, layers and free parameters."""

    def __init__(self, torch: Any, module: Any, dropped: set[str]):
        self.torch = torch
        self.module = module
        self.dropped = dropped
        self.ids = _Ids(module)
        self.layers: dict[str, dict[str, Any]] = {}  # id -> {layer_id, layer_type, args}
        self.layer_paths: dict[str, str] = {}  # module path -> layer id
        self.free: dict[str, FreeParameter] = {}
        self.out_nodes: list[dict[str, Any]] = []

    def add_layer(self, path: str, sub: Any) -> str:
        """The layer id of the submodule at ``path`` (added on first use)."""
        if path in self.layer_paths:
            return self.layer_paths[path]
        layer_type = _catalogue_type(self.torch, sub)
        if layer_type is None:
            raise NetworkError(
                f"{type(sub).__name__} ({type(sub).__module__}) is not a supported layer "
                f"type (supported: {', '.join(sorted(LAYERS))})", entry=f"submodule {path!r}")
        layer_id = self.ids.id_of(path)
        spec = LAYERS[layer_type]
        self.layers[layer_id] = {"layer_id": layer_id, "layer_type": layer_type,
                                 "args": _layer_args(self.torch, spec, sub, path)}
        self.layer_paths[path] = layer_id
        return layer_id

    def value(self, v: Any, where: str) -> Any:
        """An argument as written in the IR (nodes by name, slices as ``{"slice": ...}``)."""
        if isinstance(v, self.torch.fx.Node):
            if v.name in self.dropped:
                raise NetworkError(f"{where} uses the concrete argument {v.name!r} as a value")
            return v.name
        if v is Ellipsis:
            return "..."
        if isinstance(v, slice):
            parts = [v.start, v.stop, v.step]
            if not all(p is None or (isinstance(p, int) and not isinstance(p, bool))
                       for p in parts):
                raise NetworkError(f"{where}: slice bounds must be integers or None, got {v!r}")
            return {"slice": parts}
        if isinstance(v, (tuple, list)):
            return [self.value(x, where) for x in v]
        if isinstance(v, Mapping):
            return {str(k): self.value(x, where) for k, x in v.items()}
        if isinstance(v, np.generic):
            v = v.item()
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise NetworkError(f"{where}: unsupported argument value {v!r} "
                           f"({type(v).__name__})")

    def convert(self, node: Any) -> None:
        """Append the IR node of one fx node."""
        entry = f"node {node.name!r}"
        if node.op == "placeholder":
            self.out_nodes.append({"name": node.name, "op": "placeholder",
                                   "target": node.name})
        elif node.op == "call_module":
            sub = self.module.get_submodule(node.target)
            if node.kwargs:
                raise NetworkError(f"submodule {node.target!r} is called with keyword "
                                   f"arguments {sorted(node.kwargs)}; pass them positionally",
                                   entry=entry)
            layer_id = self.add_layer(node.target, sub)
            args = [self.value(a, entry) for a in node.args]
            self.out_nodes.append({"name": node.name, "op": "call_module",
                                   "target": layer_id, "args": args})
        elif node.op in ("call_function", "call_method"):
            self.out_nodes.append(self.call(node, entry))
        elif node.op == "get_attr":
            self.out_nodes.append({"name": node.name, "op": "get_attr",
                                   "target": _get_attr(self.torch, self.module, node.target,
                                                       self.ids, self.add_layer, self.free,
                                                       entry)})
        elif node.op == "output":
            self.out_nodes.append(self.output(node, entry))
        else:  # pragma: no cover - torch.fx has no other ops
            raise NetworkError(f"unsupported node op {node.op!r}", entry=entry)

    def call(self, node: Any, entry: str) -> dict[str, Any]:
        """The IR node of a call_function / call_method of a catalogue function."""
        if node.op == "call_function":
            target = _function_name(node.target)
            shown = _spelling(node.target)
        else:
            target = node.target if canonical_function("call_method", node.target) else None
            shown = f"method {node.target!r}"
        if target is None:
            raise NetworkError(
                f"{shown} is not in the function catalogue{_owner(node)} (supported: "
                f"{', '.join(sorted(FUNCTIONS))})", entry=entry)
        return {"name": node.name, "op": node.op, "target": target,
                "args": [self.value(a, entry) for a in node.args],
                "kwargs": {k: self.value(v, entry) for k, v in node.kwargs.items()}}

    def output(self, node: Any, entry: str) -> dict[str, Any]:
        """The output node: a tensor, a tuple of tensors, or a layer's tuple flattened."""
        result = node.args[0] if node.args else None
        structure = _tuple_structure(result, self.module, self.layer_paths, self.layers)
        if structure is not None:  # a layer's tuple (out, h = rnn(x)) returned whole
            args = [_flatten_tuple(result.name, structure, self.out_nodes)]
        elif isinstance(result, self.torch.fx.Node):
            args = [self.value(result, entry)]
        elif isinstance(result, (tuple, list)) and result and all(
                isinstance(r, self.torch.fx.Node) for r in result):
            args = [[self.value(r, entry) for r in result]]
        else:
            raise NetworkError(f"the forward must return a tensor or a tuple of tensors, "
                               f"got {result!r}", entry=entry)
        return {"name": node.name, "op": "output", "target": "output", "args": args}


def _tuple_structure(result: Any, module: Any, layer_paths: Mapping[str, str],
                     layers: Mapping[str, Mapping[str, Any]]) -> Any:
    """The output structure of a layer call returned as the forward's result (a
    recurrent layer's ``(output, h_n)``), or None."""
    if getattr(result, "op", None) != "call_module" or result.target not in layer_paths:
        return None
    structure = LAYERS[layers[layer_paths[result.target]]["layer_type"]].output
    return None if structure == "tensor" else structure


def _flatten_tuple(name: str, structure: Any, out_nodes: list[dict[str, Any]]) -> list[str]:
    """``getitem`` nodes taking every tensor out of the (nested) tuple node ``name``."""
    taken = {n["name"] for n in out_nodes}
    flat: list[str] = []
    for k, item in enumerate(structure):
        base = item_name = f"{name}_{k}"
        i = 0
        while item_name in taken:
            i += 1
            item_name = f"{base}_{i}"
        taken.add(item_name)
        out_nodes.append({"name": item_name, "op": "call_function", "target": "getitem",
                          "args": [name, k], "kwargs": {}})
        flat += [item_name] if item == "tensor" else _flatten_tuple(item_name, item, out_nodes)
    return flat


def _get_attr(torch: Any, module: Any, target: str, ids: _Ids, add_layer: Any,
              free: dict[str, FreeParameter], entry: str) -> str:
    """IR target of a ``get_attr`` node: ``layer.array`` or a free parameter id."""
    path, _, name = target.rpartition(".")
    owner = module.get_submodule(path) if path else module
    tensor = getattr(owner, name, None)
    if not isinstance(tensor, torch.Tensor):
        raise NetworkError(f"get_attr {target!r} is not a parameter or buffer", entry=entry)
    if path and _catalogue_type(torch, owner) is not None:
        layer_id = add_layer(path, owner)
        spec = LAYERS[_catalogue_type(torch, owner)]
        arrays = list(spec.array_shapes(spec.resolve_args(_layer_args(torch, spec, owner,
                                                                      path))))
        if name not in arrays:
            raise NetworkError(f"get_attr {target!r}: {name!r} is not an array of "
                               f"{type(owner).__name__} (arrays: {', '.join(arrays)})",
                               entry=entry)
        return f"{layer_id}.{name}"
    is_param = name in dict(owner.named_parameters(recurse=False))
    is_buffer = name in dict(owner.named_buffers(recurse=False))
    if not (is_param or is_buffer):
        raise NetworkError(f"get_attr {target!r} is a tensor constant, not a registered "
                           "parameter or buffer; register it with register_buffer",
                           entry=entry)
    group = ids.id_of(path) if path else ids.root_group
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise NetworkError(f"get_attr {target!r}: {name!r} is not a valid PEtab id",
                           entry=entry)
    pid = f"{group}.{name}"
    trainable = bool(is_param and tensor.requires_grad)
    free.setdefault(pid, FreeParameter(pid, tuple(tensor.shape), trainable))
    return pid


# ----------------------------------------------------------------------------- parameters
def parameters_from_module(module: Any, network: Network) -> dict[str, dict[str, np.ndarray]]:
    """The arrays of ``module`` in IR naming: ``{layer_id: {array_id: ndarray}}`` for every
    layer array of ``network`` (buffers included) and every free parameter
    (``{group: {array: ndarray}}``), with the naming of :func:`network_from_module`.
    """
    torch = require("torch", "torch")
    module = _wrap_root_layer(torch, module)
    ids = _Ids(module)
    out: dict[str, dict[str, np.ndarray]] = {}

    def owner_of(group: str, entry: str) -> Any:
        if group == ids.root_group:
            return module
        path = ids.path_of(group)
        if path is None:
            raise NetworkError(f"the module has no submodule for {group!r}", entry=entry)
        return module.get_submodule(path)

    def array(owner: Any, name: str, entry: str) -> np.ndarray:
        tensor = getattr(owner, name, None)
        if not isinstance(tensor, torch.Tensor):
            raise NetworkError(f"the module has no array {name!r} here", entry=entry)
        return tensor.detach().cpu().numpy().copy()

    for layer in network.layers.values():
        entry = f"layer {layer.id!r}"
        owner = owner_of(layer.id, entry)
        arrays = layer.arrays()
        if arrays:
            out[layer.id] = {name: array(owner, name, entry) for name in arrays}
    for param in network.free_parameters.values():
        entry = f"free parameter {param.id!r}"
        owner = owner_of(param.group, entry)
        out.setdefault(param.group, {})[param.array] = array(owner, param.array, entry)
    return out
