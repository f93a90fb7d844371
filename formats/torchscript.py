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

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, LAYERS
from petab_sciml.errors import NetworkError, require
from petab_sciml.formats.graph_building import (
    GraphBuilder,
    Tensor,
    call_arguments,
    drop_unused,
)
from petab_sciml.formats.pytorch_file import check_trust
from petab_sciml.formats.torch_fx import plain_value
from petab_sciml.formats.torchscript_aten import _ATEN, _scalar_op
from petab_sciml.formats.torchscript_graph import (
    _UNINITIALIZED,
    _UNKNOWN,
    TRAINING,
    _Full,
    _function_name,
    _Mod,
    _numpy,
    _prepared,
    _qualified,
    _Size,
    _SizeProd,
    _Sizes,
    _Tuple,
)
from petab_sciml.formats.torchscript_layers import _constant, _layer_args, _schema_names
from petab_sciml.network import ID_PATTERN, FreeParameter, Network
from petab_sciml.plugins import NetworkFormat

__all__ = ["read", "read_with_parameters", "network_from_torchscript", "FORMAT"]

_NOT_TRAINING = object()
"""``not self.training``."""
_SHAPE_KEEPING = {name for name, spec in FUNCTIONS.items()
                  if len(spec.tensor_params()) <= 2 and spec.name not in (
                      "matmul", "getitem", "where", "cat", "stack") and all(
                      p.kind in ("tensor", "tensor|number", "float", "float?", "bool", "int?",
                                 "choice:none|tanh", "choice?:trunc|floor", "any", "none")
                      for p in spec.params)}
"""Catalogue functions whose result has the shape of their tensor operand (element-wise
maths; checked with one distinct tensor operand)."""


# ----------------------------------------------------------------------------- lifting
class _Lifter(GraphBuilder):
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
        self.attr_nodes: dict[str, Tensor] = {}
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
        self.rebind: tuple[int, Tensor] | None = None
        self.sym: dict[str, list[Any]] = {}
        """IR node -> its sizes where known symbolically (ints and :class:`_Size`)."""
        self.same_shape: dict[str, str] = {}
        """IR node -> an earlier node known to have the same shape."""

    # ------------------------------------------------------------------ errors
    def error(self, message: str, entry: str | None = None) -> NetworkError:
        return NetworkError(message, file=self.source, entry=entry or self.where or None)

    # ------------------------------------------------------------------ naming
    def module_id(self, path: str) -> str:
        ident = self.path_id(path)
        others = [p for p in self.ids.get(ident, []) if p != path]
        if others:
            raise self.error(f"submodules {path!r} and {others[0]!r} both map to the id "
                             f"{ident!r}; rename one of them", f"submodule {path!r}")
        return ident

    # ------------------------------------------------------------------ emitting
    def ir_value(self, value: Any) -> Any:
        """A filled tensor as a constant; an error for sizes, tuples, the training flag
        and unset variables used as values."""
        if isinstance(value, (_Size, _Sizes, _SizeProd)):
            tensor = value.factors[0].tensor if isinstance(value, _SizeProd) else value.tensor
            raise self.error(f"a tensor size ({tensor}.size()) is used as a value; sizes "
                             "known only at run time are supported in reshapes only")
        if isinstance(value, _Full):
            return self.ir(self.full_tensor(value))
        if isinstance(value, _Tuple):
            raise self.error(f"the tuple returned by {value.ref!r} is used as a value; take "
                             "its elements (out, h = rnn(x))")
        if value is _UNINITIALIZED:
            raise self.error("a variable that is set only on a branch not taken is used")
        if value is TRAINING:
            raise self.error("the module's training flag is used as a value; only dropout "
                             "may depend on it")
        raise self.error(f"unsupported value {value!r} ({type(value).__name__})")

    def call(self, function: str, values: Mapping[str, Any]) -> Tensor:
        """A ``call_function`` node of the catalogue function with ``values`` by parameter
        name: tensors and required parameters positional, the rest as keywords when they
        differ from their defaults (ignored parameters dropped)."""
        spec = FUNCTIONS[function]
        unknown = set(values) - set(spec.param_names)
        if unknown:  # pragma: no cover - a bug in the op table
            raise self.error(f"internal: {function} has no parameter {sorted(unknown)}")
        args, kwargs = call_arguments(
            spec, values, lambda p, v: not p.ignored and not _same(v, p.default))
        out = self.emit("call_function", function, args, kwargs, base=function)
        self.note_shape(function, values, out)
        source = values.get("input")
        dims = self.sym.get(source.name) if isinstance(source, Tensor) else None
        if dims is not None and function in ("transpose", "permute"):
            rank = len(dims)
            if function == "transpose":
                order = list(range(rank))
                i, j = values["dim0"] % rank, values["dim1"] % rank
                order[i], order[j] = order[j], order[i]
            else:
                order = [d % rank for d in values["dims"]]
            self.sym[out.name] = [dims[k] for k in order]
        return out

    def note_shape(self, function: str, values: Mapping[str, Any], out: Tensor) -> None:
        """Remember that ``out`` has the shape of its input where the function keeps it
        (element-wise maths of one tensor with numbers, or of a tensor with itself), so
        that ``x.size(d)`` can size a reshape of ``out`` (F.local_response_norm)."""
        spec = FUNCTIONS[function]
        tensors = [values[p.name] for p in spec.tensor_params() if isinstance(
            values.get(p.name), Tensor)]
        numbers_only = all(isinstance(values.get(p.name), (Tensor, int, float)) and not isinstance(
            values.get(p.name), bool) for p in spec.tensor_params() if p.name in values)
        if tensors and numbers_only and len({t.name for t in tensors}) == 1 and \
                function in _SHAPE_KEEPING:
            self.same_shape[out.name] = self.same_shape.get(tensors[0].name, tensors[0].name)

    def call_layer(self, layer_id: str, inputs: Sequence[Any]) -> Tensor:
        spec = LAYERS[self.layers[layer_id]["layer_type"]] if layer_id in self.layers \
            else None
        inputs = list(inputs)
        if spec is not None and spec.optional_inputs and len(inputs) > spec.n_inputs:
            state = inputs[spec.n_inputs]
            parts = state if isinstance(state, (list, tuple)) else [state]
            if all(isinstance(p, _Full) and p.value == 0 for p in parts):
                inputs = inputs[:spec.n_inputs]  # zero initial state: PyTorch's default
        for x in inputs:
            parts = x if isinstance(x, (list, tuple)) else [x]
            for part in parts:
                if isinstance(part, _Full):
                    continue
                if not isinstance(part, Tensor):
                    raise self.error(f"layer {layer_id!r} is called with {x!r}; expected "
                                     "tensors")
        out = self.emit("call_module", layer_id, inputs, base=layer_id)
        if spec is not None and inputs and isinstance(inputs[0], Tensor):
            dims = self.sym.get(inputs[0].name)
            if dims is not None:
                shaped = _layer_sizes(spec, self.layers[layer_id]["args"], dims)
                if shaped is not None:
                    self.sym[out.name] = shaped
        return out

    def full_tensor(self, value: _Full) -> Tensor:
        """A filled tensor as a constant (its sizes must be known at import)."""
        if not all(isinstance(d, int) for d in value.sizes):
            raise self.error(f"a tensor filled with {value.value} whose sizes "
                             f"{list(value.sizes)!r} are known only at run time is supported "
                             "only as the initial state of a recurrent layer (where zeros are "
                             "PyTorch's default)")
        return self.constant_tensor(self.torch.full(tuple(value.sizes), float(value.value)))

    def tuple_result(self, ref: Tensor, layer_type: str, ts_type: Any, module: _Mod,
                     method: str) -> Any:
        """The value of a call of a layer that returns a tuple, shaped like TorchScript's
        type of the result: nested for scripted modules; for traced ones what the traced
        method returns (the flat ``(output, h_n, c_n)``, or only the elements used)."""
        structure = LAYERS[layer_type].output
        if structure == "tensor":
            return ref
        traced = self.traced_result(ref, layer_type, module, method)
        if traced is not None:
            return traced
        leaves: list[tuple[int, ...]] = []

        def walk(item: Any, path: tuple[int, ...]) -> None:
            if item == "tensor":
                leaves.append(path)
            else:
                for k, sub in enumerate(item):
                    walk(sub, path + (k,))

        walk(structure, ())
        counter = iter(leaves)

        def shape(tp: Any) -> Any:
            if tp.kind() == "TupleType":
                return tuple(shape(e) for e in tp.elements())
            return next(counter)

        try:
            items = shape(ts_type)
        except StopIteration:
            raise self.error(f"a {layer_type} call returns {ts_type}; expected "
                             f"{structure}") from None
        return _Tuple(ref.name, items)

    def traced_result(self, ref: Tensor, layer_type: str, module: _Mod, method: str) -> Any:
        """A traced recurrent layer's result: the outputs of its aten::lstm / gru / rnn_*
        op that its traced method returns, in the order it returns them (traces return
        only the outputs used, in their own order).  None when the method returns
        something else (a scripted module)."""
        graph = getattr(module.obj, method).graph
        op = next((n for n in graph.nodes() if n.kind() in (
            "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu")), None)
        if op is None:
            return None
        flat = [(0,), (1, 0), (1, 1)] if layer_type == "LSTM" else [(0,), (1,)]
        positions = {v.unique(): k for k, v in enumerate(op.outputs())}
        (returned,) = list(graph.outputs())
        values = list(returned.node().inputs()) \
            if returned.node().kind() == "prim::TupleConstruct" else [returned]
        if not all(v.unique() in positions for v in values):
            return None
        paths = [flat[positions[v.unique()]] for v in values]
        if returned.node().kind() != "prim::TupleConstruct":
            return self.tuple_item(_Tuple(ref.name, tuple(paths)), 0)
        return _Tuple(ref.name, tuple(paths))

    def tuple_item(self, value: _Tuple, index: int) -> Any:
        """Element ``index`` of a layer's tuple result: getitem nodes for a tensor."""
        item = value.items[index]
        if isinstance(item, tuple) and item and isinstance(item[0], tuple):
            return _Tuple(value.ref, item)
        key = (value.ref, item)
        cache = self.__dict__.setdefault("_tuple_items", {})
        if key not in cache:
            ref = Tensor(value.ref)
            for k in item:
                ref = self.call("getitem", {"input": ref, "index": k})
            cache[key] = ref
        return cache[key]

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

    def tensor_attribute(self, owner: _Mod, name: str, tensor: Any) -> Tensor:
        layer_type = self.layer_type(owner)
        if layer_type is not None:
            layer_id = self.add_layer(owner, layer_type)
            spec = LAYERS[layer_type]
            arrays = list(spec.array_shapes(spec.resolve_args(self.layers[layer_id]["args"])))
            if name not in arrays:
                raise self.error(f"{name!r} is not an array of {layer_type} (arrays: "
                                 f"{', '.join(arrays)})", f"submodule {owner.path!r}")
            target = f"{layer_id}.{name}"
        else:
            group = self.module_id(owner.path) if owner.path else self.root_group
            if not ID_PATTERN.match(name):
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

    def constant_tensor(self, tensor: Any) -> Tensor:
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
            return self.call_method(node, values)
        if kind == "prim::CallFunction":
            return self.call_function(node, values[1:])
        if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            return list(values) if kind == "prim::ListConstruct" else tuple(values)
        if kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            if isinstance(values[0], _Tuple):
                return [self.tuple_item(values[0], k) for k in range(len(values[0].items))]
            if isinstance(values[0], _Sizes):  # h, w = x.shape: x has that rank
                sizes = [_Size(values[0].tensor, k) for k in range(node.outputsSize())]
                self.sym.setdefault(values[0].tensor, list(sizes))
                return sizes
            return list(values[0])
        if kind in ("prim::TupleIndex", "aten::__getitem__") and isinstance(values[1], int):
            if isinstance(values[0], _Tuple):
                return self.tuple_item(values[0], values[1])
            if isinstance(values[0], _Sizes):
                return _Size(values[0].tensor, values[1])
            if isinstance(values[0], (list, tuple)):
                return values[0][values[1]]
        if kind == "prim::Uninitialized":
            return _UNINITIALIZED
        if kind == "aten::__not__" and (values[0] is TRAINING or values[0] is _NOT_TRAINING):
            return _NOT_TRAINING if values[0] is TRAINING else TRAINING
        if kind == "aten::dim" and isinstance(values[0], Tensor):
            return self.rank(node, values[0])
        if kind == "prim::If":
            return self.run_if(node, values[0], env)
        if kind in ("prim::unchecked_cast", "prim::NumToTensor", "aten::Int", "aten::Float",
                    "aten::ScalarImplicit", "prim::device", "prim::dtype"):
            return values[0] if kind not in ("prim::device", "prim::dtype") else _UNKNOWN
        if kind == "aten::warn":
            return None
        if kind in ("aten::format", "aten::str"):  # messages of checks and warnings
            return "<message>"
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

    def call_method(self, node: Any, values: list[Any]) -> Any:
        """``prim::CallMethod``: a call of a catalogue layer's forward becomes a
        call_module node; other methods are interpreted (their graphs run inline)."""
        module = values[0]
        if not isinstance(module, _Mod):
            raise self.error(f"method call on {module!r}")
        method = node.s("name")
        layer_type = self.layer_type(module)
        # Traced modules name the k-th call of a shared submodule "forward<k>";
        # scripted ones an overload "forward__<k>" (nn.LSTM).
        if layer_type is not None and re.fullmatch(r"forward(\d*|__\d+)", method):
            layer_id = self.add_layer(module, layer_type)
            spec = LAYERS[layer_type]
            while len(values) - 1 > spec.n_inputs and values[-1] is None:
                values = values[:-1]  # optional arguments left at None (output_size)
            if layer_type == "LSTM" and len(values) == 4:  # traced: (x, h_0, c_0)
                values = [values[0], values[1], (values[2], values[3])]
            if not spec.n_inputs <= len(values) - 1 <= spec.max_inputs:
                raise self.error(f"layer {module.path!r} ({layer_type}) is called with "
                                 f"{len(values) - 1} argument(s); expected "
                                 f"{spec.n_inputs}")
            result = self.call_layer(layer_id, values[1:])
            return self.tuple_result(result, layer_type, node.output().type(),
                                     module, method)
        results = self.run_method(module, method, values[1:])
        return results[0] if len(results) == 1 else results

    def rank(self, node: Any, x: Tensor) -> int:
        """``aten::dim``: the rank from the graph's type, else from the known sizes."""
        rank = node.inputsAt(0).type().dim() if hasattr(node.inputsAt(0).type(), "dim") \
            else None
        known = self.sym.get(x.name, self.sym.get(self.same_shape.get(x.name, x.name)))
        if rank is None and known is not None:
            rank = len(known)
        if rank is None:
            raise self.error("aten::dim: the rank of this tensor is not in the graph (a "
                             "scripted module); trace the module, or avoid x.dim()")
        return int(rank)

    def tensor_value(self, tensor: Any) -> Any:
        if tensor.dim() == 0:
            return tensor.item()
        return self.constant_tensor(tensor)

    def run_if(self, node: Any, cond: Any, env: dict[int, Any]) -> Any:
        if cond is TRAINING or cond is _NOT_TRAINING:
            cond = self.saved_mode_branch(cond)
        if not isinstance(cond, bool):
            raising = [any(n.kind() == "prim::RaiseException" for n in b.nodes())
                       for b in node.blocks()]
            if raising.count(True) == 1:  # a check (torch._assert(h == size)): it passes
                cond = not raising[0]
        if not isinstance(cond, bool):
            what = "the training flag" if cond is TRAINING else "a value known only at run time"
            raise self.error(f"an if-statement depends on {what}; only control flow on "
                             "constants can be lifted")
        block = list(node.blocks())[0 if cond else 1]
        self.run_block(block, env)
        outs = [env.get(v.unique(), _UNKNOWN) for v in block.outputs()]
        return outs[0] if len(outs) == 1 else outs

    def saved_mode_branch(self, cond: Any) -> bool:
        """An if-statement on the training flag outside dropout (torchvision's stochastic
        depth) follows the eval-mode branch when the archive was saved in eval mode (as
        models are exported for inference); the lifted network then behaves so in both
        modes, which is said once.  Saved in training mode, it is refused."""
        saved = bool(self.root.training)
        if saved:
            raise self.error("an if-statement depends on the training flag; only control "
                             "flow on constants can be lifted (an archive saved in eval "
                             "mode follows its eval-mode branch)")
        if not self.__dict__.get("_mode_warned"):
            self._mode_warned = True
            import warnings

            warnings.warn(
                f"{self.source or 'TorchScript module'}: {self.where or 'the forward'} "
                "branches on self.training; the lifted network takes the eval-mode branch "
                "(the mode the archive was saved in) in both modes", UserWarning,
                stacklevel=2)
        return saved if cond is TRAINING else not saved

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
        if handler is None or not any(isinstance(v, (Tensor, _Size, _Sizes, _Mod)) or (
                isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v))
                for v in values):
            scalar = _scalar_op(node.kind(), values)  # arithmetic on constants
            if scalar is not _UNKNOWN:
                return scalar
        if handler is None:
            raise self.error(f"aten::{kind} is not supported (no catalogue function for it)")
        if base in ("eq", "ne", "lt", "le", "gt", "ge") and any(
                isinstance(v, (_Size, _SizeProd)) for v in values) and not any(
                isinstance(v, Tensor) for v in values):
            return _UNKNOWN  # a size test: only an if that raises may depend on it
        self.current = node
        try:
            result = handler(self, a)
        except KeyError:  # int/bool overloads (a, b) reached with run-time values
            shown = ", ".join(f"{n}={v!r}" for n, v in a.items())
            raise self.error(f"aten::{kind}({shown}) is not supported (values known only "
                             "at run time)") from None
        first = node.inputsAt(0) if node.inputsSize() else None
        if base != kind and first is not None and isinstance(result, Tensor):
            # In-place op: later uses of the input see the result.
            self.rebind = (first.unique(), result)
        return result


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


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
        if not ID_PATTERN.match(net_id):
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
    nodes, free, params = drop_unused(lifter.nodes, lifter.free, lifter.params)
    network = Network.build(net_id, inputs, list(lifter.layers.values()), nodes, free,
                            source=source)
    return network, params


def _run_root(lifter: _Lifter, graph: Any, root: _Mod, placeholders: list[str]) -> None:
    inputs = list(graph.inputs())
    env: dict[int, Any] = {inputs[0].unique(): root}
    for v, name in zip(inputs[1:], placeholders):
        env[v.unique()] = Tensor(name)

    lifter.run_block(graph, env)
    results = [env[v.unique()] for v in graph.outputs()]
    result = results[0] if len(results) == 1 else tuple(results)
    result = _flat_tensors(lifter, result)
    if isinstance(result, tuple) and any(r is None for r in result):
        # GoogLeNet and Inception return (x, None, None) when scripted in eval mode (their
        # auxiliary outputs); the network returns the tensors.
        result = tuple(r for r in result if r is not None)
        result = result[0] if len(result) == 1 else result
    if isinstance(result, Tensor):
        args: list[Any] = [result.name]
    elif isinstance(result, (list, tuple)) and result and all(
            isinstance(r, Tensor) for r in result):
        args = [[r.name for r in result]]
    else:
        raise lifter.error(f"the forward must return a tensor or a tuple of tensors, got "
                           f"{result!r}")
    lifter.nodes.append({"name": "output", "op": "output", "target": "output", "args": args})


_SAME_SIZE_LAYERS = ("BatchNorm", "InstanceNorm", "LayerNorm", "Dropout", "AlphaDropout",
                     "LocalResponseNorm", "PReLU")


def _layer_sizes(spec: Any, args: Mapping[str, Any], dims: list[Any]) -> list[Any] | None:
    """The symbolic sizes of a layer's output from its input's, where simple: layers
    that keep the shape, and convolutions whose spatial size is divided exactly
    (kernel == stride, no padding: ViT's patch embedding) or kept."""
    from petab_sciml.catalogue import as_tuple

    if spec.function is not None or spec.type.startswith(_SAME_SIZE_LAYERS):
        return list(dims)
    if not spec.type.startswith("Conv") or spec.type.startswith("ConvTranspose"):
        return None
    config = spec.resolve_args(args)
    n = spec.spatial_dims
    if len(dims) != n + 2:
        return None
    kernel, stride = as_tuple(config["kernel_size"], n), as_tuple(config["stride"], n)
    dilation = as_tuple(config["dilation"], n)
    padding = config["padding"]
    out = [dims[0], config["out_channels"]]
    for size, k, st, d, i in zip(dims[2:], kernel, stride, dilation, range(n)):
        pad = 0 if padding == "valid" else None if padding == "same" else as_tuple(padding,
                                                                                   n)[i]
        if (padding == "same" or (k == 1 and pad == 0)) and st == 1:
            out.append(size)
        elif pad == 0 and d == 1 and k == st and isinstance(size, _Size):
            out.append(size.scaled(1, st))
        else:
            return None
    return out


def _flat_tensors(lifter: _Lifter, value: Any) -> Any:
    """A returned layer tuple (``return self.rnn(x)``) as its tensors, in order."""
    if isinstance(value, _Tuple):
        value = tuple(lifter.tuple_item(value, k) for k in range(len(value.items)))
    if isinstance(value, (list, tuple)):
        flat: list[Any] = []
        for item in value:
            item = _flat_tensors(lifter, item)
            flat.extend(item if isinstance(item, tuple) else [item])
        return tuple(flat)
    return value


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
