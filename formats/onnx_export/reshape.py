"""Shape ops: the Flatten layer and flatten, reshape, reshape_as, unflatten (Reshape /
Flatten), permute, transpose (Transpose), squeeze, unsqueeze and contiguous."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .exporter import _Exporter, dims
from .registry import function, layer


def _flatten(ex: _Exporter, x: str, start: int, end: int) -> str:
    """Flatten for (1, -1); Reshape with 0 (copy) dims or a static target where the
    shape allows; else a target shape assembled from Shape slices."""
    if start == 1 and end == -1:
        return ex.op("Flatten", [x], axis=1)
    if end == -1:
        return ex.op("Reshape", [x, ex.ints([0] * start + [-1], "shape")]) if start >= 0 \
            else _flatten_dynamic(ex, x, start, end)
    shape = ex.shape(x)
    if shape is not None and all(d is not None for d in shape):
        r = len(shape)
        s, e = start % r if r else 0, end % r if r else 0
        target = list(shape[:s]) + [math.prod(shape[s:e + 1])] + list(shape[e + 1:])
        return ex.op("Reshape", [x, ex.ints(target or [1], "shape")])
    return _flatten_dynamic(ex, x, start, end)


def _flatten_dynamic(ex: _Exporter, x: str, start: int, end: int) -> str:
    parts = []
    if start != 0:
        parts.append(ex.op("Shape", [x], end=start))
    parts.append(ex.ints([-1], "minus_one"))
    if end != -1:
        parts.append(ex.op("Shape", [x], start=end + 1))
    shape = parts[0] if len(parts) == 1 else ex.op("Concat", parts, axis=0)
    return ex.op("Reshape", [x, shape])


@layer("Flatten")
def _flatten_layer(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    return _flatten(ex, ins[0], lay.config["start_dim"], lay.config["end_dim"])


@function("flatten")
def _flatten_function(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return _flatten(ex, ex.input(b), int(b["start_dim"]), int(b["end_dim"]))


@function("reshape")
def _reshape(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Reshape", [ex.input(b), ex.ints(dims(b["shape"]), "shape")])


@function("reshape_as")
def _reshape_as(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Reshape", [ex.input(b), ex.op("Shape", [ex.operand(b["other"])])])


@function("unflatten")
def _unflatten(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    """Reshape to Shape(x)[:dim] + sizes + Shape(x)[dim+1:] (sizes may hold one -1)."""
    x = ex.input(b)
    rank = ex.need_rank(x, "unflatten")
    dim = int(b["dim"]) % rank
    shape = ex.op("Shape", [x])
    parts = []
    if dim:
        parts.append(ex.op("Slice", [shape, ex.ints([0], "starts"), ex.ints([dim], "ends")]))
    parts.append(ex.ints(dims(b["sizes"]), "sizes"))
    if dim < rank - 1:
        parts.append(ex.op("Slice", [shape, ex.ints([dim + 1], "starts"),
                                     ex.ints([rank], "ends")]))
    return ex.op("Reshape", [x, ex.op("Concat", parts, axis=0) if len(parts) > 1
                             else parts[0]])


@function("permute")
def _permute(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    order = dims(b["dims"])
    r = len(order)
    return ex.op("Transpose", [ex.input(b)], perm=[d % r if r else 0 for d in order])


@function("transpose")
def _transpose(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    r = ex.need_rank(x, "transpose")
    perm = list(range(r))
    d0, d1 = int(b["dim0"]) % r, int(b["dim1"]) % r
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ex.op("Transpose", [x], perm=perm)


@function("squeeze")
def _squeeze(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    if b["dim"] is None:
        return ex.op("Squeeze", [x])
    axes = dims(b["dim"])
    shape = ex.shape(x)
    if shape is not None:  # PyTorch leaves dims that are not 1 alone
        axes = [a for a in axes if shape[a] is None or shape[a] == 1]
    if not axes:
        return ex.op("Identity", [x])
    return ex.op("Squeeze", [x, ex.ints(axes)])


@function("unsqueeze")
def _unsqueeze(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Unsqueeze", [ex.input(b), ex.ints([int(b["dim"])])])


@function("contiguous")
def _contiguous(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Identity", [ex.input(b)])
