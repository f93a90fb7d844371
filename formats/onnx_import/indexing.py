"""Concat, Split, Slice, Gather, GatherND, Tile, Expand and Pad."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C, _T

_INT_MAX = 2**31 - 1


@handles("Concat")
def _concat(im: _Importer, node: Any, ins: list) -> None:
    axis = int(im.attrs(node).get("axis", 1 if im.opset < 4 else 0))
    refs = [im.tensor(v, node, hint=f"{node.output[0]}_{i}") for i, v in enumerate(ins)
            if v is not None and not (im.shape(v) is not None and 0 in (im.shape(v) or ()))]
    if len(refs) == 1:
        im.alias(node, 0, _T(refs[0]))
        return
    im.bind(node, 0, im.emit("cat", [refs], {"dim": axis}, name=im.out_name(node)))


@handles("Split")
def _split(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    axis = int(at.get("axis", 0))
    if "split" in at:
        sizes = [int(s) for s in at["split"]]
    elif len(ins) > 1 and ins[1] is not None:
        sizes = [int(s) for s in np.asarray(im.static(node, 1, "split")).reshape(-1)]
    else:
        size = None if shape is None else shape[axis]
        if size is None:
            raise im.error(node, "an equal Split needs the static size of the split axis")
        k = len(node.output)
        chunk = -(-int(size) // k) if "num_outputs" in at else int(size) // k
        sizes = [min(chunk, int(size) - i * chunk) for i in range(k)]
    ref = im.tensor(x, node)
    start = 0
    for i, s in enumerate(sizes):
        if i < len(node.output) and node.output[i]:
            r = im.slice_axis(ref, node, axis, start, start + s, rank)
            im.bind(node, i, r)
        start += s


@handles("SplitToSequence")
def _split_to_sequence(im: _Importer, node: Any, ins: list) -> None:
    """A sequence of slices (the dynamo exporter's torch.chunk), read by SequenceAt with
    constant positions; kept as a Python list of values."""
    at = im.attrs(node)
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    axis = int(at.get("axis", 0))
    size = None if shape is None else shape[axis]
    if size is None:
        raise im.error(node, "SplitToSequence needs the static size of the split axis")
    split = im.static(node, 1, "split") if len(ins) > 1 and ins[1] is not None else None
    if split is None or np.asarray(split).ndim == 0:
        step = 1 if split is None else int(np.asarray(split))
        sizes = [min(step, int(size) - s) for s in range(0, int(size), step)]
    else:
        sizes = [int(v) for v in np.asarray(split).reshape(-1)]
    keep = int(at.get("keepdims", 1)) or split is not None
    ref = im.tensor(x, node)
    pieces, start = [], 0
    for s in sizes:
        if keep:
            piece = im.slice_axis(ref, node, axis, start, start + s, rank)
        else:
            piece = im.emit("getitem", [ref], {"index": im.index_on(node, axis, start, rank)})
        pieces.append(_T(piece))
        start += s
    im.env[node.output[0]] = pieces


@handles("SequenceAt")
def _sequence_at(im: _Importer, node: Any, ins: list) -> None:
    sequence = ins[0]
    if not isinstance(sequence, list):
        raise im.error(node, "SequenceAt of a sequence not made by SplitToSequence")
    position = int(np.asarray(im.static(node, 1, "position")).reshape(()))
    im.alias(node, 0, sequence[position])


@handles("Slice")
def _slice(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    if im.opset < 10:
        at = im.attrs(node)
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in np.asarray(im.static(node, 1, "starts")).reshape(-1)]
        ends = [int(v) for v in np.asarray(im.static(node, 2, "ends")).reshape(-1)]
        axes_v = im.static(node, 3, "axes")
        axes = list(range(len(starts))) if axes_v is None else \
            [int(v) for v in np.asarray(axes_v).reshape(-1)]
        steps_v = im.static(node, 4, "steps")
        steps = [1] * len(starts) if steps_v is None else \
            [int(v) for v in np.asarray(steps_v).reshape(-1)]
    if any(s == 0 for s in steps):
        raise im.error(node, "slice steps must not be 0")
    if rank is not None:
        axes = [a + rank if a < 0 else a for a in axes]
    ref = im.tensor(x, node)
    if any(s < 0 for s in steps):
        # x[start:end:-k] on an axis of size n is flip(x)[n-1-start : n-1-end : k].
        flipped = []
        for i, (st, en, a, sp) in enumerate(zip(starts, ends, axes, steps)):
            if sp > 0:
                continue
            size = None if shape is None or a >= len(shape) else shape[a]
            starts[i], ends[i] = _flipped_bounds(im, node, int(st), int(en), size)
            steps[i] = -sp
            flipped.append(a)
        ref = im.emit("flip", [ref], {"dims": flipped})
    if any(a < 0 for a in axes) and any(a >= 0 for a in axes):
        raise im.error(node, "mixed negative and positive axes need the input rank")
    items: dict[int, dict] = {}
    for s, e, a, st in zip(starts, ends, axes, steps):
        size = None if shape is None else shape[a]
        s, e = int(s), int(e)
        start = None if s == 0 else s
        if s <= -_INT_MAX:
            start = None
        stop = None if (e >= _INT_MAX or (size is not None and e >= size)) else e
        if e <= -_INT_MAX:
            stop = 0
        items[a] = {"slice": [start, stop, None if st == 1 else st]}
    full = {"slice": [None, None, None]}
    if all(a >= 0 for a in axes):
        index = [items.get(i, full) for i in range(max(axes) + 1)]
    else:
        lo = min(axes)
        index = ["..."] + [items.get(i, full) for i in range(lo, 0)]
    if all(it == full for it in index if it != "..."):
        im.bind(node, 0, ref)  # a plain flip
        return
    im.bind(node, 0, im.emit("getitem", [ref], {"index": index}, name=im.out_name(node)))


def _flipped_bounds(im: _Importer, node: Any, start: int, end: int, size: int | None
                    ) -> tuple[int, int]:
    """ONNX Slice bounds of a negative step on an axis of ``size`` as bounds on the flipped
    axis (start clamped to [0, n-1], end to [-1, n-1]); negative bounds need no size."""
    big = _INT_MAX // 2
    if size is not None:
        st = min(max(start + size if start < 0 else start, 0), size - 1)
        en = min(max(end + size if end < 0 else end, -1), size - 1)
        return size - 1 - st, size - 1 - en
    if start >= big:  # from the last element
        fst = 0
    elif -big < start < 0:
        fst = -1 - start
    else:
        raise im.error(node, f"a negative-step slice from {start} needs the static axis size")
    if end <= -big:  # to the first element
        fen = _INT_MAX
    elif end < 0:
        fen = -1 - end
    else:
        raise im.error(node, f"a negative-step slice to {end} needs the static axis size")
    return fst, fen


@handles("Gather")
def _gather(im: _Importer, node: Any, ins: list) -> None:
    data = ins[0]
    idx = im.array(ins[1])
    if idx is None:
        raise im.unsupported(node, "indices computed from the network inputs (an embedding "
                             "lookup) need integer network inputs, which PEtab SciML "
                             "networks do not have")
    shape = im.shape(data)
    rank = None if shape is None else len(shape)
    axis = int(im.attrs(node).get("axis", 0))
    if rank is not None:
        axis = im.norm_axis(node, axis, rank)
    size = None if shape is None else shape[axis]
    flat = np.asarray(idx).reshape(-1).astype(np.int64)
    if np.any(flat < 0):
        if size is None:
            raise im.error(node, "negative indices need the static axis size")
        flat = np.where(flat < 0, flat + size, flat)
    ref = im.tensor(data, node)
    if np.asarray(idx).ndim == 0:
        im.bind(node, 0, im.emit("getitem", [ref], {"index": im.index_on(
            node, axis, int(flat[0]), rank)}, name=im.out_name(node)))
        return
    out = _take(im, node, ref, axis, flat, rank)
    if np.asarray(idx).ndim > 1:
        if shape is None or any(d is None for d in shape):
            raise im.error(node, "multi-dimensional indices need a static data shape")
        new = list(shape[:axis]) + list(np.asarray(idx).shape) + list(shape[axis + 1:])
        out = im.emit("reshape", [out], {"shape": [int(d) for d in new]})
    im.bind(node, 0, out)


def _take(im: _Importer, node: Any, ref: str, axis: int, indices: np.ndarray,
          rank: int | None, max_pieces: int | None = None) -> str:
    """``ref`` indexed along ``axis`` by constant non-negative indices (runs of
    consecutive indices become one slice; the pieces are concatenated); more than
    ``max_pieces`` runs are refused."""
    runs: list[list[int]] = []
    for k in (int(i) for i in indices):
        if runs and k == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([k, k + 1])
    if max_pieces is not None and len(runs) > max_pieces:
        raise im.error(node, f"{node.op_type} with these indices needs more than "
                       f"{max_pieces} slices of its input (one per run of consecutive "
                       "elements): index sets this scattered are not supported")
    pieces = [im.slice_axis(ref, node, axis, a, b, rank) for a, b in runs]
    return pieces[0] if len(pieces) == 1 else im.emit("cat", [pieces], {"dim": axis})


@handles("GatherND")
def _gather_nd(im: _Importer, node: Any, ins: list) -> None:
    """GatherND with constant indices: linearise the indexed leading axes, take, reshape."""
    idx = im.array(ins[1])
    if idx is None:
        raise im.unsupported(node, "indices computed from the network inputs")
    if int(im.attrs(node).get("batch_dims", 0)) != 0:
        raise im.error(node, "batch_dims != 0 is not supported")
    shape = im.static_shape(ins[0])
    idx = np.asarray(idx).astype(np.int64)
    k = idx.shape[-1]
    if shape is None or k > len(shape):
        raise im.error(node, "GatherND needs the data's static shape")
    lead, rest = shape[:k], list(shape[k:])
    idx = np.where(idx < 0, idx + np.array(lead), idx)
    flat = np.ravel_multi_index(tuple(np.moveaxis(idx.reshape(-1, k), -1, 0)), lead)
    ref = im.tensor(ins[0], node)
    if k > 1:
        ref = im.emit("reshape", [ref], {"shape": [math.prod(lead)] + rest})
    out = _take(im, node, ref, 0, flat, 1 + len(rest))
    target = list(idx.shape[:-1]) + rest
    if target != [len(flat)] + rest:
        out = im.emit("reshape", [out], {"shape": [int(d) for d in target]},
                      name=im.out_name(node))
    im.bind(node, 0, out, target)


def _tile(im: _Importer, node: Any, ref: str, repeats: Sequence[int]) -> str:
    for axis, r in enumerate(repeats):
        if r == 1:
            continue
        if r < 1:
            raise im.error(node, f"repeat count {r} is not supported")
        ref = im.emit("cat", [[ref] * int(r)], {"dim": axis})
    return ref


@handles("Tile")
def _tile_op(im: _Importer, node: Any, ins: list) -> None:
    repeats = [int(r) for r in np.asarray(im.static(node, 1, "repeats")).reshape(-1)]
    out = _tile(im, node, im.tensor(ins[0], node), repeats)
    if out == im.tensor(ins[0], node):
        im.alias(node, 0, ins[0])
    else:
        shape = im.static_shape(ins[0])
        im.bind(node, 0, out, None if shape is None else
                [d * r for d, r in zip(shape, repeats)])


@handles("Expand")
def _expand(im: _Importer, node: Any, ins: list) -> None:
    target = [int(t) for t in np.asarray(im.static(node, 1, "shape")).reshape(-1)]
    shape = im.static_shape(ins[0])
    if shape is None:
        raise im.error(node, "Expand needs the input's static shape")
    rank = max(len(shape), len(target))
    src = (1,) * (rank - len(shape)) + tuple(shape)
    tgt = [1] * (rank - len(target)) + target
    ref = im.tensor(ins[0], node)
    for _ in range(rank - len(shape)):
        ref = im.emit("unsqueeze", [ref], {"dim": 0})
    repeats = [t if s == 1 else 1 for s, t in zip(src, tgt)]
    out = _tile(im, node, ref, repeats)
    im.bind(node, 0, out, [max(s, t) for s, t in zip(src, tgt)])


@handles("Pad")
def _pad_op(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    x = ins[0]
    shape = im.shape(x)
    rank = None if shape is None else len(shape)
    mode = at.get("mode", "constant")
    if im.opset < 11:
        pads = [int(p) for p in at.get("pads", at.get("paddings", []))]
        value = float(at.get("value", 0.0))
    else:
        pads = [int(p) for p in np.asarray(im.static(node, 1, "pads")).reshape(-1)]
        computed_value = (len(node.input) > 2 and bool(node.input[2])
                          and im.array(ins[2]) is None)
        cv = None if computed_value else im.static(node, 2, "constant_value")
        value = 0.0 if cv is None or np.asarray(cv).size == 0 else \
            float(np.asarray(cv).reshape(-1)[0])
    axes_v = im.static(node, 3, "axes") if im.opset >= 18 else None
    if rank is None:
        raise im.error(node, "Pad needs the input rank")
    begins, ends = [0] * rank, [0] * rank
    axes = list(range(rank)) if axes_v is None else \
        [int(a) + rank if int(a) < 0 else int(a) for a in np.asarray(axes_v).reshape(-1)]
    k = len(axes)
    for i, a in enumerate(axes):
        begins[a], ends[a] = pads[i], pads[k + i]
    ref = im.pad(node, im.tensor(x, node), shape, begins, ends, mode, value)
    if im.opset >= 11 and computed_value and mode == "constant":
        # the padded positions hold the network's value: zero padding plus value * a mask
        static = im.static_shape(x)
        if static is None:
            raise im.error(node, "a constant_value computed by the network needs the input's "
                           "static shape")
        mask = np.pad(np.zeros(static), [(max(b_, 0), max(e, 0)) for b_, e in
                                         zip(begins, ends, strict=True)], constant_values=1.0)
        crop = tuple(slice(max(-b_, 0), mask.shape[i] - max(-e, 0))
                     for i, (b_, e) in enumerate(zip(begins, ends, strict=True)))
        fill = im.emit("mul", [im.tensor(_C(mask[crop], "pad_border"), node),
                               im.tensor(ins[2], node)])
        ref = im.emit("add", [ref, fill], name=im.out_name(node))
    im.bind(node, 0, ref)
