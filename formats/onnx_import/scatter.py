"""GatherElements, ScatterElements, ScatterND and Scatter with indices known at import.

The network IR has no integer tensors, so indices must be constants or initializers (an
exported network's are).  The output is then assembled from slices: the data and the
updates are flattened to rows (one element per row for the ``*Elements`` ops, one
indexed slice per row for ScatterND), every output row is known to come from a data row,
an updates row, or a reduction of a data row with updates rows, and runs of consecutive
rows of one source become one slice, joined by ``cat``.  The cost is one IR node per run
and per reduced row, so it suits the small index sets of exported networks; more than
:data:`MAX_PIECES` slices are refused.

Duplicate targets: ONNX leaves ``reduction="none"`` with duplicates undefined; here the
last update wins, as in ONNX's reference implementation.  With a reduction, updates
combine with the data row in index order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from petab_sciml import limits

from .importer import _Importer
from .indexing import _take
from .registry import handles
from .values import _C

_REDUCTIONS = {"add": "add", "mul": "mul", "max": "maximum", "min": "minimum"}
MAX_PIECES = 256
"""The most slices (runs, plus reduced rows) one op may become: beyond it the graph
grows with the index set (a loss over random class indices became thousands of nodes
that XLA took minutes to compile), so it is refused instead."""


def _indices(im: _Importer, node: Any, what: str = "indices") -> np.ndarray:
    idx = im.array(im.value(node.input[1], node)) if len(node.input) > 1 else None
    if idx is None:
        raise im.unsupported(node, f"{what} computed from the network inputs need integer "
                             "network values, which PEtab SciML networks do not have")
    return np.asarray(idx).astype(np.int64)


def _in_range(im: _Importer, node: Any, idx: np.ndarray, size: int, axis: int
              ) -> np.ndarray:
    """``idx`` with negative entries counted from the end; an entry outside
    ``[-size, size)`` is an error naming the node."""
    bad = (idx < -size) | (idx >= size)
    if np.any(bad):
        raise im.error(node, f"index {int(idx[bad].reshape(-1)[0])} is out of range for "
                       f"axis {axis} of size {size}")
    return np.where(idx < 0, idx + size, idx)


def _rows(im: _Importer, node: Any, v: Any, shape: tuple[int, ...], width: int) -> str:
    """``v`` reshaped to ``(rows, width)``."""
    return im.emit("reshape", [im.tensor(v, node)],
                   {"shape": [math.prod(shape) // max(width, 1), width]})


def _assemble(im: _Importer, node: Any, sources: list[tuple], refs: dict[str, str],
              shape: list[int]) -> None:
    """Bind output 0 to the rows ``sources`` (each ``("data"|"updates", row)`` or
    ``("reduce", op, data_row, [update rows])``) of the row-shaped ``refs``, reshaped
    to ``shape``."""
    pieces: list[str] = []
    run: list[Any] = []          # [source, start, stop] of the current slice

    def close() -> None:
        if run:
            pieces.append(im.slice_axis(refs[run[0]], node, 0, run[1], run[2], 2))
            run.clear()

    for src in sources:
        if src[0] == "reduce":
            close()
            _, op, row, updates = src
            acc = im.slice_axis(refs["data"], node, 0, row, row + 1, 2)
            for u in updates:
                acc = im.emit(op, [acc, im.slice_axis(refs["updates"], node, 0, u, u + 1, 2)])
            pieces.append(acc)
        elif run and run[0] == src[0] and run[2] == src[1]:
            run[2] += 1
        else:
            close()
            run.extend([src[0], src[1], src[1] + 1])
        if len(pieces) > MAX_PIECES:
            raise im.error(node, f"{node.op_type} with these indices needs more than "
                           f"{MAX_PIECES} slices of its inputs (one per run of consecutive "
                           "elements): index sets this scattered are not supported")
    close()
    out = pieces[0] if len(pieces) == 1 else im.emit("cat", [pieces], {"dim": 0})
    im.bind(node, 0, im.emit("reshape", [out], {"shape": [int(d) for d in shape]},
                             name=im.out_name(node)), shape)


def _static(im: _Importer, node: Any, index: int, what: str) -> tuple[int, ...]:
    return im.needed_shape(node, im.value(node.input[index], node), f"its {what}")


@handles("GatherElements")
def _gather_elements(im: _Importer, node: Any, ins: list) -> None:
    shape = _static(im, node, 0, "data")
    idx = _indices(im, node)
    axis = im.norm_axis(node, int(im.attrs(node).get("axis", 0)), len(shape))
    idx = _in_range(im, node, idx, shape[axis], axis)
    if idx.size == 0:
        raise im.error(node, "GatherElements with no indices gives an empty tensor")
    positions = np.indices(idx.shape).reshape(idx.ndim, -1)
    positions[axis] = idx.reshape(-1)
    flat = np.ravel_multi_index(tuple(positions), shape)
    runs = 1 + int(np.count_nonzero(np.diff(flat) != 1))
    if runs > MAX_PIECES:
        # scattered indices (a loss picking one class per sample): a constant one-hot
        # mask over the axis (budgeted as folded constants are), a product and a sum,
        # instead of a slice per index.  A product spreads a non-finite data element
        # along the axis as nan into the outputs that did not pick it.
        limits.check("max_folded_elements", f"node {node.name or node.op_type!r}: the "
                     "one-hot mask of GatherElements", idx.size * shape[axis])
        ref = im.tensor(ins[0], node)
        if any(i < d for k, (i, d) in enumerate(zip(idx.shape, shape, strict=True))
               if k != axis):
            index = [{"slice": [None, None if k == axis else int(i), None]}
                     for k, i in enumerate(idx.shape)]
            ref = im.emit("getitem", [ref], {"index": index})
        hits = np.arange(shape[axis]).reshape((1,) * (axis + 1) + (-1,)
                                              + (1,) * (idx.ndim - axis - 1))
        mask = (np.expand_dims(idx, axis + 1) == hits).astype(np.float64)
        product = im.emit("mul", [im.emit("unsqueeze", [ref], {"dim": axis}),
                                  im.tensor(_C(mask, "gather_one_hot"), node)])
        im.bind(node, 0, im.emit("sum", [product], {"dim": [axis + 1]},
                                 name=im.out_name(node)), idx.shape)
        return
    data = im.emit("reshape", [im.tensor(ins[0], node)], {"shape": [math.prod(shape)]})
    out = _take(im, node, data, 0, flat, 1, MAX_PIECES)
    im.bind(node, 0, im.emit("reshape", [out], {"shape": [int(d) for d in idx.shape]},
                             name=im.out_name(node)), idx.shape)


def _scatter(im: _Importer, node: Any, ins: list, shape: tuple[int, ...], width: int,
             targets: np.ndarray) -> None:
    """Output = data (rows of ``width``) with row ``targets[m]`` taken from, or reduced
    with, updates row ``m``."""
    reduction = str(im.attrs(node).get("reduction", "none"))
    if reduction != "none" and reduction not in _REDUCTIONS:
        raise im.error(node, f"reduction {reduction!r} is not one of none, "
                       f"{', '.join(_REDUCTIONS)}")
    if targets.size == 0:
        im.alias(node, 0, ins[0])
        return
    if math.prod(shape) == 0:
        raise im.error(node, f"{node.op_type} into empty data of shape {shape}")
    by_row: dict[int, list[int]] = {}
    for m, r in enumerate(targets.tolist()):
        by_row.setdefault(int(r), []).append(m)
    sources: list[tuple] = []
    for r in range(math.prod(shape) // width):
        updates = by_row.get(r)
        if updates is None:
            sources.append(("data", r))
        elif reduction == "none":
            sources.append(("updates", updates[-1]))
        else:
            sources.append(("reduce", _REDUCTIONS[reduction], r, updates))
    refs = {"data": _rows(im, node, ins[0], shape, width),
            "updates": im.emit("reshape", [im.tensor(ins[2], node)],
                               {"shape": [int(targets.size), width]})}
    _assemble(im, node, sources, refs, list(shape))


@handles("ScatterElements", "Scatter")
def _scatter_elements(im: _Importer, node: Any, ins: list) -> None:
    shape = _static(im, node, 0, "data")
    idx = _indices(im, node)
    if len(ins) < 3 or _static(im, node, 2, "updates") != idx.shape:
        raise im.error(node, "updates must have the shape of the indices")
    axis = im.norm_axis(node, int(im.attrs(node).get("axis", 0)), len(shape))
    if idx.ndim != len(shape):
        raise im.error(node, f"indices of rank {idx.ndim} for data of rank {len(shape)}")
    idx = _in_range(im, node, idx, shape[axis], axis)
    positions = np.indices(idx.shape).reshape(idx.ndim, -1)
    positions[axis] = idx.reshape(-1)
    if idx.size and any(int(p.max()) >= d for p, d in zip(positions, shape, strict=True)):
        raise im.error(node, f"indices of shape {idx.shape} reach outside data of shape "
                       f"{shape}")
    targets = (np.ravel_multi_index(tuple(positions), shape) if idx.size
               else np.zeros(0, np.int64))
    _scatter(im, node, ins, shape, 1, targets)


@handles("ScatterND")
def _scatter_nd(im: _Importer, node: Any, ins: list) -> None:
    shape = _static(im, node, 0, "data")
    idx = _indices(im, node)
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim == 0 or not 0 < k <= len(shape):
        raise im.error(node, f"indices of shape {idx.shape} do not index data of shape "
                       f"{shape}")
    expected = tuple(idx.shape[:-1]) + tuple(shape[k:])
    if len(ins) < 3 or _static(im, node, 2, "updates") != expected:
        raise im.error(node, f"updates must have shape {expected}")
    rows = idx.reshape(-1, k)
    for axis in range(k):
        rows[:, axis] = _in_range(im, node, rows[:, axis], shape[axis], axis)
    targets = (np.ravel_multi_index(tuple(rows.T), shape[:k]) if rows.size
               else np.zeros(0, np.int64))
    _scatter(im, node, ins, shape, math.prod(shape[k:]), targets)
