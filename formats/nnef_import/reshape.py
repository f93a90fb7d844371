"""Shape operations: ``reshape`` (``flatten`` where it is one), ``squeeze``,
``unsqueeze`` and ``transpose`` (``permute``); on variables they stay lazy."""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml.formats.graph_building import Tensor

from .lifter import _Array, _axes, _input, _Lifter, _out, _rank
from .registry import handles


@handles("squeeze")
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


@handles("unsqueeze")
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


@handles("transpose")
def _transpose(lf: _Lifter, op: Any) -> Tensor:
    axes = list(op.attribs["axes"])
    rank = _rank(lf, op)
    if rank is not None and len(axes) < rank:
        axes += list(range(len(axes), rank))
    return lf.call("permute", {"input": _input(lf, op, "input"), "dims": axes}, base=_out(op))


@handles("reshape")
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
