"""Reductions: sum, mean, amax, amin (``*_reduce``, then ``squeeze`` unless keepdim),
prod (products of slices; NNEF has no product reduction) and cumsum (running sums of
slices)."""

from __future__ import annotations

from typing import Any

from .registry import function
from .writer import _Ident, _Writer


@function("sum", "mean")
def _sum_mean(w: _Writer, node: Any, x: Any) -> _Ident:
    base, b = node.name, node.bound
    rank = len(w.shapes[b["input"].name])
    dims = b["dim"]
    axes = list(range(rank)) if dims is None else [
        w.axis(d, rank) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    reduced = w.op(base if b["keepdim"] and dims is not None else f"{base}_keep",
                   f"{node.function}_reduce", x, axes=sorted(axes))
    if b["keepdim"] and dims is not None:
        return reduced
    return w.op(base, "squeeze", reduced, axes=sorted(axes))


@function("amax", "amin")
def _amax_amin(w: _Writer, node: Any, x: Any) -> _Ident:
    base, b = node.name, node.bound
    shape = w.shapes[b["input"].name]
    dims = b["dim"] if isinstance(b["dim"], (list, tuple)) else [b["dim"]]
    axes = sorted({w.axis(d, len(shape)) for d in dims}) or list(range(len(shape)))
    op = "max_reduce" if node.function == "amax" else "min_reduce"
    if b["keepdim"]:
        return w.op(base, op, x, axes=axes)
    return w.op(base, "squeeze", w.op(f"{base}_keep", op, x, axes=axes), axes=axes)


@function("prod")
def _prod(w: _Writer, node: Any, x: Any) -> _Ident:
    """The slices along each reduced axis multiplied in turn."""
    base, dim = node.name, node.bound["dim"]
    shape = w.shapes[node.bound["input"].name]
    rank = len(shape)
    axes = list(range(rank)) if dim is None else [w.axis(dim, rank)]
    y = x
    for axis in axes:
        if shape[axis] == 0:
            raise w.error("prod over an empty dimension")
        acc = w.slice_axis(f"{base}_{axis}_0", y, axis, 0, 1)
        for i in range(1, shape[axis]):
            acc = w.op(f"{base}_{axis}_{i}", "mul", acc,
                       w.slice_axis(f"{base}_{axis}_s{i}", y, axis, i, i + 1))
        y = acc
    if node.bound["keepdim"] or not axes:
        return y if y is not x else w.op(base, "copy", x)
    return w.op(base, "squeeze", y, axes=axes)


@function("cumsum")
def _cumsum(w: _Writer, node: Any, x: Any) -> _Ident:
    """Running sums of the slices along ``dim``, concatenated."""
    base, shape, dim = node.name, w.shapes[node.bound["input"].name], node.bound["dim"]
    axis = dim + len(shape) if dim < 0 else dim
    pieces, total = [], None
    for i in range(shape[axis]):
        piece = w.op(f"{base}_s{i}", "slice", x, axes=[axis], begin=[i], end=[i + 1])
        total = piece if total is None else w.op(f"{base}_c{i}", "add", total, piece)
        pieces.append(total)
    return pieces[0] if len(pieces) == 1 else w.op(base, "concat", pieces, axis=axis)
