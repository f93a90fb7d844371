"""NNEF (Khronos Neural Network Exchange Format) <-> network IR.

Reading (``nnef.load_graph`` on a model folder, a ``graph.nnef`` file or a ``.tgz``
archive of a folder) lifts the NNEF graph:

* ``linear`` -> ``Linear``; ``conv`` / ``deconv`` -> ``ConvNd`` / ``ConvTransposeNd``
  (bias stored as ``[1, C]``; asymmetric padding of ``deconv`` is ``output_padding``);
* ``max_pool`` / ``avg_pool`` -> ``MaxPoolNd`` / ``AvgPoolNd`` (size, stride, padding and
  dilation include the batch and channel dimensions; asymmetric padding is PyTorch's
  ``ceil_mode`` where the output sizes agree; the ``border`` decides
  ``count_include_pad``);
* ``batch_normalization`` -> ``BatchNormNd`` with the statistics as non-trainable
  buffers; ``mean_variance_normalization`` (nnef_tools' fragment) -> ``InstanceNormNd``;
* ``reshape`` (0 copies the dimension) -> ``flatten`` / ``reshape``; activations, arithmetic,
  reductions, ``transpose``, ``squeeze``, ``concat``, ``slice`` ... -> catalogue functions;
  the ``erf`` expansion of GELU and the ``sign * relu(abs)`` identity are recognised.

Names come, in order of preference, from a tensor-mapping JSON as written by
``nnef_tools.convert --tensor-mapping`` (source names such as ``layer1.weight`` and ONNX
scopes such as ``/layer1/Conv_output_0``), from variable labels (torch-to-nnef and our
writer keep module paths: ``layer1.weight``), else from the NNEF tensor names.

Writing gives ``graph.nnef`` plus one ``.dat`` file per array (label ``layer.array``)
that ``nnef.load_graph`` reads back.  NNEF has no place for what is not computation in
inference mode (dropout, input ids, layer-vs-function, constructor arguments as written):
the writer also puts a ``petab_sciml.json`` beside the graph with the IR, which the
reader uses while ``graph.nnef`` is unchanged (its SHA-256 is recorded), so IR -> NNEF ->
IR is identical.  Other NNEF tools ignore that file.

nnef (and torch, for default parameters and shapes when writing) are imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.catalogue import FUNCTIONS, LAYERS, REQUIRED
from petab_sciml.errors import NetworkError, require
from petab_sciml.network import FreeParameter, Network, Ref, unique_node_name
from petab_sciml.plugins import NetworkFormat

__all__ = ["read", "read_with_parameters", "write", "FORMAT", "METADATA_FILE"]

METADATA_FILE = "petab_sciml.json"
GRAPH_FILE = "graph.nnef"
_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GENERIC_LABEL = re.compile(r"^variable\d*$")
_KEYWORDS = {"version", "extension", "fragment", "graph", "tensor", "integer", "scalar",
             "logical", "string", "true", "false", "for", "in", "if", "else", "yield",
             "length_of", "shape_of", "range_of"}
_TENSOR_KINDS = ("tensor", "tensor|number", "tensors")
_ARCHIVES = (".tgz", ".tar.gz", ".tar")

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


# ============================================================================= reading
@contextmanager
def _model_folder(path: Path):
    """The model folder of ``path`` (a folder, a graph.nnef file or an archive)."""
    if path.is_dir():
        yield path, True
        return
    if not path.is_file():
        raise NetworkError("no such file or folder", file=path)
    name = path.name.lower()
    if name.endswith(_ARCHIVES) or (name.endswith(".nnef") and tarfile.is_tarfile(path)):
        tmp = Path(tempfile.mkdtemp(prefix="petab_sciml_nnef_"))
        try:
            _extract(path, tmp)
            graphs = sorted(tmp.rglob(GRAPH_FILE))
            if not graphs:
                raise NetworkError(f"the archive holds no {GRAPH_FILE}", file=path)
            yield graphs[0].parent, True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    yield path, False


def _extract(archive: Path, target: Path) -> None:
    """Extract regular files and folders only, never outside ``target``."""
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                dest = (target / member.name).resolve()
                if not str(dest).startswith(str(target.resolve())):
                    raise NetworkError(f"archive member {member.name!r} points outside the "
                                       "archive", file=archive)
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(member)
                    if src is not None:
                        dest.write_bytes(src.read())
    except tarfile.TarError as exc:
        raise NetworkError(f"not a readable archive: {exc}", file=archive) from None


def _load_graph(nnef: Any, folder: Path, is_folder: bool, source: Path) -> Any:
    try:
        if is_folder:
            return nnef.load_graph(str(folder), load_variables=True)
        return nnef.load_graph(str(folder))
    except (nnef.Error, OSError, ValueError) as exc:
        raise NetworkError(f"cannot read the NNEF model: {exc}", file=source) from None


def _infer_shapes(nnef: Any, graph: Any) -> dict[str, list[int]]:
    from nnef import shapes as nnef_shapes

    custom = {
        "erf": nnef_shapes.unary_shape,
        "mean_variance_normalization": lambda input, *args, **kwargs: input,
    }
    try:
        nnef.infer_shapes(graph, custom_shapes=custom)
    except Exception:  # noqa: BLE001 - shapes are a help, not a requirement: keep those known
        pass
    shapes = {name: list(t.shape) for name, t in graph.tensors.items() if t.shape is not None}
    for op in graph.operations:
        if op.name == "external":
            shapes.setdefault(str(op.outputs["output"]), list(op.attribs["shape"]))
    return shapes


def _source_names(mapping: Mapping[str, str] | None) -> dict[str, str]:
    """NNEF tensor name -> source name (inverse of a tensor-mapping JSON)."""
    out: dict[str, str] = {}
    for src, dst in (mapping or {}).items():
        if isinstance(src, str) and isinstance(dst, str):
            out.setdefault(dst, src)
    return out


def _scope_path(source: str) -> str | None:
    """Module path of an ONNX value name ``/block/block.0/Gemm_output_0`` (``block.0``)."""
    parts = [p for p in source.split("/") if p]
    if len(parts) >= 2 and re.search(r"_output_\d+$", parts[-1]):
        return parts[-2]
    return None


def _module_path_id(path: str) -> str:
    from petab_sciml.formats.torch_fx import module_path_id

    return module_path_id(path)


@dataclass
class _Array:
    """A variable or constant, possibly unsqueezed or reshaped, not yet a graph value."""

    data: np.ndarray
    base: str
    """NNEF tensor name of the variable."""
    ops: tuple[tuple[str, Any], ...] = ()
    constant: bool = False


@dataclass(frozen=True)
class _T:
    name: str


@dataclass(frozen=True)
class _Marker:
    """A partial pattern (``sign(x)``, ``erf(x / sqrt 2)`` ...) awaiting its completion."""

    kind: str
    of: Any
    node: str = ""


@dataclass
class _Lifter:
    nnef: Any
    graph: Any
    source: Path
    shapes: dict[str, list[int]]
    names: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    params: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    free: dict[str, FreeParameter] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    env: dict[str, Any] = field(default_factory=dict)
    var_target: dict[str, str] = field(default_factory=dict)
    attr_nodes: dict[str, _T] = field(default_factory=dict)
    variables: dict[str, tuple[np.ndarray, bool]] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    missing_data: list[str] = field(default_factory=list)
    where: str = ""

    def error(self, message: str) -> NetworkError:
        return NetworkError(message, file=self.source, entry=self.where or None)

    # ------------------------------------------------------------------ naming
    def fresh(self, base: str) -> str:
        return unique_node_name(base, self.taken)

    def source_name(self, tensor: str) -> str | None:
        """The source name of an NNEF tensor (mapping JSON, else a non-generic label)."""
        if tensor in self.names:
            return self.names[tensor]
        label = self.labels.get(tensor)
        if label and not _GENERIC_LABEL.match(label):
            return label.replace("/", ".")
        return None

    def layer_id(self, op_output: str, arrays: Sequence[str]) -> str:
        """An id for the layer computing ``op_output`` with variables ``arrays``."""
        candidates = []
        for var in arrays:
            src = self.source_name(var)
            if src and "." in src:
                candidates.append(src.rsplit(".", 1)[0])
        src = self.names.get(op_output)
        scope = _scope_path(src) if src else None
        if scope:
            candidates.append(scope)
        candidates.append(op_output)
        for path in candidates:
            ident = _module_path_id(path)
            if ident not in self.layers and not any(p.split(".")[0] == ident
                                                    for p in self.free):
                return ident
        base = _module_path_id(candidates[-1])
        i = 1
        while f"{base}_{i}" in self.layers:
            i += 1
        return f"{base}_{i}"

    # ------------------------------------------------------------------ values
    def value(self, v: Any) -> Any:
        if isinstance(v, self.nnef.Identifier) or (isinstance(v, str) and v in self.env):
            if v not in self.env:
                raise self.error(f"tensor {v!r} is used before it is defined")
            return self.env[v]
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, (bool, int, float)):
            return v
        raise self.error(f"unsupported argument {v!r}")

    def tensor(self, value: Any, what: str) -> Any:
        """``value`` as something a catalogue function accepts (tensor or number)."""
        if isinstance(value, _T) or isinstance(value, (int, float)) and not isinstance(
                value, bool):
            return value
        if isinstance(value, _Array):
            if value.data.size == 1 and not value.ops and value.constant:
                return float(value.data.reshape(()))
            return self.materialize(value)
        if isinstance(value, _Marker):
            raise self.error(f"{what}: the {value.kind} pattern is used in an unsupported "
                             "way")
        raise self.error(f"{what}: expected a tensor, got {value!r}")

    def materialize(self, array: _Array) -> _T:
        """A get_attr node of the array's variable (then its unsqueeze/reshape ops)."""
        target = self.var_target.get(array.base)
        if target is None:
            target = self.free_target(array.base)
        if target not in self.attr_nodes:
            self.attr_nodes[target] = self.emit("get_attr", target, [],
                                                base=target.replace(".", "_"))
        node: Any = self.attr_nodes[target]
        for op, arg in array.ops:
            if op == "unsqueeze":
                for axis in sorted(arg):
                    node = self.call("unsqueeze", {"input": node, "dim": axis})
            elif op == "reshape":
                node = self.call("reshape", {"input": node, "shape": list(arg)})
            elif op == "squeeze":
                node = self.call("squeeze", {"input": node, "dim": list(arg)})
        return node

    def free_target(self, var: str) -> str:
        from petab_sciml.formats.torch_fx import ROOT_GROUP

        src = self.source_name(var)
        if src and "." in src:
            group, array = src.rsplit(".", 1)
            group = _module_path_id(group)
        else:
            group, array = ROOT_GROUP, re.sub(r"\W", "_", src or var)
        if not _ID.match(array):
            array = f"v_{array}"
        base_group = group
        i = 0
        while group in self.layers or f"{group}.{array}" in self.free:
            i += 1
            group = f"{base_group}_{i}"
        target = f"{group}.{array}"
        data = self.var_data(var)
        constant = self.var_constant(var)
        self.free[target] = FreeParameter(target, tuple(data.shape), not constant)
        self.params.setdefault(group, {})[array] = data
        self.var_target[var] = target
        return target

    def var_data(self, var: str) -> np.ndarray:
        return self.variables[var][0]

    def var_constant(self, var: str) -> bool:
        return self.variables[var][1]

    def array(self, value: Any, what: str) -> _Array | None:
        """``value`` as an array (None for a literal 0.0 bias)."""
        if isinstance(value, _Array):
            return value
        raise self.error(f"{what} must be a variable, got {value!r}")

    def claim(self, array: _Array, layer_id: str, name: str, shape: Sequence[int]) -> None:
        """Make ``array`` the layer's array ``name`` (reshaped to ``shape``)."""
        data = np.asarray(array.data)
        if data.size != math.prod(shape):
            raise self.error(f"{name} has {data.size} values; the layer needs shape "
                             f"{tuple(shape)}")
        target = f"{layer_id}.{name}"
        previous = self.var_target.get(array.base)
        if previous is not None and previous != target:
            raise self.error(f"variable {array.base!r} is used by two layers or as a free "
                             "parameter and a layer array")
        self.var_target[array.base] = target
        self.params.setdefault(layer_id, {})[name] = data.reshape(tuple(shape)).copy()

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
        raise self.error(f"unsupported value {value!r}")

    def emit(self, op: str, target: str, args: list[Any], kwargs: dict[str, Any] | None = None,
             base: str | None = None) -> _T:
        name = self.fresh(base or target)
        self.nodes.append({"name": name, "op": op, "target": target,
                           "args": [self.ir(a) for a in args],
                           "kwargs": {k: self.ir(v) for k, v in (kwargs or {}).items()}})
        return _T(name)

    def call(self, function: str, values: Mapping[str, Any], base: str | None = None) -> _T:
        spec = FUNCTIONS[function]
        values = dict(values)
        for p in spec.params:
            if p.name in values and p.kind in ("tensor", "tensor|number"):
                values[p.name] = self.tensor(values[p.name], function)
            elif p.name in values and p.kind == "tensors":
                values[p.name] = [self.tensor(v, function) for v in values[p.name]]
        last = max((i for i, p in enumerate(spec.params)
                    if p.name in values and (p.kind in _TENSOR_KINDS or p.default is REQUIRED)),
                   default=-1)
        args, kwargs = [], {}
        for i, p in enumerate(spec.params):
            if i <= last:
                args.append(values.get(p.name, p.default))
            elif p.name in values and values[p.name] != p.default:
                kwargs[p.name] = values[p.name]
        return self.emit("call_function", function, args, kwargs, base=base or function)

    def shared(self, arrays: Sequence[Any]) -> str | None:
        """The layer that already owns all of ``arrays`` (a layer applied twice)."""
        owners = set()
        for a in arrays:
            if isinstance(a, _Array):
                target = self.var_target.get(a.base)
                owners.add(target.split(".")[0] if target else None)
        if len(owners) == 1:
            owner = owners.pop()
            return owner if owner in self.layers else None
        return None

    def reuse(self, layer_id: str, layer_type: str, args: dict[str, Any],
              inputs: Sequence[Any], node_name: str) -> _T:
        """Call an existing layer again (its arguments must agree)."""
        known = self.layers[layer_id]
        spec = LAYERS[layer_type]
        same = known["layer_type"] == layer_type and spec.resolve_args(
            known["args"]) == spec.resolve_args(args)
        if not same:
            raise self.error(f"variables of layer {layer_id!r} are used by a different "
                             "operation")
        tensors = [self.tensor(x, layer_type) for x in inputs]
        return self.emit("call_module", layer_id, tensors, base=node_name)

    def add_layer(self, layer_id: str, layer_type: str, args: dict[str, Any],
                  inputs: Sequence[Any], node_name: str) -> _T:
        spec = LAYERS[layer_type]
        try:
            config = spec.resolve_args(args, file=self.source, entry=f"layer {layer_id!r}")
        except NetworkError as exc:
            raise self.error(f"cannot express this as {layer_type}: {exc.message}") from None
        self.layers[layer_id] = {"layer_id": layer_id, "layer_type": layer_type,
                                 "args": {a.name: args[a.name] for a in spec.args
                                          if a.name in args}}
        for name in spec.array_shapes(config):
            arrays = self.params.get(layer_id, {})
            if name not in arrays:
                if name == "num_batches_tracked":
                    self.params.setdefault(layer_id, {})[name] = np.zeros((), np.int64)
                else:  # pragma: no cover - handlers claim every array
                    raise self.error(f"internal: array {name!r} of {layer_type} not set")
        tensors = [self.tensor(x, layer_type) for x in inputs]
        return self.emit("call_module", layer_id, tensors, base=node_name)

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        for op in self.graph.operations:
            outputs = list(op.outputs.values())
            self.where = f"operation {op.name} -> {', '.join(map(str, outputs))}"
            handler = _OPS.get(op.name)
            if handler is None:
                raise self.error(f"NNEF operation {op.name!r} is not supported (supported: "
                                 f"{', '.join(sorted(_OPS))})")
            result = handler(self, op)
            if len(outputs) == 1:
                self.env[outputs[0]] = result
            else:
                for name, value in zip(outputs, result):
                    self.env[name] = value
        self.where = ""

    def shape(self, tensor: Any) -> list[int] | None:
        if isinstance(tensor, str):
            return self.shapes.get(tensor)
        return None


# ----------------------------------------------------------------------------- op handlers
def _input(lf: _Lifter, op: Any, name: str) -> Any:
    return lf.value(op.inputs[name])


def _rank(lf: _Lifter, op: Any, name: str = "input") -> int | None:
    shape = lf.shape(op.inputs.get(name))
    return None if shape is None else len(shape)


def _out(op: Any) -> str:
    return str(next(iter(op.outputs.values())))


def _external(lf: _Lifter, op: Any) -> _T:
    name = _out(op)
    src = lf.names.get(name)
    node = lf.fresh(src if src and _ID.match(src) else name)
    lf.nodes.append({"name": node, "op": "placeholder", "target": node})
    lf.placeholders.append(node)
    return _T(node)


def _variable(lf: _Lifter, op: Any) -> _Array:
    name = _out(op)
    tensor = lf.graph.tensors[name]
    lf.labels[name] = op.attribs.get("label", name)
    data = tensor.data
    if data is None:
        data = np.zeros(op.attribs["shape"], np.float32)
        lf.missing_data.append(name)
    data = np.asarray(data)
    if data.dtype == np.float64:
        data = data.astype(np.float32)
    lf.variables[name] = (data, False)
    return _Array(data, name)


def _constant(lf: _Lifter, op: Any) -> Any:
    shape = list(op.attribs["shape"])
    value = list(op.attribs["value"])
    if math.prod(shape) in (0, 1) and len(value) == 1 and not shape:
        return float(value[0]) if isinstance(value[0], (int, float)) else value[0]
    data = np.asarray(value, np.float32)
    data = np.broadcast_to(data, shape).copy() if data.size == 1 else data.reshape(shape)
    name = _out(op)
    lf.labels[name] = name
    lf.variables[name] = (data, True)
    return _Array(data, name, constant=True)


def _copy(lf: _Lifter, op: Any) -> Any:
    return _input(lf, op, "x" if "x" in op.inputs else next(iter(op.inputs)))


def _cast(lf: _Lifter, op: Any) -> Any:
    value = _input(lf, op, next(iter(op.inputs)))
    return float(value) if isinstance(value, (int, float)) and not isinstance(
        value, bool) else value


def _unary(function: str):
    def handler(lf: _Lifter, op: Any) -> _T:
        x = _input(lf, op, next(iter(op.inputs)))
        return lf.call(function, {"input": x}, base=_out(op))

    return handler


def _relu(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    if isinstance(x, _Marker) and x.kind == "abs":
        return _Marker("relu_abs", x.of, lf.call("relu", {"input": _T(x.node)},
                                                     base=_out(op)).name)
    return lf.call("relu", {"input": x}, base=_out(op))


def _abs(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "x")
    node = lf.call("abs", {"input": x}, base=_out(op))
    return _Marker("abs", x, node.name) if isinstance(x, _T) else node


def _sign(lf: _Lifter, op: Any) -> _Marker:
    return _Marker("sign", _input(lf, op, "x"))


def _erf(lf: _Lifter, op: Any) -> _Marker:
    x = _input(lf, op, "x")
    if isinstance(x, _Marker) and x.kind == "div_sqrt2":
        return _Marker("erf", x.of)
    raise lf.error("erf is supported only as part of GELU: x * (erf(x / sqrt(2)) + 1) / 2")


def _plain(lf: _Lifter, value: Any) -> Any:
    """A marker used as an ordinary value: its computed node (abs, relu(abs))."""
    if isinstance(value, _Marker) and value.node:
        return _T(value.node)
    return value


def _binary(function: str):
    def handler(lf: _Lifter, op: Any) -> Any:
        x, y = _input(lf, op, "x"), _input(lf, op, "y")
        special = _patterns(lf, function, x, y)
        if special is not None:
            return special
        x, y = _plain(lf, x), _plain(lf, y)
        if function in ("min", "max"):
            bound, other = (y, x) if isinstance(y, (int, float)) else (x, y)
            if not isinstance(bound, (int, float)):
                raise lf.error(f"{function} of two tensors is not supported (only with a "
                               "number, as a clamp)")
            key = "max" if function == "min" else "min"
            return lf.call("clamp", {"input": other, key: float(bound)}, base=_out(op))
        return lf.call(function, {"input": x, "other" if function != "pow" else "exponent": y},
                       base=_out(op))

    return handler


def _is_number(value: Any, target: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(
        float(value) - target) <= 1e-6 * max(1.0, abs(target))


def _patterns(lf: _Lifter, function: str, x: Any, y: Any) -> Any:
    """Partial patterns: sign(a) * relu(abs(a)) = a; x * (erf(x/sqrt 2) + 1) * 0.5 = gelu."""
    pairs = [(x, y), (y, x)] if function in ("mul", "add") else [(x, y)]
    for a, b in pairs:
        if function == "div" and isinstance(a, _T) and _is_number(b, math.sqrt(2.0)):
            return _Marker("div_sqrt2", a)
        if function == "mul" and isinstance(a, _T) and _is_number(b, 1 / math.sqrt(2.0)):
            return _Marker("div_sqrt2", a)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "sign" and isinstance(
                b, _Marker) and b.kind in ("abs", "relu_abs") and b.of == a.of:
            return a.of
        if function == "add" and isinstance(a, _Marker) and a.kind == "erf" and _is_number(b, 1):
            return _Marker("erf1", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1" and b == a.of:
            return _Marker("gelu2", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1" and _is_number(
                b, 0.5):
            return _Marker("erf1_half", a.of)
        if function == "mul" and isinstance(a, _Marker) and a.kind == "erf1_half" and b == a.of:
            return lf.call("gelu", {"input": a.of})
        if function == "mul" and isinstance(a, _Marker) and a.kind == "gelu2" and _is_number(
                b, 0.5):
            return lf.call("gelu", {"input": a.of})
        if function == "div" and isinstance(a, _Marker) and a.kind == "gelu2" and _is_number(
                b, 2.0):
            return lf.call("gelu", {"input": a.of})
    for v in (x, y):
        if isinstance(v, _Marker) and not v.node:
            raise lf.error(f"unsupported use of a {v.kind} pattern in {function}")
    return None


def _with_attrs(function: str, **attrs: str):
    def handler(lf: _Lifter, op: Any) -> _T:
        values = {"input": _plain(lf, _input(lf, op, "x"))}
        for nnef_name, name in attrs.items():
            if nnef_name in op.attribs:
                values[name] = float(op.attribs[nnef_name])
        return lf.call(function, values, base=_out(op))

    return handler


def _selu(lf: _Lifter, op: Any) -> _T:
    alpha, lam = op.attribs.get("alpha", 1.67326319), op.attribs.get("lambda", 1.05070102)
    if abs(alpha - 1.6732632423543772) > 1e-6 or abs(lam - 1.0507009873554805) > 1e-6:
        raise lf.error("selu with non-default alpha or lambda is not supported")
    return lf.call("selu", {"input": _input(lf, op, "x")}, base=_out(op))


def _softmax(lf: _Lifter, op: Any) -> _T:
    axes = list(op.attribs.get("axes", [1]))
    if len(axes) != 1:
        raise lf.error(f"softmax over several axes {axes} is not supported")
    return lf.call("softmax", {"input": _input(lf, op, "x"), "dim": axes[0]}, base=_out(op))


def _rcp(lf: _Lifter, op: Any) -> _T:
    return lf.call("div", {"input": 1.0, "other": _input(lf, op, "x")}, base=_out(op))


def _sqr(lf: _Lifter, op: Any) -> _T:
    return lf.call("pow", {"input": _input(lf, op, "x"), "exponent": 2.0}, base=_out(op))


def _rsqrt(lf: _Lifter, op: Any) -> _T:
    root = lf.call("sqrt", {"input": _input(lf, op, "x")})
    return lf.call("div", {"input": 1.0, "other": root}, base=_out(op))


def _clamp(lf: _Lifter, op: Any) -> _T:
    x, a, b = _input(lf, op, "x"), _input(lf, op, "a"), _input(lf, op, "b")
    for bound in (a, b):
        if isinstance(bound, _Array) and bound.data.size == 1:
            continue
        if not isinstance(bound, (int, float)):
            raise lf.error("clamp with tensor bounds is not supported")
    a = float(a.data.reshape(())) if isinstance(a, _Array) else float(a)
    b = float(b.data.reshape(())) if isinstance(b, _Array) else float(b)
    return lf.call("clamp", {"input": x, "min": a, "max": b}, base=_out(op))


def _axes(lf: _Lifter, axes: Sequence[int], rank: int | None) -> list[int]:
    out = []
    for a in axes:
        if a < 0:
            if rank is None:
                raise lf.error(f"negative axis {a} with an unknown rank")
            a += rank
        out.append(int(a))
    return out


def _reduce(function: str):
    def handler(lf: _Lifter, op: Any) -> _T:
        axes = _axes(lf, op.attribs["axes"], _rank(lf, op))
        return lf.call(function, {"input": _input(lf, op, "input"), "dim": axes,
                                  "keepdim": True}, base=_out(op))

    return handler


def _squeeze(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = _axes(lf, op.attribs["axes"], _rank(lf, op))
    if isinstance(x, _Array):
        return _Array(np.squeeze(x.data, tuple(axes)), x.base, x.ops + (("squeeze", axes),),
                      x.constant)
    if not axes:
        return x
    return lf.call("squeeze", {"input": x, "dim": axes if len(axes) > 1 else axes[0]},
                   base=_out(op))


def _unsqueeze(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = list(op.attribs["axes"])
    if isinstance(x, _Array):
        data = x.data
        for a in sorted(axes):
            data = np.expand_dims(data, a)
        return _Array(data, x.base, x.ops + (("unsqueeze", axes),), x.constant)
    out = x
    shape_out = lf.shape(_out(op))
    rank = None if shape_out is None else len(shape_out)
    for a in sorted(_axes(lf, axes, rank)):
        out = lf.call("unsqueeze", {"input": out, "dim": a})
    return out


def _transpose(lf: _Lifter, op: Any) -> _T:
    axes = list(op.attribs["axes"])
    rank = _rank(lf, op)
    if rank is not None and len(axes) < rank:
        axes += list(range(len(axes), rank))
    return lf.call("permute", {"input": _input(lf, op, "input"), "dims": axes}, base=_out(op))


def _reshape(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    shape = [int(s) for s in op.attribs["shape"]]
    start = int(op.attribs.get("axis_start", 0))
    count = int(op.attribs.get("axis_count", -1))
    in_shape = lf.shape(op.inputs["input"])
    if isinstance(x, _Array):
        out_shape = lf.shape(_out(op))
        if out_shape is None:
            raise lf.error("reshape of a variable needs known shapes")
        return _Array(x.data.reshape(out_shape), x.base, x.ops + (("reshape", out_shape),),
                      x.constant)
    if start != 0 or count != -1:
        if in_shape is None:
            raise lf.error("reshape with axis_start/axis_count needs known shapes")
        end = len(in_shape) if count == -1 else start + count
        if shape == [-1] and end > start:
            return lf.call("flatten", {"input": x, "start_dim": start, "end_dim": end - 1},
                           base=_out(op))
        shape = [0] * start + shape + [0] * (len(in_shape) - end)
        shape = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)] if end == len(
            in_shape) else None
        if shape is None:
            shape = lf.shape(_out(op))
        if shape is None:
            raise lf.error("cannot resolve this reshape")
    zeros = [i for i, s in enumerate(shape) if s == 0]
    k = len(zeros)
    if zeros == list(range(k)) and shape[k:] == [-1]:
        return lf.call("flatten", {"input": x, "start_dim": k}, base=_out(op))
    if k == 1 and -1 not in shape:
        shape[zeros[0]] = -1
    elif k:
        if in_shape is None:
            raise lf.error(f"reshape to {shape} (0 copies a dimension) needs known shapes")
        shape = [in_shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return lf.call("reshape", {"input": x, "shape": shape}, base=_out(op))


def _concat(function: str):
    def handler(lf: _Lifter, op: Any) -> _T:
        values = _input(lf, op, "values")
        axis = int(op.attribs["axis"])
        return lf.call(function, {"tensors": values, "dim": axis}, base=_out(op))

    return handler


def _slice(lf: _Lifter, op: Any) -> _T:
    x = _input(lf, op, "input")
    axes = list(op.attribs["axes"])
    begin, end = list(op.attribs["begin"]), list(op.attribs["end"])
    stride = list(op.attribs.get("stride") or [1] * len(axes))
    rank = _rank(lf, op)
    axes = _axes(lf, axes, rank)
    full = {"slice": [None, None, None]}
    index: list[Any] = [full] * (max(axes) + 1)
    for a, b, e, s in zip(axes, begin, end, stride):
        stop = None if (e == 0 and s == 1) else int(e)
        index[a] = {"slice": [int(b) if b else None, stop, None if s == 1 else int(s)]}
    return lf.call("getitem", {"input": x, "index": index}, base=_out(op))


def _matmul(lf: _Lifter, op: Any) -> _T:
    a, b = _input(lf, op, "A"), _input(lf, op, "B")
    a, b = lf.tensor(a, "matmul"), lf.tensor(b, "matmul")
    if op.attribs.get("transposeA"):
        a = lf.call("transpose", {"input": a, "dim0": -2, "dim1": -1})
    if op.attribs.get("transposeB"):
        b = lf.call("transpose", {"input": b, "dim0": -2, "dim1": -1})
    return lf.call("matmul", {"input": a, "other": b}, base=_out(op))


def _bias(lf: _Lifter, value: Any, layer_id: str, n: int) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != 0:
            raise lf.error(f"a constant bias {value} is not supported")
        return False
    array = lf.array(value, "bias")
    lf.claim(array, layer_id, "bias", (n,))
    return True


def _linear(lf: _Lifter, op: Any) -> _T:
    weight = lf.array(_input(lf, op, "filter"), "linear filter")
    if weight.data.ndim != 2:
        raise lf.error(f"linear filter must be 2-d, got shape {weight.data.shape}")
    out_f, in_f = weight.data.shape
    bias_value = _input(lf, op, "bias")
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, "Linear", {"in_features": int(in_f), "out_features": int(
            out_f), "bias": isinstance(bias_value, _Array)}, [_input(lf, op, "input")],
            _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", (out_f, in_f))
    has_bias = _bias(lf, bias_value, layer_id, out_f)
    return lf.add_layer(layer_id, "Linear", {"in_features": int(in_f),
                                            "out_features": int(out_f), "bias": has_bias},
                        [_input(lf, op, "input")], _out(op))


def _window(lf: _Lifter, op: Any, n: int) -> tuple[list[int], list[int], list[int], list[tuple]]:
    """Spatial stride, dilation (defaults 1) and padding pairs of a conv-like op."""
    stride = list(op.attribs.get("stride") or [1] * n)
    dilation = list(op.attribs.get("dilation") or [1] * n)
    padding = [tuple(p) for p in op.attribs.get("padding") or []]
    return stride, dilation, padding


def _auto_padding(sizes: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                  dilation: Sequence[int]) -> list[tuple[int, int]]:
    """NNEF's automatic padding (TF 'SAME': extra element at the end)."""
    out = []
    for size, k, s, d in zip(sizes, kernel, stride, dilation):
        total = max((math.ceil(size / s) - 1) * s + d * (k - 1) + 1 - size, 0)
        out.append((total // 2, total - total // 2))
    return out


def _conv(lf: _Lifter, op: Any) -> _T:
    weight = lf.array(_input(lf, op, "filter"), "conv filter")
    n = weight.data.ndim - 2
    if n not in (1, 2, 3):
        raise lf.error(f"conv with {n} spatial dimensions is not supported")
    stride, dilation, padding = _window(lf, op, n)
    kernel = list(weight.data.shape[2:])
    groups = int(op.attribs.get("groups", 1))
    in_shape = lf.shape(op.inputs["input"])
    out_ch, in_per_group = weight.data.shape[:2]
    if groups == 0:
        groups = int(in_shape[1]) if in_shape else out_ch
    if not padding:
        if stride == [1] * n:
            pad: Any = "same"
        elif in_shape is None:
            raise lf.error("automatic conv padding with strides needs known shapes")
        else:
            padding = _auto_padding(in_shape[2:], kernel, stride, dilation)
    if padding:
        if all(p == q for p, q in padding):
            pad = [p for p, _ in padding]
        elif stride == [1] * n and all(
                (p, q) == (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                for (p, q), k, d in zip(padding, kernel, dilation)):
            pad = "same"
        else:
            raise lf.error(f"asymmetric conv padding {padding} is not supported")
    border = op.attribs.get("border", "constant")
    modes = {"constant": "zeros", "ignore": "zeros", "reflect": "reflect",
             "replicate": "replicate"}
    if border not in modes:
        raise lf.error(f"conv border {border!r} is not supported")
    bias_value = _input(lf, op, "bias")
    padded = pad == "same" or any(pad)
    args = {"in_channels": int(in_per_group * groups), "out_channels": int(out_ch),
            "kernel_size": _one(kernel), "stride": _one(stride), "padding": _one(pad),
            "dilation": _one(dilation), "groups": groups,
            "bias": isinstance(bias_value, _Array),
            "padding_mode": modes[border] if padded else "zeros"}
    owner = lf.shared([weight, bias_value])
    if owner is not None:
        return lf.reuse(owner, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    _bias(lf, bias_value, layer_id, out_ch)
    return lf.add_layer(layer_id, f"Conv{n}d", args, [_input(lf, op, "input")], _out(op))


def _one(values: Any) -> Any:
    """``[3, 3]`` -> ``3`` (PyTorch's spelling when all sizes agree)."""
    if isinstance(values, list) and values and all(v == values[0] for v in values):
        return int(values[0])
    return [int(v) for v in values] if isinstance(values, list) else values


def _deconv(lf: _Lifter, op: Any) -> _T:
    weight = lf.array(_input(lf, op, "filter"), "deconv filter")
    n = weight.data.ndim - 2
    stride, dilation, padding = _window(lf, op, n)
    groups = int(op.attribs.get("groups", 1))
    if groups == 0:
        raise lf.error("deconv with groups=0 is not supported")
    if op.attribs.get("output_shape"):
        raise lf.error("deconv with an explicit output_shape is not supported")
    if not padding:
        padding = [(0, 0)] * n
    if any(q > p for p, q in padding):
        raise lf.error(f"deconv padding {padding} (right above left) is not supported")
    in_ch, out_per_group = weight.data.shape[:2]
    bias_value = _input(lf, op, "bias")
    layer_id = lf.layer_id(_out(op), [weight.base] + (
        [bias_value.base] if isinstance(bias_value, _Array) else []))
    lf.claim(weight, layer_id, "weight", weight.data.shape)
    has_bias = _bias(lf, bias_value, layer_id, out_per_group * groups)
    args = {"in_channels": int(in_ch), "out_channels": int(out_per_group * groups),
            "kernel_size": _one(list(weight.data.shape[2:])), "stride": _one(stride),
            "padding": _one([p for p, _ in padding]),
            "output_padding": _one([p - q for p, q in padding]), "groups": groups,
            "bias": has_bias, "dilation": _one(dilation)}
    return lf.add_layer(layer_id, f"ConvTranspose{n}d", args, [_input(lf, op, "input")],
                        _out(op))


def _torch_pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    num = size + 2 * p - d * (k - 1) - 1
    out = (-(-num // s) if ceil else num // s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool(kind: str):
    def handler(lf: _Lifter, op: Any) -> _T:
        size = list(op.attribs["size"])
        rank = len(size)
        in_shape = lf.shape(op.inputs["input"])
        stride = list(op.attribs.get("stride") or [1] * rank)
        dilation = list(op.attribs.get("dilation") or [1] * rank)
        padding = [tuple(p) for p in op.attribs.get("padding") or []]
        if in_shape is not None and rank > len(in_shape):
            # nnef_tools writes windows of rank N+2 for unbatched inputs: drop the extra
            extra = rank - len(in_shape)
            if any(v != 1 for v in size[:extra] + stride[:extra] + dilation[:extra]):
                raise lf.error(f"pool window {size} does not fit an input of shape {in_shape}")
            size, stride, dilation = size[extra:], stride[extra:], dilation[extra:]
            padding = padding[-len(in_shape):] if padding else padding
            rank = len(in_shape)
        border = op.attribs.get("border", "constant")
        if not padding:
            if in_shape is None:
                raise lf.error("automatic pool padding needs known shapes")
            padding = _auto_padding(in_shape, size, stride, dilation)
        trivial = 0  # leading dimensions the window does not touch (batch, channel)
        while trivial < rank and size[trivial] == 1 and stride[trivial] == 1 and (
                dilation[trivial] == 1 and tuple(padding[trivial]) == (0, 0)):
            trivial += 1
        first = max(min(trivial, 2), rank - 3)
        n = rank - first
        if first < 1 or n < 1 or any(
                v != 1 for v in size[:first] + stride[:first] + dilation[:first]) or any(
                tuple(p) != (0, 0) for p in padding[:first]):
            raise lf.error("pooling over the batch or channel dimension is not supported")
        k, s, d = size[first:], stride[first:], dilation[first:]
        pads = padding[first:]
        ceil = any(p != q for p, q in pads)
        if any(q < p for p, q in pads):
            raise lf.error(f"pool padding {pads} (left above right) is not supported")
        if ceil:
            if in_shape is None:
                raise lf.error("asymmetric pool padding (ceil_mode) needs known shapes")
            for size_i, ki, si, di, (p, q) in zip(in_shape[first:], k, s, d, pads):
                nnef_out = (size_i + p + q - di * (ki - 1) - 1) // si + 1
                if _torch_pool_out(size_i, ki, si, p, di, True) != nnef_out:
                    raise lf.error(f"asymmetric pool padding {pads} is not PyTorch's "
                                   "ceil_mode for these sizes")
        pad = [p for p, _ in pads]
        layer_stride = None if s == k else _one(s)
        if kind == "max":
            if border not in ("ignore", "constant") or (border == "constant" and any(
                    p or q for p, q in pads)):
                raise lf.error(f"max_pool with border {border!r} and padding is not supported "
                               "(PyTorch pads with -inf: border 'ignore')")
            args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                    "dilation": _one(d), "ceil_mode": ceil}
            layer_type = f"MaxPool{n}d"
        else:
            if any(v != 1 for v in d):
                raise lf.error("avg_pool with dilation is not supported")
            args = {"kernel_size": _one(k), "stride": layer_stride, "padding": _one(pad),
                    "ceil_mode": ceil}
            any_pad = any(p or q for p, q in pads)
            if border == "ignore":
                args["count_include_pad"] = not any_pad
            elif border == "constant":
                args["count_include_pad"] = True
                if ceil:  # NNEF counts the overhang as zeros: divide by the full window
                    if n == 1:
                        raise lf.error("avg_pool with a zero border and asymmetric padding "
                                       "has no 1-d PyTorch equivalent")
                    args["divisor_override"] = int(math.prod(k))
            else:
                raise lf.error(f"avg_pool border {border!r} is not supported")
            layer_type = f"AvgPool{n}d"
        layer_id = lf.layer_id(_out(op), [])
        return lf.add_layer(layer_id, layer_type, args, [_input(lf, op, "input")], _out(op))

    return handler


def _vector(lf: _Lifter, value: Any, what: str, channels: int | None) -> _Array | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    array = lf.array(value, what)
    if array.constant and array.data.size and np.all(array.data == array.data.flat[0]):
        return float(array.data.flat[0])
    if channels is not None and array.data.size != channels:
        raise lf.error(f"{what} has {array.data.size} values; expected {channels}")
    return array


def _norm_rank(lf: _Lifter, op: Any) -> int:
    rank = _rank(lf, op)
    if rank is None:
        raise lf.error("normalization needs the input rank (shapes could not be inferred)")
    return rank


def _batch_norm(lf: _Lifter, op: Any) -> _T:
    rank = _norm_rank(lf, op)
    n = {2: 1, 3: 1, 4: 2, 5: 3}.get(rank)
    if n is None:
        raise lf.error(f"batch_normalization of a rank-{rank} tensor is not supported")
    mean = lf.array(_input(lf, op, "mean"), "batch_normalization mean")
    var = lf.array(_input(lf, op, "variance"), "batch_normalization variance")
    c = int(mean.data.size)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    affine = isinstance(offset, _Array) or isinstance(scale, _Array)
    arrays = [a.base for a in (scale, offset, mean, var) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    lf.claim(mean, layer_id, "running_mean", (c,))
    lf.claim(var, layer_id, "running_var", (c,))
    if affine:
        for name, value in (("weight", scale), ("bias", offset)):
            if isinstance(value, _Array):
                lf.claim(value, layer_id, name, (c,))
            else:
                lf.params.setdefault(layer_id, {})[name] = np.full((c,), value, np.float32)
    elif scale != 1.0 or offset != 0.0:
        raise lf.error("batch_normalization with constant scale/offset other than 1/0")
    args = {"num_features": c, "eps": float(op.attribs["epsilon"]), "affine": affine,
            "track_running_stats": True}
    return lf.add_layer(layer_id, f"BatchNorm{n}d", args, [_input(lf, op, "input")], _out(op))


def _mvn(lf: _Lifter, op: Any) -> _T:
    rank = _norm_rank(lf, op)
    axes = _axes(lf, op.attribs["axes"], rank)
    n = len(axes)
    if n not in (1, 2, 3) or axes != list(range(rank - n, rank)) or rank not in (n + 1, n + 2):
        raise lf.error(f"mean_variance_normalization over axes {axes} of a rank-{rank} "
                       "tensor is not an instance norm")
    shape = lf.shape(op.inputs["input"])
    c = int(shape[rank - n - 1])
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    affine = isinstance(scale, _Array) or isinstance(offset, _Array)
    arrays = [a.base for a in (scale, offset) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    if affine:
        for name, value in (("weight", scale), ("bias", offset)):
            if isinstance(value, _Array):
                lf.claim(value, layer_id, name, (c,))
            else:
                lf.params.setdefault(layer_id, {})[name] = np.full((c,), value, np.float32)
    elif scale != 1.0 or offset != 0.0:
        raise lf.error("mean_variance_normalization with constant scale/offset other than "
                       "1/0")
    args = {"num_features": c, "eps": float(op.attribs.get("epsilon", 1e-5)),
            "affine": affine, "track_running_stats": False}
    return lf.add_layer(layer_id, f"InstanceNorm{n}d", args, [_input(lf, op, "input")],
                        _out(op))


_OPS: dict[str, Any] = {
    "external": _external, "variable": _variable, "constant": _constant, "copy": _copy,
    "cast": _cast, "linear": _linear, "conv": _conv, "deconv": _deconv,
    "max_pool": _pool("max"), "avg_pool": _pool("avg"), "batch_normalization": _batch_norm,
    "mean_variance_normalization": _mvn, "reshape": _reshape, "squeeze": _squeeze,
    "unsqueeze": _unsqueeze, "transpose": _transpose, "concat": _concat("cat"),
    "stack": _concat("stack"), "slice": _slice, "matmul": _matmul,
    "relu": _relu, "abs": _abs, "sign": _sign, "erf": _erf,
    "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "exp": _unary("exp"),
    "log": _unary("log"), "sqrt": _unary("sqrt"), "neg": _unary("neg"),
    "gelu": _unary("gelu"), "silu": _unary("silu"), "softplus": _unary("softplus"),
    "elu": _with_attrs("elu", alpha="alpha"), "selu": _selu,
    "leaky_relu": _with_attrs("leaky_relu", alpha="negative_slope"),
    "softmax": _softmax, "rcp": _rcp, "sqr": _sqr, "rsqrt": _rsqrt, "clamp": _clamp,
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"),
    "div": _binary("div"), "pow": _binary("pow"), "min": _binary("min"),
    "max": _binary("max"), "mean_reduce": _reduce("mean"), "sum_reduce": _reduce("sum"),
}


# ----------------------------------------------------------------------------- public reading
def _prune(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop function and get_attr nodes whose values nothing uses (shared with the
    TorchScript reader)."""
    from petab_sciml.formats.torchscript import _prune as prune

    return prune(nodes)


def _read_metadata(folder: Path) -> dict[str, Any] | None:
    meta_file = folder / METADATA_FILE
    graph_file = folder / GRAPH_FILE
    if not (meta_file.is_file() and graph_file.is_file()):
        return None
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    digest = hashlib.sha256(graph_file.read_bytes()).hexdigest()
    if not isinstance(meta, dict) or meta.get("graph_sha256") != digest:
        return None  # the graph was edited after we wrote it: lift it instead
    return meta


def _load_mapping(tensor_mapping: Any, folder: Path | None) -> dict[str, str] | None:
    if isinstance(tensor_mapping, Mapping):
        return dict(tensor_mapping)
    path = Path(tensor_mapping) if tensor_mapping else None
    if path is None and folder is not None and (folder / "tensor_mapping.json").is_file():
        path = folder / "tensor_mapping.json"
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NetworkError(f"cannot read the tensor mapping: {exc}", file=path) from None
    if not isinstance(data, Mapping):
        raise NetworkError("a tensor mapping must be a JSON object of source name -> NNEF "
                           "tensor name", file=path)
    return dict(data)


def read_with_parameters(
    path: str | os.PathLike,
    *,
    tensor_mapping: str | os.PathLike | Mapping[str, str] | None = None,
    net_id: str | None = None,
    input_ids: Sequence[str] | None = None,
    metadata: bool = True,
    trust_code: bool = False,
    values: bool = True,
) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """``(network, {group: {array: ndarray}})`` of an NNEF model (folder, ``graph.nnef``
    or ``.tgz``).  ``tensor_mapping`` is a ``nnef_tools.convert --tensor-mapping`` JSON
    (default: ``tensor_mapping.json`` in the folder); ``metadata=False`` ignores our
    ``petab_sciml.json`` and always lifts the graph.  NNEF runs no code (``trust_code``
    is accepted and ignored).  ``values=False`` accepts variables without ``.dat`` files
    (their arrays are then zeros)."""
    nnef = require("nnef", "nnef")
    source = Path(path)
    with _model_folder(source) as (folder, is_folder):
        graph = _load_graph(nnef, folder, is_folder, source)
        meta = _read_metadata(folder) if (metadata and is_folder) else None
        mapping = _load_mapping(tensor_mapping, folder if is_folder else None)
        if meta is not None:
            return _from_metadata(meta, graph, source, net_id, input_ids)
        shapes = _infer_shapes(nnef, graph)
    lifter = _Lifter(nnef, graph, source, shapes, _source_names(mapping))
    lifter.run()
    if lifter.missing_data and values:
        raise NetworkError(f"no values for variable(s) {', '.join(lifter.missing_data)} (a "
                           f"bare {GRAPH_FILE} has no .dat files: read the model folder)",
                           file=source)
    outputs = [lifter.env.get(name) for name in graph.outputs]
    out_names = []
    for name, value in zip(graph.outputs, outputs):
        value = _plain(lifter, value)
        if isinstance(value, _Array):
            value = lifter.materialize(value)
        if not isinstance(value, _T):
            raise NetworkError(f"graph output {name!r} is not a tensor", file=source)
        out_names.append(value.name)
    nodes = lifter.nodes + [{"name": "output", "op": "output", "target": "output",
                             "args": [out_names if len(out_names) > 1 else out_names[0]]}]
    nodes = _prune(nodes)
    used = {n["target"] for n in nodes if n["op"] == "get_attr"}
    free = [p for pid, p in lifter.free.items() if pid in used]
    params = {g: dict(a) for g, a in lifter.params.items()}
    for pid in set(lifter.free) - used:
        group, array = pid.split(".", 1)
        params.get(group, {}).pop(array, None)
    params = {g: a for g, a in params.items() if a}
    inputs = list(lifter.placeholders)
    if input_ids is not None:
        if isinstance(input_ids, str) or len(input_ids) != len(inputs):
            raise NetworkError(f"input_ids lists {list(input_ids)!r} but the graph has "
                               f"{len(inputs)} input(s)", file=source, entry="input_ids")
        inputs = list(input_ids)
    if net_id is None:
        net_id = graph.name if _ID.match(str(graph.name)) else "net"
    network = Network.build(net_id, inputs, list(lifter.layers.values()), nodes, free,
                            source=source)
    return network, params


def _from_metadata(meta: Mapping[str, Any], graph: Any, source: Path, net_id: str | None,
                   input_ids: Sequence[str] | None
                   ) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    from petab_sciml.formats.yaml import network_from_dict

    data = dict(meta["network"])
    if net_id is not None:
        data["nn_model_id"] = net_id
    if input_ids is not None:
        data["inputs"] = [{"input_id": i} for i in input_ids]
    network = network_from_dict(data, source=source)
    by_label: dict[str, np.ndarray] = {}
    for op in graph.operations:
        if op.name == "variable":
            tensor = graph.tensors[op.outputs["output"]]
            if tensor.data is not None:
                by_label[op.attribs["label"]] = np.asarray(tensor.data)
    labels = meta.get("labels", {})
    params: dict[str, dict[str, np.ndarray]] = {}
    for group, arrays in network.parameter_arrays().items():
        for array, info in arrays.items():
            key = f"{group}.{array}"
            label = labels.get(key, key)
            if label in by_label:
                value = by_label[label]
                if value.size != info.size:
                    raise NetworkError(f"variable {label!r} has {value.size} values; the "
                                       f"network needs shape {info.shape}", file=source)
                params.setdefault(group, {})[array] = value.reshape(info.shape).astype(
                    info.dtype or value.dtype)
            elif not info.trainable:
                params.setdefault(group, {})[array] = np.zeros(info.shape, info.dtype or
                                                               np.float32)
    return network, params


def read(path: str | os.PathLike, **options: Any) -> Network:
    """The network IR of an NNEF model (see :func:`read_with_parameters`)."""
    options.setdefault("values", False)
    network, _ = read_with_parameters(path, **options)
    return network


# ============================================================================= writing
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

    def value(self, ref: Any) -> Any:
        if isinstance(ref, Ref):
            return _Ident(self.names[ref.name])
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
                self.names[name] = self.layer(node).name
            elif node.op in ("call_function", "call_method"):
                self.names[name] = self.function(node).name
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
        graph_name = net_id if net_id not in _KEYWORDS else f"{net_id}_graph"
        text = ["version 1.0;", "", *head,
                f"graph {graph_name}( {', '.join(inputs)} ) -> ( {', '.join(outputs)} )",
                "{", *self.lines, "}", ""]
        return "\n".join(text)

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
            borders = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate"}
            if cfg["padding_mode"] not in borders:
                raise self.error(f"padding_mode {cfg['padding_mode']!r} has no NNEF border")
            w = self.array(layer.id, "weight")
            b = self.array(layer.id, "bias", (1, cfg["out_channels"])) if cfg["bias"] else 0.0
            return self.op(base, "conv", x, w, b, border=borders[cfg["padding_mode"]],
                           padding=pad, stride=s, dilation=d, groups=cfg["groups"])
        if t.startswith("ConvTranspose"):
            p = list(as_tuple(cfg["padding"], n))
            op_ = list(as_tuple(cfg["output_padding"], n))
            if any(o > pi for o, pi in zip(op_, p)):
                raise self.error("ConvTranspose with output_padding above padding has no "
                                 "NNEF deconv padding")
            w = self.array(layer.id, "weight")
            b = self.array(layer.id, "bias", (1, cfg["out_channels"])) if cfg["bias"] else 0.0
            return self.op(base, "deconv", x, w, b, border="constant",
                           padding=[(pi, pi - o) for pi, o in zip(p, op_)],
                           stride=list(as_tuple(cfg["stride"], n)),
                           dilation=list(as_tuple(cfg["dilation"], n)), groups=cfg["groups"])
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
                if cfg["divisor_override"] != math.prod(k) or (any(p) and not ceil_extra):
                    raise self.error("AvgPool divisor_override other than the window size")
                return self.op(base, "avg_pool", x, border="constant", **attrs)
            if cfg["count_include_pad"] and any(p):
                if ceil_extra:
                    raise self.error("AvgPool ceil_mode with count_include_pad and padding "
                                     "has no NNEF border")
                return self.op(base, "avg_pool", x, border="constant", **attrs)
            return self.op(base, "avg_pool", x, border="ignore" if (
                not cfg["count_include_pad"] or ceil_extra) else "constant", **attrs)
        if t.startswith("LPPool"):
            return self.lp_pool(layer, base, x, in_shape, out_shape)
        if t.startswith("Adaptive"):
            return self.adaptive_pool(layer, base, x, in_shape, out_shape)
        if t.startswith("BatchNorm"):
            if not cfg["track_running_stats"]:
                raise self.error("BatchNorm without running statistics has no inference-mode "
                                 "NNEF equivalent")
            c = cfg["num_features"]
            mean = self.array(layer.id, "running_mean", (1, c))
            var = self.array(layer.id, "running_var", (1, c))
            scale = self.array(layer.id, "weight", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_scale", (1, c), 1.0)
            offset = self.array(layer.id, "bias", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_offset", (1, c), 0.0)
            return self.op(base, "batch_normalization", x, mean, var, offset, scale,
                           epsilon=float(cfg["eps"]))
        if t.startswith("InstanceNorm"):
            if cfg["track_running_stats"]:
                raise self.error("InstanceNorm with running statistics has no NNEF "
                                 "equivalent")
            c = cfg["num_features"]
            scale = self.array(layer.id, "weight", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_scale", (1, c), 1.0)
            offset = self.array(layer.id, "bias", (1, c)) if cfg["affine"] else self.filled(
                f"{base}_offset", (1, c), 0.0)
            self.fragments.add("mean_variance_normalization")
            rank = len(in_shape)
            return self.op(base, "mean_variance_normalization", x, scale, offset,
                           axes=list(range(rank - n, rank)), epsilon=float(cfg["eps"]))
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
        sizes = []
        for i in range(n):
            size, out = in_shape[lead + i], out_shape[lead + i]
            if out == 0 or size % out:
                raise self.error(f"{layer.type}: input size {size} is not a multiple of the "
                                 f"output size {out}; NNEF has no adaptive pooling")
            sizes.append(size // out)
        op = "max_pool" if "Max" in layer.type else "avg_pool"
        return self.op(base, op, x, size=[1] * lead + sizes, border="ignore",
                       padding=[(0, 0)] * rank, stride=[1] * lead + sizes,
                       dilation=[1] * rank)

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
                 "silu": "silu"}
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
        if f in ("add", "sub"):
            left, right = self.operands(base, b["input"], b["other"])
            if b["alpha"] != 1:
                right = self.op(f"{base}_alpha", "mul", right, float(b["alpha"]))
            return self.op(base, f, left, right)
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
        raise self.error(f"function {f} has no NNEF equivalent")

    def operands(self, base: str, a: Any, b: Any) -> tuple[Any, Any]:
        """Binary operands of equal rank (NNEF broadcasts singleton dimensions only
        between tensors of the same rank): unsqueeze the lower-rank one at the front."""
        out = [self.value(a), self.value(b)]
        ranks = [len(self.shapes[r.name]) if isinstance(r, Ref) else None for r in (a, b)]
        if None not in ranks and ranks[0] != ranks[1]:
            low = 0 if ranks[0] < ranks[1] else 1
            diff = abs(ranks[0] - ranks[1])
            out[low] = self.op(f"{base}_broadcast", "unsqueeze", out[low],
                               axes=list(range(diff)))
        return out[0], out[1]

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
                    *[values[r.name] for r in node.bound["inputs"]])
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


def write(network: Network, path: str | os.PathLike, *,
          params: Mapping[str, Mapping[str, Any]] | None = None,
          input_shapes: Mapping[str, Sequence[int]] | Sequence[Sequence[int]] | None = None,
          metadata: bool = True) -> None:
    """Write ``network`` as an NNEF model folder (or ``.tgz`` archive) at ``path``.

    ``params`` (``{group: {array: value}}``) default to PyTorch's initial values (seed 0).
    ``input_shapes`` (by input id, or in input order; NNEF inputs have fixed shapes)
    default to the smallest shapes the network accepts.  NNEF computes in inference mode:
    dropout is dropped, BatchNorm uses its running statistics.
    """
    nnef = require("nnef", "nnef")
    path = Path(path)
    params = {g: {a: np.asarray(v) for a, v in arrays.items()}
              for g, arrays in (params or _default_parameters(network)).items()}
    if input_shapes is None:
        shapes_in = _default_input_shapes(network, params)
    elif isinstance(input_shapes, Mapping):
        try:
            shapes_in = [list(input_shapes[i]) for i in network.inputs]
        except KeyError as exc:
            raise NetworkError(f"input_shapes has no shape for input {exc.args[0]!r}",
                               file=network.source) from None
    else:
        shapes_in = [list(s) for s in input_shapes]
    if len(shapes_in) != len(network.inputs):
        raise NetworkError(f"input_shapes gives {len(shapes_in)} shape(s) for "
                           f"{len(network.inputs)} input(s)", file=network.source)
    try:
        shapes = _node_values(network, params, shapes_in)
    except NetworkError:
        raise
    except Exception as exc:
        raise NetworkError(f"the network does not run on inputs of shapes {shapes_in}: "
                           f"{type(exc).__name__}: {exc}", file=network.source) from None
    writer = _Writer(network, params, shapes, shapes_in)
    text = writer.run(network.id)
    archive = path.name.lower().endswith((".tgz", ".tar.gz"))
    folder = Path(tempfile.mkdtemp(prefix="petab_sciml_nnef_")) if archive else path
    try:
        if folder.exists() and any(folder.iterdir()) and not archive:
            if not (folder / GRAPH_FILE).is_file():
                raise NetworkError("the folder exists and is not an NNEF model; refusing to "
                                   "write into it", file=folder)
            for old in folder.glob("*.dat"):
                old.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / GRAPH_FILE).write_text(text, encoding="utf-8")
        for label, data in writer.files.items():
            with open(folder / f"{label}.dat", "wb") as handle:
                nnef.write_tensor(handle, np.ascontiguousarray(data))
        if metadata:
            from petab_sciml.formats.yaml import network_to_dict

            meta = {
                "petab_sciml_nnef": 1,
                "graph_sha256": hashlib.sha256((folder / GRAPH_FILE).read_bytes()).hexdigest(),
                "network": network_to_dict(network),
                "labels": {k.split("@")[0]: k.split("@")[0] for k in writer.variables},
                "input_shapes": shapes_in,
            }
            (folder / METADATA_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        elif (folder / METADATA_FILE).exists():
            (folder / METADATA_FILE).unlink()
        try:
            nnef.load_graph(str(folder))
        except nnef.Error as exc:  # pragma: no cover - a writer bug
            raise NetworkError(f"internal: the written NNEF does not parse: {exc}",
                               file=folder) from None
        if archive:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path, "w:gz") as tar:
                for item in sorted(folder.iterdir()):
                    tar.add(item, arcname=item.name)
    finally:
        if archive:
            shutil.rmtree(folder, ignore_errors=True)


FORMAT = NetworkFormat(name="nnef", extensions=(".nnef", ".tgz"), read=read, write=write,
                       runs_code=False)
