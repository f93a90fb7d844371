"""Shape operations: the Flatten layer and flatten, reshape, reshape_as, unflatten
(``reshape``), permute, transpose (``transpose``), squeeze, unsqueeze and contiguous
(``copy``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .registry import function, layer
from .writer import LayerCall, _Ident, _Writer


def _flatten(w: _Writer, base: str, x: _Ident, in_shape: Sequence[int], start: int, end: int
             ) -> _Ident:
    rank = len(in_shape)
    start = start + rank if start < 0 else start
    end = end + rank if end < 0 else end
    if rank == 0 or start >= end:
        return x if rank else w.op(base, "reshape", x, shape=[1])
    if end == rank - 1:
        return w.op(base, "reshape", x, shape=[0] * start + [-1])
    return w.op(base, "reshape", x, shape=[-1], axis_start=start,
                axis_count=end - start + 1)


@layer("Flatten")
def _flatten_layer(w: _Writer, call: LayerCall) -> _Ident:
    cfg = call.layer.config
    return _flatten(w, call.base, call.x, call.in_shape, cfg["start_dim"], cfg["end_dim"])


@function("flatten")
def _flatten_function(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    return _flatten(w, node.name, x, w.shapes[b["input"].name], b["start_dim"], b["end_dim"])


@function("reshape")
def _reshape(w: _Writer, node: Any, x: Any) -> _Ident:
    shape = node.bound["shape"]
    shape = [shape] if isinstance(shape, int) else list(shape)
    if 0 in shape:
        shape = list(w.shapes[node.name])
    return w.op(node.name, "reshape", x, shape=shape)


@function("reshape_as", "unflatten")
def _reshape_to_result(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "reshape", x, shape=list(w.shapes[node.name]))


@function("permute")
def _permute(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    dims = b["dims"] if isinstance(b["dims"], (list, tuple)) else [b["dims"]]
    rank = w.rank(b["input"].name)
    return w.op(node.name, "transpose", x, axes=[w.axis(d, rank) for d in dims])


@function("transpose")
def _transpose(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    rank = w.rank(b["input"].name)
    perm = list(range(rank))
    i, j = w.axis(b["dim0"], rank), w.axis(b["dim1"], rank)
    perm[i], perm[j] = perm[j], perm[i]
    return w.op(node.name, "transpose", x, axes=perm)


@function("squeeze")
def _squeeze(w: _Writer, node: Any, x: Any) -> _Ident:
    """Squeeze the given axes of size 1 (PyTorch leaves the others alone)."""
    b = node.bound
    shape = w.shapes[b["input"].name]
    rank = len(shape)
    dims = b["dim"]
    if dims is None:
        axes = [i for i, s in enumerate(shape) if s == 1]
    else:
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        axes = [w.axis(d, rank) for d in dims]
        axes = [a for a in axes if shape[a] == 1]
    return w.op(node.name, "squeeze", x, axes=sorted(axes)) if axes else x


@function("unsqueeze")
def _unsqueeze(w: _Writer, node: Any, x: Any) -> _Ident:
    rank = w.rank(node.bound["input"].name) + 1
    return w.op(node.name, "unsqueeze", x, axes=[w.axis(node.bound["dim"], rank)])


@function("contiguous")
def _contiguous(w: _Writer, node: Any, x: Any) -> _Ident:
    return w.op(node.name, "copy", x)
