"""Flatten, Reshape, Squeeze, Unsqueeze, DepthToSpace and SpaceToDepth."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .activations import _prelu_slope
from .importer import _Importer
from .registry import handles
from .values import _P, _T


# ---------------------------------------------------------------- shapes
def _flatten_range(in_shape: Sequence[int | None], out_shape: Sequence[int]
                   ) -> tuple[int, int] | None:
    """(start, end) if ``out_shape`` merges in_shape[start:end+1] and keeps the rest."""
    r, ro = len(in_shape), len(out_shape)
    if ro >= r or ro == 0:
        return None
    merged = r - ro + 1
    for s in range(0, r - merged + 1):
        e = s + merged - 1
        head, tail = in_shape[:s], in_shape[e + 1:]
        if list(out_shape[:s]) != list(head) or list(out_shape[s + 1:]) != list(tail):
            continue
        block = in_shape[s:e + 1]
        if all(d is not None for d in block) and math.prod(block) == out_shape[s]:
            return s, e
    return None


def _flatten_layer(im: _Importer, node: Any, ref: str, start: int, end: int, rank: int
                   ) -> str:
    args = {"start_dim": start, "end_dim": -1 if end == rank - 1 else end}
    return im.add_layer(node, "Flatten", args, {}, [ref])


@handles("Flatten")
def _flatten(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    rank = im.rank(x)
    axis = int(im.attrs(node).get("axis", 1))
    ref = im.tensor(x, node)
    if rank is not None:
        axis = im.norm_axis(node, axis, rank)
    if axis == 1 and rank is not None and rank >= 2:
        im.bind(node, 0, _flatten_layer(im, node, ref, 1, rank - 1, rank))
        return
    if axis == 0:
        im.bind(node, 0, im.emit("reshape", [ref], {"shape": [1, -1]}, name=im.out_name(node)))
        return
    if rank is None:
        raise im.error(node, "Flatten needs the input rank")
    if axis == rank:
        im.bind(node, 0, im.emit("reshape", [ref], {"shape": [-1, 1]}, name=im.out_name(node)))
        return
    inner = im.emit("flatten", [ref], {"start_dim": axis, "end_dim": -1})
    im.bind(node, 0, im.emit("flatten", [inner], {"start_dim": 0, "end_dim": axis - 1},
                             name=im.out_name(node)))


@handles("Reshape")
def _reshape(im: _Importer, node: Any, ins: list) -> None:
    x = ins[0]
    if im.opset < 5:  # pragma: no cover - below MIN_OPSET
        raise im.error(node, "Reshape with a shape attribute")
    target = [int(t) for t in im.static(node, 1, "shape")]
    allowzero = int(im.attrs(node).get("allowzero", 0))
    if isinstance(x, _P):
        value = im.inits[x.init]
        full = [value.shape[i] if t == 0 and not allowzero else t for i, t in enumerate(target)]
        try:
            new_shape = np.empty(value.shape, dtype=np.int8).reshape(full).shape
        except ValueError:
            new_shape = None
        if new_shape is not None and _prelu_slope(im, node, x, new_shape):
            return
    in_shape = im.shape(x)
    if not allowzero and 0 in target and in_shape is not None and None in in_shape:
        in_shape = im.static_shape(x) or in_shape   # run the graph for the sizes
    ref = im.tensor(x, node)
    # Resolve 0 (copy) entries.
    if not allowzero and 0 in target:
        if in_shape is None:
            raise im.error(node, "Reshape with 0 entries needs the input rank")
        for i, t in enumerate(target):
            if t == 0:
                if in_shape[i] is None:
                    if target == [0, -1] and len(in_shape) >= 2:
                        im.bind(node, 0, _flatten_layer(im, node, ref, 1, len(in_shape) - 1,
                                                        len(in_shape)))
                        return
                    raise im.error(node, "Reshape copies a dynamic dimension")
                target[i] = int(in_shape[i])
    out = im.static_shape(_T("", im.shapes.get(node.output[0])))
    if out is None and in_shape is not None and all(d is not None for d in in_shape) \
            and target.count(-1) <= 1:
        total = math.prod(in_shape)
        known = math.prod(t for t in target if t != -1)
        out = tuple(total // known if t == -1 else t for t in target) if known else None
    if in_shape is not None and out is not None:
        fr = _flatten_range(in_shape, out)
        if fr is not None:
            im.bind(node, 0, _flatten_layer(im, node, ref, fr[0], fr[1], len(in_shape)))
            return
    elif in_shape is not None and len(target) == 2 and target[0] == -1 and len(in_shape) >= 2:
        inner = in_shape[1:]
        if all(d is not None for d in inner) and math.prod(inner) == target[1]:
            im.bind(node, 0, _flatten_layer(im, node, ref, 1, len(in_shape) - 1,
                                            len(in_shape)))
            return
    im.bind(node, 0, im.emit("reshape", [ref], {"shape": list(out or target)},
                             name=im.out_name(node)), out)


def _axes(im: _Importer, node: Any, ins: list, index: int = 1) -> list[int] | None:
    at = im.attrs(node)
    if "axes" in at:
        return [int(a) for a in at["axes"]]
    if len(ins) > index and ins[index] is not None:
        return [int(a) for a in np.asarray(im.static(node, index, "axes")).reshape(-1)]
    return None


@handles("Squeeze")
def _squeeze(im: _Importer, node: Any, ins: list) -> None:
    axes = _axes(im, node, ins)
    x = im.tensor(ins[0], node)
    kwargs = {} if axes is None else {"dim": axes if len(axes) != 1 else axes[0]}
    im.bind(node, 0, im.emit("squeeze", [x], kwargs, name=im.out_name(node)))


@handles("Unsqueeze")
def _unsqueeze(im: _Importer, node: Any, ins: list) -> None:
    axes = _axes(im, node, ins)
    if not axes:
        raise im.error(node, "Unsqueeze without axes")
    if isinstance(ins[0], _P):
        value = im.inits[ins[0].init]
        out_rank = value.ndim + len(axes)
        shape = np.expand_dims(np.empty(value.shape, dtype=np.int8),
                               tuple(a + out_rank if a < 0 else a for a in axes)).shape
        if _prelu_slope(im, node, ins[0], shape):
            return
    rank = im.rank(ins[0])
    ref = im.tensor(ins[0], node)
    if len(axes) == 1:
        im.bind(node, 0, im.emit("unsqueeze", [ref], {"dim": axes[0]}, name=im.out_name(node)))
        return
    if rank is None:
        raise im.error(node, "Unsqueeze of several axes needs the input rank")
    out_rank = rank + len(axes)
    norm = sorted(a + out_rank if a < 0 else a for a in axes)
    for k, a in enumerate(norm):
        last = k == len(norm) - 1
        ref = im.emit("unsqueeze", [ref], {"dim": a}, name=im.out_name(node) if last else None)
    im.bind(node, 0, ref)


@handles("DepthToSpace", "SpaceToDepth")
def _depth_space(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    bs = int(at["blocksize"])
    shape = im.static_shape(ins[0])
    if shape is None or len(shape) != 4:
        raise im.error(node, f"{node.op_type} needs a static 4-D input shape")
    b, c, h, w = shape
    ref = im.tensor(ins[0], node)
    mode = at.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise im.error(node, f"{node.op_type} mode {mode!r}: expected 'DCR' or 'CRD'")
    if node.op_type == "DepthToSpace":
        if mode == "DCR":
            t = im.emit("reshape", [ref], {"shape": [b, bs, bs, c // bs**2, h, w]})
            t = im.emit("permute", [t], {"dims": [0, 3, 4, 1, 5, 2]})
        else:
            t = im.emit("reshape", [ref], {"shape": [b, c // bs**2, bs, bs, h, w]})
            t = im.emit("permute", [t], {"dims": [0, 1, 4, 2, 5, 3]})
        out = im.emit("reshape", [t], {"shape": [b, c // bs**2, h * bs, w * bs]},
                      name=im.out_name(node))
    else:
        t = im.emit("reshape", [ref], {"shape": [b, c, h // bs, bs, w // bs, bs]})
        # DCR: channel (row offset, column offset, c); CRD (opset 25): (c, row, column)
        dims = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        t = im.emit("permute", [t], {"dims": dims})
        out = im.emit("reshape", [t], {"shape": [b, c * bs**2, h // bs, w // bs]},
                      name=im.out_name(node))
    im.bind(node, 0, out)
