"""OneHot, Compress, ReverseSequence, CumProd and TensorScatter: selections by constant
indices and running products along a static axis, built from slices, products and
concatenations.

Their integer operands (indices, conditions, lengths, the axis) must be known at import,
as in exported networks; the float operands may be computed by the network.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .indexing import _take
from .registry import handles
from .values import _C


@handles("OneHot")
def _one_hot(im: _Importer, node: Any, ins: list) -> None:
    """``values[1]`` where ``indices`` hit, ``values[0]`` elsewhere.  Constant indices
    give ``mask * on + (1 - mask) * off`` with a constant 0/1 mask (exact: one term is
    zero); indices computed by the network (float, rounded down as ONNX casts them) a
    comparison with ``0 .. depth - 1`` and ``where``."""
    indices = im.array(ins[0])
    depth_value = np.asarray(im.static(node, 1, "depth")).reshape(-1)
    if depth_value.size != 1 or not float(depth_value[0]).is_integer() or depth_value[0] < 1:
        raise im.error(node, f"depth must be one positive whole number, got "
                       f"{depth_value.tolist()}")
    depth = int(depth_value[0])
    in_shape = (tuple(np.shape(indices)) if indices is not None
                else im.needed_shape(node, ins[0], "the indices"))
    rank = len(in_shape) + 1
    axis = im.norm_axis(node, int(im.attrs(node).get("axis", -1)), rank)
    if not 0 <= axis < rank:
        raise im.error(node, f"axis {axis} is out of range for an output of rank {rank}")
    hits = np.arange(depth).reshape((1,) * axis + (depth,) + (1,) * (rank - 1 - axis))
    values = im.tensor(ins[2], node)
    off = im.emit("getitem", [values], {"index": 0})
    on = im.emit("getitem", [values], {"index": 1})
    out_shape = in_shape[:axis] + (depth,) + in_shape[axis:]
    if indices is None:
        whole = im.emit("floor", [im.tensor(ins[0], node)])
        wrapped = im.emit("where", [im.emit("lt", [whole, 0.0]),
                                    im.emit("add", [whole, float(depth)]), whole])
        mask = im.emit("eq", [im.emit("unsqueeze", [wrapped], {"dim": axis}),
                              im.tensor(_C(hits.astype(np.float64), "one_hot_positions"),
                                        node)])
        im.bind(node, 0, im.emit("where", [mask, on, off], name=im.out_name(node)),
                out_shape)
        return
    index = np.floor(indices.astype(np.float64)).astype(np.int64)
    index = np.where(index < 0, index + depth, index)
    mask = (np.expand_dims(index, axis) == hits).astype(np.float64)
    hit = im.emit("mul", [im.tensor(_C(mask, f"{im.out_name(node)}_mask"), node), on])
    miss = im.emit("mul", [im.tensor(_C(1.0 - mask, f"{im.out_name(node)}_miss"), node), off])
    im.bind(node, 0, im.emit("add", [hit, miss], name=im.out_name(node)), mask.shape)


@handles("Compress")
def _compress(im: _Importer, node: Any, ins: list) -> None:
    """The slices along ``axis`` (the flattened input without one) where the constant
    ``condition`` is true."""
    condition = np.asarray(im.static(node, 1, "condition")).reshape(-1).astype(bool)
    shape = im.needed_shape(node, ins[0], "the input")
    ref = im.tensor(ins[0], node)
    axis_attr = im.attrs(node).get("axis")
    if axis_attr is None:
        ref = im.emit("reshape", [ref], {"shape": [-1]})
        shape, axis = (int(np.prod(shape)),), 0
    else:
        axis = im.norm_axis(node, int(axis_attr), len(shape))
    if condition.size > shape[axis]:
        raise im.error(node, f"condition has {condition.size} entries for an axis of "
                       f"{shape[axis]}")
    chosen = np.flatnonzero(condition)
    if chosen.size == 0:
        raise im.error(node, "the condition selects nothing: an empty output is not "
                       "supported")
    out = list(shape)
    out[axis] = int(chosen.size)
    im.bind(node, 0, _take(im, node, ref, axis, chosen, len(shape)), out)


@handles("ReverseSequence")
def _reverse_sequence(im: _Importer, node: Any, ins: list) -> None:
    """Each batch element's first ``sequence_lens[b]`` steps reversed: per batch element,
    a take along the time axis with that element's constant order."""
    at = im.attrs(node)
    shape = im.needed_shape(node, ins[0], "the input")
    rank = len(shape)
    time_axis = im.norm_axis(node, int(at.get("time_axis", 0)), rank)
    batch_axis = im.norm_axis(node, int(at.get("batch_axis", 1)), rank)
    if {time_axis, batch_axis} != {0, 1}:
        raise im.error(node, "time_axis and batch_axis must be 0 and 1 (in either order)")
    lengths = np.asarray(im.static(node, 1, "sequence_lens")).reshape(-1).astype(np.int64)
    steps = shape[time_axis]
    if lengths.size != shape[batch_axis] or np.any(lengths < 0) or np.any(lengths > steps):
        raise im.error(node, f"sequence_lens {lengths.tolist()} must hold one length in "
                       f"[0, {steps}] per batch element ({shape[batch_axis]})")
    ref = im.tensor(ins[0], node)
    pieces = []
    for b, length in enumerate(lengths):
        one = im.slice_axis(ref, node, batch_axis, b, b + 1, rank)
        order = np.concatenate([np.arange(length)[::-1], np.arange(length, steps)])
        pieces.append(_take(im, node, one, time_axis, order, rank))
    out = pieces[0] if len(pieces) == 1 else im.emit("cat", [pieces], {"dim": batch_axis},
                                                     name=im.out_name(node))
    im.bind(node, 0, out, shape)


@handles("CumProd")
def _cumprod(im: _Importer, node: Any, ins: list) -> None:
    """Running products along a static axis: one product per element of the axis
    (``p_k = p_(k-1) * x_k``), concatenated; ``reverse`` runs from the end, ``exclusive``
    shifts by one and starts with 1.  Exact where a factor is zero, as a product is."""
    at = im.attrs(node)
    shape = im.needed_shape(node, ins[0], "the input")
    rank = len(shape)
    axis = im.norm_axis(node, int(np.asarray(im.static(node, 1, "axis")).reshape(())), rank)
    reverse, exclusive = bool(at.get("reverse", 0)), bool(at.get("exclusive", 0))
    n = shape[axis]
    ref = im.tensor(ins[0], node)
    order = list(range(n - 1, -1, -1)) if reverse else list(range(n))
    running: dict[int, str] = {}
    previous = None
    for k in order:
        piece = im.slice_axis(ref, node, axis, k, k + 1, rank)
        previous = piece if previous is None else im.emit("mul", [previous, piece])
        running[k] = previous
    if exclusive:
        ones = list(shape)
        ones[axis] = 1
        one = im.tensor(_C(np.ones(ones), f"{im.out_name(node)}_one"), node)
        shifted = {order[0]: one}
        for i in range(1, n):
            shifted[order[i]] = running[order[i - 1]]
        running = shifted
    parts = [running[k] for k in range(n)]
    out = parts[0] if n == 1 else im.emit("cat", [parts], {"dim": axis},
                                          name=im.out_name(node))
    im.bind(node, 0, out, shape)


@handles("TensorScatter")
def _tensor_scatter(im: _Importer, node: Any, ins: list) -> None:
    """A cache with each batch element's rows along ``axis`` from ``write_indices[b]`` on
    replaced by ``update``'s (wrapping with ``mode="circular"``): per batch element, the
    kept rows times a constant 0/1 mask plus a constant placement matrix times the
    update."""
    from .resize import _along_axis

    at = im.attrs(node)
    mode = at.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise im.error(node, f"mode={mode!r} is not one of linear, circular")
    shape = im.needed_shape(node, ins[0], "past_cache")
    update_shape = im.needed_shape(node, ins[1], "update")
    rank = len(shape)
    axis = int(at.get("axis", -2)) % rank
    if axis == 0 or len(update_shape) != rank or any(
            u != s for i, (u, s) in enumerate(zip(update_shape, shape, strict=True))
            if i != axis) or update_shape[axis] > shape[axis]:
        raise im.error(node, f"update {list(update_shape)} does not fit past_cache "
                       f"{list(shape)} along axis {axis} (axis 0 is the batch)")
    batch, length, count = shape[0], shape[axis], update_shape[axis]
    starts = (np.zeros(batch, np.int64) if len(ins) < 3 or ins[2] is None else
              np.asarray(im.static(node, 2, "write_indices")).reshape(-1).astype(np.int64))
    cache, update = im.tensor(ins[0], node), im.tensor(ins[1], node)
    pieces = []
    for b in range(batch):
        rows = starts[b] + np.arange(count)
        rows = rows % length if mode == "circular" else rows
        if np.any(rows < 0) or np.any(rows >= length):
            raise im.error(node, f"write_indices[{b}] = {starts[b]} writes outside the "
                           f"{length} rows of the cache")
        keep = np.ones(length)
        keep[rows] = 0.0
        place = np.zeros((length, count))
        place[rows, np.arange(count)] = 1.0
        one = im.slice_axis(cache, node, 0, b, b + 1, rank)
        kept = im.emit("mul", [one, im.tensor(_C(keep.reshape((-1,) + (1,) * (rank - 1 - axis)),
                                                 "tensor_scatter_keep"), node)])
        placed = _along_axis(im, node, im.slice_axis(update, node, 0, b, b + 1, rank), axis,
                             rank, place, None)
        pieces.append(im.emit("add", [kept, placed]))
    out = pieces[0] if len(pieces) == 1 else im.emit("cat", [pieces], {"dim": 0},
                                                     name=im.out_name(node))
    im.bind(node, 0, out, shape)
