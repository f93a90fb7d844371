"""Graph inputs (``external``), variables, constants, ``copy`` and ``cast``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from petab_sciml.formats.graph_building import Tensor
from petab_sciml.network import ID_PATTERN

from .lifter import _Array, _input, _Lifter, _out, _plain
from .registry import handles


@handles("external")
def _external(lf: _Lifter, op: Any) -> Tensor:
    name = _out(op)
    src = lf.names.get(name)
    node = lf.fresh(src if src and ID_PATTERN.match(src) else name)
    lf.nodes.append({"name": node, "op": "placeholder", "target": node})
    lf.placeholders.append(node)
    return Tensor(node)


@handles("variable")
def _variable(lf: _Lifter, op: Any) -> _Array:
    name = _out(op)
    tensor = lf.graph.tensors[name]
    lf.labels[name] = op.attribs.get("label", name)
    data = tensor.data
    if data is None:
        from petab_sciml import limits

        shape = [int(d) for d in op.attribs["shape"]]
        limits.check("max_elements", f"variable {name!r} of shape {shape}: elements",
                     math.prod(shape), file=lf.source, entry=f"variable {name!r}")
        data = np.zeros(shape, np.float32)
        lf.missing_data.append(name)
    data = np.asarray(data)
    if data.dtype == np.float64:
        data = data.astype(np.float32)
    lf.variables[name] = (data, False)
    return _Array(data, name)


@handles("constant")
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


@handles("copy")
def _copy(lf: _Lifter, op: Any) -> Any:
    return _input(lf, op, "x" if "x" in op.inputs else next(iter(op.inputs)))


@handles("cast")
def _cast(lf: _Lifter, op: Any) -> Any:
    name = op.inputs[next(iter(op.inputs))]
    value = _plain(lf, lf.value(name))
    tensor = lf.graph.tensors.get(name) if isinstance(name, str) else None
    logical = isinstance(value, bool) or isinstance(value, Tensor) and (
        value.name in lf.logical or getattr(tensor, "dtype", None) == "logical")
    if op.dtype == "logical":
        if not logical:
            raise lf.error("cast<logical> of a non-logical value is not supported")
        return value
    if isinstance(value, (int, float)):
        return float(value) if op.dtype != "integer" else float(int(value))
    if logical:  # bool tensors stay bool under +, so make a float tensor now
        return lf.call("mul", {"input": value, "other": 1.0}, base=_out(op))
    if op.dtype == "integer":  # scalar -> integer drops the fraction (toward zero)
        return lf.call("trunc", {"input": value}, base=_out(op))
    return value
