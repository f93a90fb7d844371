"""ReduceSum, ReduceMean, ReduceSumSquare, ReduceL1/L2, ReduceLogSumExp, ReduceMax/Min
and ReduceProd.
"""

from __future__ import annotations

from typing import Any

from .importer import _Importer
from .registry import handles
from .reshape import _axes

_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceSumSquare": "sum",
           "ReduceL1": "sum", "ReduceL2": "sum", "ReduceLogSum": "sum",
           "ReduceLogSumExp": "sum"}


@handles(*_REDUCE)
def _reduce(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    axes = _axes(im, node, ins)
    x = ins[0]
    rank = im.rank(x)
    ref = im.tensor(x, node)
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            im.alias(node, 0, x)
            return
        if keep:
            if rank is None:
                raise im.error(node, "reducing all axes with keepdims needs the input rank")
            axes = list(range(rank))
    op = node.op_type
    if op == "ReduceSumSquare" or op == "ReduceL2":
        ref = im.emit("mul", [ref, ref])
    elif op == "ReduceL1":
        ref = im.emit("abs", [ref])
    elif op == "ReduceLogSumExp":
        ref = im.emit("exp", [ref])
    kwargs: dict[str, Any] = {"keepdim": keep}
    if axes:
        kwargs["dim"] = axes
    last = op in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1")
    out = im.emit(_REDUCE[op], [ref], kwargs, name=im.out_name(node) if last else None)
    if op == "ReduceL2":
        out = im.emit("sqrt", [out], name=im.out_name(node))
    elif op in ("ReduceLogSum", "ReduceLogSumExp"):
        out = im.emit("log", [out], name=im.out_name(node))
    im.bind(node, 0, out)


@handles("ReduceMax", "ReduceMin")
def _reduce_max(im: _Importer, node: Any, ins: list) -> None:
    """ReduceMax/ReduceMin as amax/amin (no axes: over everything)."""
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    x = ins[0]
    axes = _axes(im, node, ins)
    if not axes and at.get("noop_with_empty_axes", 0):
        im.alias(node, 0, x)
        return
    kwargs: dict[str, Any] = {"keepdim": keep}
    if axes:
        kwargs["dim"] = axes
    fn = "amax" if node.op_type == "ReduceMax" else "amin"
    shape = im.static_shape(x)
    if shape is not None:
        reduced = [shape[a] for a in axes] if axes else list(shape)
        if 0 in reduced:
            # ONNX defines -inf / +inf there; PyTorch's amax/amin refuse empty sets
            raise im.error(node, f"{node.op_type} over an empty set (input shape "
                                 f"{list(shape)}): PyTorch's {fn} has no value for it")
    im.bind(node, 0, im.emit(fn, [im.tensor(x, node)], kwargs, name=im.out_name(node)))


@handles("ReduceProd")
def _reduce_prod(im: _Importer, node: Any, ins: list) -> None:
    """ReduceProd as prod, one axis at a time (torch.prod reduces one dimension)."""
    at = im.attrs(node)
    keep = bool(at.get("keepdims", 1))
    x = ins[0]
    axes = _axes(im, node, ins)
    ref = im.tensor(x, node)
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            im.alias(node, 0, x)
            return
        im.bind(node, 0, im.emit("prod", [ref], {"keepdim": keep}, name=im.out_name(node)))
        return
    if len(axes) == 1:
        im.bind(node, 0, im.emit("prod", [ref], {"dim": axes[0], "keepdim": keep},
                                 name=im.out_name(node)))
        return
    for a in axes:
        ref = im.emit("prod", [ref], {"dim": a, "keepdim": True})
    if not keep:
        ref = im.emit("squeeze", [ref], {"dim": axes}, name=im.out_name(node))
    im.bind(node, 0, ref)


@handles("LpNormalization")
def _lp_normalization(im: _Importer, node: Any, ins: list) -> None:
    """``x / ||x||_p`` along ``axis`` (ONNX adds no epsilon; a zero vector stays zero),
    ``p`` 1 or 2."""
    at = im.attrs(node)
    p, axis = int(at.get("p", 2)), int(at.get("axis", -1))
    if p not in (1, 2):
        raise im.error(node, f"p = {p}: ONNX defines LpNormalization for p = 1 and 2 only")
    x = im.tensor(ins[0], node)
    terms = im.emit("abs", [x]) if p == 1 else im.emit("mul", [x, x])
    norm = im.emit("sum", [terms], {"dim": [axis], "keepdim": True})
    if p == 2:
        norm = im.emit("sqrt", [norm])
    norm = im.emit("where", [im.emit("eq", [norm, 0.0]), 1.0, norm])
    im.bind(node, 0, im.emit("div", [x, norm], name=im.out_name(node)))
