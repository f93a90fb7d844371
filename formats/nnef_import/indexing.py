"""Indexing and joining: ``concat``, ``stack``, ``slice`` (negative strides as ``flip``,
then ``getitem``) and ``pad``."""

from __future__ import annotations

from typing import Any

from petab_sciml.formats.graph_building import Tensor

from .lifter import _axes, _input, _Lifter, _out
from .registry import handles


@handles("concat", "stack")
def _concat(lf: _Lifter, op: Any) -> Tensor:
    function = "cat" if op.name == "concat" else "stack"
    values = _input(lf, op, "values")
    axis = int(op.attribs["axis"])
    return lf.call(function, {"tensors": values, "dim": axis}, base=_out(op))


@handles("slice")
def _slice(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    axes = list(op.attribs["axes"])
    begin, end = list(op.attribs["begin"]), list(op.attribs["end"])
    stride = list(op.attribs.get("stride") or [1] * len(axes))
    if not axes:
        return x
    shape = lf.shape(op.inputs["input"])
    axes = _axes(lf, axes, None if shape is None else len(shape))
    full = {"slice": [None, None, None]}
    index: list[Any] = [full] * (max(axes) + 1)
    flips = []
    for a, b, e, s in zip(axes, begin, end, stride):
        if s == 0:
            raise lf.error("slice with stride 0 is not supported")
        if s > 0:
            stop = None if (e == 0 and s == 1) else int(e)
            index[a] = {"slice": [int(b) if b else None, stop, None if s == 1 else int(s)]}
            continue
        if shape is None:
            raise lf.error("slice with a negative stride needs known shapes")
        flips.append(a)
        index[a] = _reversed_slice(int(shape[a]), int(b), int(e), -int(s))
    if flips:
        last = all(i == full for i in index)
        x = lf.call("flip", {"input": x, "dims": flips}, base=_out(op) if last else None)
        if last:
            return x
    return lf.call("getitem", {"input": x, "index": index}, base=_out(op))


def _reversed_slice(n: int, b: int, e: int, k: int) -> dict[str, list[Any]]:
    """The index, into the axis flipped, of NNEF's slice ``begin=b, end=e, stride=-k``
    (as the nnef_tools interpreter: b, b-k, ... while above e, after adding ``n`` to
    negative bounds and clamping them to [-1, n]; an element at n is out of range)."""
    b, e = (min(max(v + n if v < 0 else v, -1), n) for v in (b, e))
    if b == n:
        b -= k
    # element i of the axis is element n-1-i of the flipped axis
    start, stop = n - 1 - b, max(n - 1 - e, 0)
    return {"slice": [start or None, None if stop >= n else stop, None if k == 1 else k]}


_PAD_MODES = ("constant", "reflect", "replicate")


@handles("pad")
def _pad(lf: _Lifter, op: Any) -> Any:
    x = _input(lf, op, "input")
    padding = [(int(p), int(q)) for p, q in op.attribs["padding"]]
    border = op.attribs.get("border", "constant")
    if border == "reflect-even" and all(p <= 1 and q <= 1 for p, q in padding):
        border = "replicate"  # mirroring one element repeats the edge
    if border not in _PAD_MODES:
        raise lf.error(f"pad border {border!r} is not supported (PyTorch pads with "
                       f"{', '.join(map(repr, _PAD_MODES))})")
    shape = lf.shape(op.inputs["input"])
    rank = len(shape) if shape is not None else len(padding)
    if len(padding) != rank:
        raise lf.error(f"pad has {len(padding)} padding pairs for a rank-{rank} input")
    k = next((rank - i for i, p in enumerate(padding) if p != (0, 0)), 0)
    if not k:
        return x
    if border == "constant":
        value = float(op.attribs.get("value", 0.0))
        pad = [v for p, q in reversed(padding[rank - k:]) for v in (p, q)]
        return lf.call("pad", {"input": x, "pad": pad, "value": value or None}, base=_out(op))
    # PyTorch pads the last k = 1, 2 or 3 dimensions of a rank k+1 or k+2 input
    k = max(k, rank - 2)
    if k > 3:
        raise lf.error(f"pad with border {border!r} of {k} dimensions is not supported "
                       "(PyTorch pads at most the last 3 dimensions)")
    batch = k == rank
    if batch:
        x = lf.call("unsqueeze", {"input": x, "dim": 0})
    pads = [v for pair in reversed(padding[rank - k:]) for v in pair]
    crop = any(v < 0 for v in pads)
    x = lf.call("pad", {"input": x, "pad": [max(v, 0) for v in pads], "mode": border},
                base=None if batch or crop else _out(op))
    if crop:  # NNEF crops after padding (a constant pad by negative amounts crops)
        x = lf.call("pad", {"input": x, "pad": [min(v, 0) for v in pads]},
                    base=None if batch else _out(op))
    return lf.call("squeeze", {"input": x, "dim": 0}, base=_out(op)) if batch else x
