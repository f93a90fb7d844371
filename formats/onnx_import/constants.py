"""Identity, Cast, Constant, and the ops lifted only on constants (Shape, Range, ...)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C, _Lazy

_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


@handles("Identity")
def _identity(im: _Importer, node: Any, ins: list) -> None:
    im.alias(node, 0, ins[0])


@handles("Cast", "CastLike")
def _cast(im: _Importer, node: Any, ins: list) -> None:
    if node.op_type == "Cast":
        to = im.attrs(node).get("to")
    else:
        like = ins[1]
        arr = im.array(like)
        to = 1 if arr is None or arr.dtype.kind == "f" else -1
    x = ins[0]
    if isinstance(x, _Lazy) and x.kind == "compare":
        if to == 9:  # BOOL: already one
            im.alias(node, 0, x)
            return
        if to in _FLOAT_TYPES:  # 1.0 / 0.0 (materialised as a where)
            im.env[node.output[0]] = _Lazy("float", (x,), node)
            return
    if to not in _FLOAT_TYPES:
        raise im.error(node, "casting a network value to a non-float type is not supported "
                       "(networks compute in floating point; comparisons are bool)")
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
          "Floor", "Ceil", "Round", "Mod", "NonZero", "ArgMax", "ArgMin")
def _fold_only(im: _Importer, node: Any, ins: list) -> None:
    raise im.unsupported(node, "only supported on values known at import (they are folded); "
                         "here it depends on the network inputs" + (
                             " and shape inference found no static shape"
                             if node.op_type in ("Shape", "Size") else ""))
