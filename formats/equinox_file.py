"""``format: equinox``: a Python file holding an ``equinox.Module``, lifted into the IR.

The file defines an ``equinox.Module`` subclass named as the network id (or the only one),
constructible without arguments or with a ``key`` (a ``jax.random`` key, from ``seed``).
Its ``__call__`` takes the network inputs as arrays.  The reader traces the call to a
jaxpr (JAX's own graph of primitives) for example inputs of fixed shapes and lifts every
primitive into catalogue functions, as the ONNX importer lifts ONNX ops: the module's
arrays become trainable free parameters named by their attribute path
(``layers[0].weight`` -> ``layers_0.weight``), convolutions become ``Conv1d/2d/3d``
layers (equinox stores kernels in PyTorch's layout).  A primitive with no IR form stops
the reading with a message naming it.

The input shapes come from ``input_shapes=`` or from the file: a module-level
``INPUT_SHAPES`` (one shape per input) or ``input_shapes`` attribute of the class.  A jaxpr
is traced for those shapes, so shapes that reshapes and broadcasts fix stay fixed.

Importing the file runs it, so reading refuses unless ``trust_code=True`` (the check of
:func:`petab_sciml.formats.pytorch_file.check_trust` comes before the file is opened).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.errors import NetworkError, require
from petab_sciml.formats.graph_building import reachable
from petab_sciml.formats.pytorch_file import _import_file, check_trust
from petab_sciml.network import ID_PATTERN, Network, unique_node_name
from petab_sciml.plugins import NetworkFormat

__all__ = ["read", "read_with_parameters", "network_from_equinox", "FORMAT"]


_UNARY = {"exp": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid", "sqrt": "sqrt",
          "abs": "abs", "neg": "neg", "sign": "sign", "sin": "sin", "cos": "cos",
          "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "round"}
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow",
           "max": "maximum", "min": "minimum", "gt": "gt", "lt": "lt", "ge": "ge",
           "le": "le", "eq": "eq"}
_REDUCE = {"reduce_sum": "sum", "reduce_max": "amax", "reduce_min": "amin"}
_INLINE = {"pjit": "jaxpr", "closed_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
           "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
           "remat": "jaxpr", "checkpoint": "jaxpr", "jit": "jaxpr"}
"""Primitives that call a sub-jaxpr: lifted by lifting that jaxpr in place."""
_IDENTITY = {"stop_gradient", "copy", "copy_p", "optimization_barrier"}


def _path_id(path: Any) -> str:
    """``layers[0].weight`` (a pytree key path) -> ``layers_0.weight`` (group.array)."""
    import jax

    parts = []
    for key in path:
        if isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(str(key.name))
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        else:
            parts.append(str(key))
    parts = [re.sub(r"\W", "_", p) for p in parts] or ["array"]
    group = "_".join(parts[:-1]) or "params"
    if group[0].isdigit():
        group = f"p_{group}"
    array = parts[-1] if not parts[-1][0].isdigit() else f"a_{parts[-1]}"
    return f"{group}.{array}"


class _Not:
    """A negated comparison (``ne``, ``not``): where-conditions swap their cases."""

    def __init__(self, ref: str):
        self.ref = ref


class _Lifter:
    """Lifts the equations of a jaxpr into IR nodes."""

    def __init__(self, source: object | None):
        self.source = None if source is None else str(source)
        self.nodes: list[dict[str, Any]] = []
        self.layers: list[dict[str, Any]] = []
        self.free: dict[str, dict[str, Any]] = {}
        self.params: dict[str, dict[str, np.ndarray]] = {}
        self.taken: set[str] = set()
        self.where = ""

    def error(self, message: str) -> NetworkError:
        return NetworkError(message, file=self.source, entry=self.where or None)

    def fresh(self, base: str) -> str:
        return unique_node_name(base, self.taken)

    def emit(self, function: str, args: list[Any], kwargs: Mapping[str, Any] | None = None
             ) -> str:
        name = self.fresh(function)
        self.nodes.append({"name": name, "op": "call_function", "target": function,
                           "args": list(args), "kwargs": dict(kwargs or {})})
        return name

    def free_parameter(self, pid: str, value: np.ndarray, trainable: bool) -> str:
        group, array = pid.split(".", 1)
        while pid in self.free:
            array += "_"
            pid = f"{group}.{array}"
        self.free[pid] = {"id": pid, "shape": list(value.shape), "trainable": trainable}
        self.params.setdefault(group, {})[array] = np.asarray(value)
        name = self.fresh(pid.replace(".", "_"))
        self.nodes.append({"name": name, "op": "get_attr", "target": pid})
        return name

    def constant(self, value: Any) -> Any:
        """A number as itself; an array as a constant (non-trainable) free parameter."""
        value = np.asarray(value)
        if value.ndim == 0:
            return value.item() if value.dtype.kind != "b" else bool(value)
        k = len([p for p in self.free if p.startswith("constants.")])
        return self.free_parameter(f"constants.c{k}", value.astype(np.float32), False)

    # ------------------------------------------------------------------ jaxpr
    def run(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        env: dict[Any, Any] = {}
        for var, value in zip(jaxpr.constvars, consts):
            env[var] = self.constant(value)
        for var, value in zip(jaxpr.invars, args):
            env[var] = value

        def read(v: Any) -> Any:
            if type(v).__name__ == "Literal":
                return self.constant(v.val)
            return env[v]

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            self.where = f"jaxpr primitive {name!r}"
            ins = [read(v) for v in eqn.invars]
            outs = self.equation(eqn, name, ins)
            for var, value in zip(eqn.outvars, outs):
                env[var] = value
        return [read(v) for v in jaxpr.outvars]

    def equation(self, eqn: Any, name: str, ins: list[Any]) -> list[Any]:
        p = eqn.params
        aval = eqn.outvars[0].aval if eqn.outvars else None
        if name in _INLINE:
            inner = p.get(_INLINE[name]) or p.get("jaxpr") or p.get("call_jaxpr")
            if inner is None:
                raise self.error(f"{name} without a jaxpr to inline")
            closed = hasattr(inner, "jaxpr")
            return self.run(inner.jaxpr if closed else inner,
                            inner.consts if closed else [], ins)
        if name in _IDENTITY:
            return ins[: len(eqn.outvars)]
        ins = [self.tensor(v, eqn) if isinstance(v, _Not) and name not in (
            "select_n", "not") else v for v in ins]
        if all(not isinstance(v, (str, _Not)) for v in ins) and name not in ("iota",):
            return [self.fold(eqn, ins)]
        if name in _UNARY:
            return [self.emit(_UNARY[name], [ins[0]])]
        if name == "rsqrt":
            return [self.emit("div", [1.0, self.emit("sqrt", [ins[0]])])]
        if name == "log1p":
            return [self.emit("log", [self.emit("add", [ins[0], 1.0])])]
        if name == "expm1":
            return [self.emit("sub", [self.emit("exp", [ins[0]]), 1.0])]
        if name == "integer_pow":
            return [self.emit("pow", [ins[0], int(p["y"])])]
        if name == "square":
            return [self.emit("mul", [ins[0], ins[0]])]
        if name in _BINARY:
            a, b = ins
            if name == "max" and (a == 0.0 or b == 0.0) and not isinstance(a, bool):
                return [self.emit("relu", [b if a == 0.0 else a])]
            return [self.emit(_BINARY[name], [a, b])]
        if name == "ne":  # kept as a negated eq: select_n swaps its cases
            return [_Not(self.emit("eq", [ins[0], ins[1]]))]
        if name == "not":
            return [ins[0].ref if isinstance(ins[0], _Not) else _Not(ins[0])]
        if name == "select_n":
            if len(ins) != 3:
                raise self.error("select_n with more than two cases is not supported")
            if isinstance(ins[0], _Not):
                return [self.emit("where", [ins[0].ref, ins[1], ins[2]])]
            return [self.emit("where", [ins[0], ins[2], ins[1]])]
        if name == "convert_element_type":
            return [ins[0] if np.dtype(p["new_dtype"]).kind == "f" else self.error_value(
                "casting to a non-float type")]
        if name == "dot_general":
            return [self.dot_general(p, ins, eqn)]
        if name == "broadcast_in_dim":
            return [self.broadcast(ins[0], eqn, p)]
        if name == "reshape":
            return [self.emit("reshape", [ins[0]], {"shape": list(p["new_sizes"])})]
        if name == "squeeze":
            return [self.emit("squeeze", [ins[0]], {"dim": list(p["dimensions"])})]
        if name == "expand_dims":
            y = ins[0]
            for d in sorted(p["dimensions"]):
                y = self.emit("unsqueeze", [y], {"dim": int(d)})
            return [y]
        if name == "transpose":
            return [self.emit("permute", [ins[0]], {"dims": list(p["permutation"])})]
        if name in _REDUCE:
            return [self.emit(_REDUCE[name], [ins[0]], {"dim": list(p["axes"])})]
        if name == "concatenate":
            return [self.emit("cat", [[self.tensor(v, eqn) for v in ins]],
                              {"dim": int(p["dimension"])})]
        if name == "slice":
            strides = p.get("strides") or [None] * len(p["start_indices"])
            index = [{"slice": [int(a), int(b), None if s in (None, 1) else int(s)]}
                     for a, b, s in zip(p["start_indices"], p["limit_indices"], strides)]
            return [self.emit("getitem", [ins[0]], {"index": index})]
        if name == "cumsum":
            if p.get("reverse"):
                raise self.error("a reversed cumsum is not supported")
            return [self.emit("cumsum", [ins[0]], {"dim": int(p["axis"])})]
        if name == "conv_general_dilated":
            return [self.conv(eqn, p, ins)]
        del aval
        raise self.error(f"the jaxpr primitive {name!r} has no IR form (supported: "
                         f"{', '.join(sorted(SUPPORTED))})")

    def error_value(self, what: str) -> Any:
        raise self.error(f"{what} is not supported")

    def tensor(self, v: Any, eqn: Any) -> str:
        if isinstance(v, str):
            return v
        if isinstance(v, _Not):  # as a bool tensor: (eq as 1.0/0.0) < 0.5
            return self.emit("lt", [self.emit("where", [v.ref, 1.0, 0.0]), 0.5])
        return self.free_parameter(f"constants.c{len(self.free)}",
                                   np.asarray(v, np.float32), False)

    def fold(self, eqn: Any, ins: list[Any]) -> Any:
        """An equation on constants only, evaluated now."""
        values = eqn.primitive.bind(*[np.asarray(v) for v in ins], **eqn.params)
        if eqn.primitive.multiple_results:
            raise self.error(f"{eqn.primitive.name} on constants with several results")
        return self.constant(np.asarray(values))

    def broadcast(self, x: Any, eqn: Any, p: Mapping[str, Any]) -> Any:
        shape = tuple(int(d) for d in p["shape"])
        if not isinstance(x, str):  # a number: broadcasting is implicit
            return x
        dims = list(p["broadcast_dimensions"])
        in_shape = tuple(eqn.invars[0].aval.shape)
        aligned = [1] * len(shape)
        for k, d in enumerate(dims):
            aligned[d] = in_shape[k]
        y = x if tuple(aligned) == in_shape else self.emit("reshape", [x],
                                                           {"shape": aligned})
        if tuple(aligned) == shape:
            return y
        zeros = self.free_parameter(f"constants.c{len(self.free)}",
                                    np.zeros(shape, np.float32), False)
        return self.emit("add", [y, zeros])

    def dot_general(self, p: Mapping[str, Any], ins: list[Any], eqn: Any) -> str:
        (lc, rc), (lb, rb) = p["dimension_numbers"]
        if lb or rb or len(lc) != 1 or len(rc) != 1:
            raise self.error("dot_general with batch dimensions or several contracted "
                             "dimensions is not supported")
        a, b = (self.tensor(v, eqn) for v in ins)
        ra, rb_ = len(eqn.invars[0].aval.shape), len(eqn.invars[1].aval.shape)
        if lc[0] != ra - 1:
            if ra != 2:
                raise self.error("dot_general contracting a leading dimension of a "
                                 "tensor of rank > 2 is not supported")
            a = self.emit("transpose", [a], {"dim0": 0, "dim1": 1})
        if rb_ == 2 and rc[0] == 1:
            b = self.emit("transpose", [b], {"dim0": 0, "dim1": 1})
        elif rc[0] != 0:
            raise self.error("dot_general contracting a trailing dimension of a tensor "
                             "of rank > 2 is not supported")
        return self.emit("matmul", [a, b])

    def conv(self, eqn: Any, p: Mapping[str, Any], ins: list[Any]) -> str:
        """conv_general_dilated on N C spatial / O I spatial layouts -> ConvNd."""
        x, w = ins
        dn = p["dimension_numbers"]
        n = len(p["window_strides"])
        if tuple(dn.lhs_spec) != tuple(range(n + 2)) or \
                tuple(dn.rhs_spec) != tuple(range(n + 2)):
            raise self.error("convolutions in another layout than N, C, spatial and "
                             "O, I, spatial are not supported")
        if any(d != 1 for d in p["lhs_dilation"]):
            raise self.error("transposed (input-dilated) convolutions are not supported")
        weight_name = next((pid for pid, f in self.free.items() if
                            self.nodes_by_target(pid) == w), None)
        if weight_name is None or not self.free[weight_name]["trainable"]:
            raise self.error("a convolution whose kernel is not a parameter of the module "
                             "is not supported")
        group, array = weight_name.split(".", 1)
        kernel = self.params[group].pop(array)
        del self.free[weight_name]
        if not self.params[group]:
            del self.params[group]
        self.nodes = [node for node in self.nodes if node["name"] != w]
        pads = [tuple(int(v) for v in pair) for pair in p["padding"]]
        symmetric = all(lo == hi for lo, hi in pads)
        if not symmetric:
            flat = []
            for lo, hi in reversed(pads):
                flat += [lo, hi]
            x = self.emit("pad", [x], {"pad": flat})
        layer_id = group if ID_PATTERN.match(group) else "conv"
        k = 0
        taken = {layer["layer_id"] for layer in self.layers} | {f.split(".")[0] for f in
                                                                   self.free}
        base = layer_id
        while layer_id in taken:
            k += 1
            layer_id = f"{base}_{k}"
        groups = int(p["feature_group_count"])
        self.layers.append({"layer_id": layer_id, "layer_type": f"Conv{n}d", "args": {
            "in_channels": int(kernel.shape[1]) * groups, "out_channels": int(kernel.shape[0]),
            "kernel_size": list(kernel.shape[2:]), "stride": list(p["window_strides"]),
            "padding": [lo for lo, _ in pads] if symmetric else 0,
            "dilation": list(p["rhs_dilation"]), "groups": groups, "bias": False}})
        self.params.setdefault(layer_id, {})["weight"] = kernel
        name = self.fresh(layer_id)
        self.nodes.append({"name": name, "op": "call_module", "target": layer_id,
                           "args": [x]})
        return name

    def nodes_by_target(self, pid: str) -> str | None:
        for node in self.nodes:
            if node["op"] == "get_attr" and node["target"] == pid:
                return node["name"]
        return None


SUPPORTED = tuple(sorted({*_UNARY, *_BINARY, *_REDUCE, *_INLINE, *_IDENTITY, "rsqrt",
                          "log1p", "expm1", "integer_pow", "square", "select_n",
                          "convert_element_type", "dot_general", "broadcast_in_dim",
                          "reshape", "squeeze", "expand_dims", "transpose", "concatenate",
                          "slice", "cumsum", "conv_general_dilated", "ne", "not"}))
"""The jaxpr primitives the reader lifts."""


def network_from_equinox(module: Any, net_id: str, input_shapes: Sequence[Sequence[int]],
                         *, input_ids: Sequence[str] | None = None,
                         source: object | None = None
                         ) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """Lift an ``equinox.Module`` (called with arrays of ``input_shapes``) to the IR and
    its arrays ``{group: {array: ndarray}}``."""
    jax = require("jax", "jax")
    eqx = require("equinox", "jax")
    params, static = eqx.partition(module, eqx.is_array)
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = [leaf for _, leaf in leaves_with_paths]

    def call(leaves: list[Any], *xs: Any) -> Any:
        model = eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves), static)
        return model(*xs)

    # Trace in the module's own float dtype: with jax_enable_x64 on (a float64 JAX model
    # built earlier in the process turns it on), equinox creates float64 parameters, and
    # float32 inputs would not meet them (lax.conv_general_dilated requires equal dtypes).
    examples = [jax.ShapeDtypeStruct(tuple(s), _float_dtype(leaves))
                for s in input_shapes]
    try:
        closed = jax.make_jaxpr(call)(leaves, *examples)
    except Exception as exc:  # noqa: BLE001 - reported with the file
        raise NetworkError(f"tracing {net_id}(*inputs) for inputs of shapes "
                           f"{[list(s) for s in input_shapes]} failed: "
                           f"{type(exc).__name__}: {exc}", file=source) from None
    lifter = _Lifter(source)
    args: list[Any] = []
    for path, leaf in leaves_with_paths:
        args.append(lifter.free_parameter(_path_id(path), np.asarray(leaf), True))
    inputs = list(input_ids) if input_ids is not None else [
        f"input{k}" if len(input_shapes) > 1 else "input0" for k in range(len(input_shapes))]
    if len(inputs) != len(input_shapes):
        raise NetworkError(f"input_ids lists {len(inputs)} ids for {len(input_shapes)} "
                           "inputs", file=source, entry="input_ids")
    lifter.taken.update(inputs)
    lifter.nodes[:0] = [{"name": i, "op": "placeholder", "target": i} for i in inputs]
    args += inputs
    outs = lifter.run(closed.jaxpr, closed.consts, args)
    outs = [lifter.tensor(o, None) for o in outs]
    lifter.nodes.append({"name": "output", "op": "output", "target": "output",
                         "args": [outs] if len(outs) > 1 else [outs[0]]})
    used = {n["target"] for n in lifter.nodes if n["op"] == "get_attr"}
    free = [f for pid, f in lifter.free.items() if pid in used]
    network = Network.build(net_id, inputs, lifter.layers, _prune(lifter.nodes), free,
                            source=source)
    arrays = network.parameter_arrays()
    params_out = {g: {a: v for a, v in group.items() if a in arrays.get(g, {})}
                  for g, group in lifter.params.items()}
    return network, {g: a for g, a in params_out.items() if a}


def _float_dtype(leaves: Sequence[Any]) -> np.dtype:
    """The floating dtype of a module's parameters (float32 when it has none)."""
    floats = [np.dtype(leaf.dtype) for leaf in leaves
              if np.issubdtype(np.dtype(leaf.dtype), np.floating)]
    return np.result_type(*floats) if floats else np.dtype(np.float32)


def _prune(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes the output depends on (and the placeholders)."""
    live = reachable(nodes, ("output", "placeholder"), lambda n: _refs(n.get("args", [])))
    return [n for n in nodes if n["name"] in live]


def _refs(value: Any) -> list[str]:
    """The strings in ``value`` and its nested lists (the node names an arg may read)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [r for v in value for r in _refs(v)]
    return []


def _find_class(py_module: Any, net_id: str | None, path: Path) -> tuple[Any, str]:
    eqx = require("equinox", "jax")
    classes = {name: obj for name, obj in vars(py_module).items()
               if isinstance(obj, type) and issubclass(obj, eqx.Module)
               and obj.__module__ == py_module.__name__}
    if net_id is None:
        if len(classes) != 1:
            found = ", ".join(sorted(classes)) or "none"
            raise NetworkError("cannot tell which class is the network: pass the network id "
                               f"(equinox.Module subclasses defined here: {found})", file=path)
        net_id = next(iter(classes))
    cls = classes.get(net_id)
    if cls is None:
        found = ", ".join(sorted(classes)) or "none"
        raise NetworkError(f"the file defines no equinox.Module subclass named {net_id!r} "
                           f"(the network id); found: {found}", file=path, entry=net_id)
    return cls, net_id


def read_with_parameters(path: str | os.PathLike, *, trust_code: bool = False,
                         net_id: str | None = None,
                         input_shapes: Sequence[Sequence[int]] | None = None,
                         input_ids: Sequence[str] | None = None, seed: int = 0
                         ) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """``(network, {group: {array: ndarray}})`` of the equinox module ``net_id`` of a
    Python file.  Refuses (``UntrustedCodeError``) unless ``trust_code=True``."""
    path = Path(path)
    check_trust(path, trust_code=trust_code, what="Python file")
    jax = require("jax", "jax")
    if not path.is_file():
        raise NetworkError("no such file", file=path)
    py_module = _import_file(path)
    cls, net_id = _find_class(py_module, net_id, path)
    if not ID_PATTERN.match(net_id):
        raise NetworkError(f"network id must be a valid PEtab id, got {net_id!r}", file=path)
    shapes = input_shapes or getattr(cls, "input_shapes", None) or getattr(
        py_module, "INPUT_SHAPES", None)
    if not shapes:
        raise NetworkError("the input shapes are needed to trace an equinox module: define "
                           "INPUT_SHAPES = [(n, ...), ...] in the file (or an input_shapes "
                           "class attribute), or pass input_shapes", file=path, entry=net_id)
    try:
        takes_key = "key" in inspect.signature(cls).parameters
        module = cls(key=jax.random.PRNGKey(seed)) if takes_key else cls()
    except Exception as exc:  # noqa: BLE001 - reported with the file
        raise NetworkError(f"{net_id}() failed (the class must be constructible without "
                           f"arguments, or with key=): {type(exc).__name__}: {exc}",
                           file=path, entry=net_id) from None
    return network_from_equinox(module, net_id, shapes, input_ids=input_ids, source=path)


def read(path: str | os.PathLike, *, trust_code: bool = False, net_id: str | None = None,
         **options: Any) -> Network:
    """The network IR of an equinox module in a Python file (refuses without trust)."""
    network, _ = read_with_parameters(path, trust_code=trust_code, net_id=net_id, **options)
    return network


FORMAT = NetworkFormat(name="equinox", extensions=(), read=read, write=None, runs_code=True)
