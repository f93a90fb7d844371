"""Identity, Cast, Constant, and the ops lifted only on constants (Shape, Range, ...)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C, _Lazy

_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_ROUNDING_TYPES = {10: "float16", 16: "bfloat16"}
"""Float types narrower than float32 that a Cast may round a network value to."""
_INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}  # UINT8, INT8, UINT16, INT16, INT32, INT64, UINT32/64


@handles("Identity")
def _identity(im: _Importer, node: Any, ins: list) -> None:
    im.alias(node, 0, ins[0])


@handles("Cast", "CastLike")
def _cast(im: _Importer, node: Any, ins: list) -> None:
    if node.op_type == "Cast":
        to = im.attrs(node).get("to")
    else:
        arr = im.array(ins[1])
        if arr is not None:
            to = 1 if arr.dtype.kind == "f" else -1
        else:   # a network value: its declared or inferred type
            to = im.elem_types.get(node.input[1], 1)
    x = ins[0]
    if isinstance(x, _Lazy) and x.kind == "compare":
        if to == 9:  # BOOL: already one
            im.alias(node, 0, x)
            return
        if to in _FLOAT_TYPES:  # 1.0 / 0.0 (materialised as a where)
            im.env[node.output[0]] = _Lazy("float", (x,), node)
            return
    if to in _INT_TYPES:  # float -> int -> float is truncation toward zero
        nxt = im.sole_consumer(node.output[0])
        if nxt is not None and nxt[1].op_type == "Cast" \
                and im.attrs(nxt[1]).get("to") in _FLOAT_TYPES:
            index, back = nxt
            im.done.add(index)
            im.bind(back, 0, im.emit("trunc", [im.tensor(x, node)], name=im.out_name(back)))
            return
    if to in _ROUNDING_TYPES:
        raise im.error(node, f"casting a network value to {_ROUNDING_TYPES[to]} would round "
                       "it (and every value computed from it) to that precision, which the "
                       "backends do not emulate: they compute in float32 or float64")
    if to not in _FLOAT_TYPES:
        raise im.error(node, "casting a network value to a non-float type is not supported "
                       "(networks compute in floating point; comparisons are bool), except "
                       "to an integer and straight back (truncation)")
    im.alias(node, 0, x)


@handles("Constant")
def _constant(im: _Importer, node: Any, ins: list) -> None:
    a = im.attrs(node)
    if "value" in a:
        value = np.asarray(a["value"])
    elif "value_float" in a:
        value = np.array(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        value = np.array(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        value = np.array(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        value = np.array(a["value_ints"], dtype=np.int64)
    else:
        raise im.error(node, f"Constant with attribute {sorted(a)} is not supported")
    im.env[node.output[0]] = _C(value, node.output[0])


@handles("Shape", "Size", "ConstantOfShape", "Range", "Not", "And", "Or",
          "NonZero", "ArgMax", "ArgMin")
def _fold_only(im: _Importer, node: Any, ins: list) -> None:
    raise im.unsupported(node, "only supported on values known at import (they are folded); "
                         "here it depends on the network inputs" + (
                             " and shape inference found no static shape"
                             if node.op_type in ("Shape", "Size") else ""))


@handles("If")
def _if(im: _Importer, node: Any, ins: list) -> None:
    """An If whose condition is known at import (exporters test sizes: the TorchScript
    exporter's squeeze of a dimension that may be 1) is replaced by the branch taken."""
    cond = im.array(ins[0])
    if cond is None:
        raise im.error(node, "an If whose condition depends on the network inputs is not "
                       "supported (only conditions known at import, such as size tests)")
    at = im.attrs(node)
    branch = at["then_branch"] if bool(np.asarray(cond).reshape(-1)[0]) else at["else_branch"]
    for inner in branch.node:
        im.convert_inner(inner)
    for k, out in enumerate(branch.output):
        im.alias(node, k, im.value(out.name, node))
