"""How many elements folding one ONNX node would produce, known *before* folding it.

The ONNX importer folds nodes whose inputs are all constants (``Range``,
``ConstantOfShape``, shape arithmetic, ...).  A 300-byte graph can ask for a tensor of
10^9 elements that way, so :func:`folded_elements` computes the output size from the
input values (ops whose output size depends on values) or by ONNX shape inference (all
others), and the importer refuses a node above ``max_folded_elements``
(:mod:`petab_sciml.limits`) before it allocates anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["folded_elements", "infer_shapes_bounded"]


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _broadcast(*shapes: Sequence[int]) -> list[int]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, start=rank - len(shape)):
            out[i] = max(out[i], int(d))
    return out


def _range(values: list) -> int:
    start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in values[:3])
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        raise ValueError("no size")   # evaluation fails on these and says why
    return max(math.ceil((limit - start) / delta), 0)


def _value_dependent(op: str, values: list, attrs: dict) -> int | None:
    """Output size of ops whose output shape depends on input values; None if ``op`` is
    not one of them."""
    if op == "Range":
        return _range(values)
    if op == "ConstantOfShape":
        return math.prod(max(d, 0) for d in _ints(values[0]))
    if op == "Expand":
        return math.prod(_broadcast(values[0].shape, _ints(values[1])))
    if op == "Tile":
        return math.prod(d * max(r, 0) for d, r in zip(values[0].shape, _ints(values[1])))
    if op == "Pad":
        pads = _ints(values[1]) if len(values) > 1 and values[1] is not None else \
            list(attrs.get("pads", []))
        shape = list(values[0].shape)
        rank = len(shape)
        if len(pads) == 2 * rank:
            shape = [d + pads[i] + pads[i + rank] for i, d in enumerate(shape)]
        return math.prod(max(d, 0) for d in shape)
    if op == "OneHot":
        return int(np.asarray(values[0]).size) * max(_ints(values[1])[0], 0)
    if op in ("Resize", "Upsample"):
        shape = values[0].shape
        sizes = values[3] if op == "Resize" and len(values) > 3 else None
        if sizes is not None and np.asarray(sizes).size:
            return math.prod(_ints(sizes))
        scales = values[2] if op == "Resize" and len(values) > 2 else (
            values[1] if len(values) > 1 else None)
        if scales is None or not np.asarray(scales).size:
            scales = attrs.get("scales", [1.0] * len(shape))
        factors = [float(f) for f in np.asarray(scales).reshape(-1)]
        return math.prod(math.floor(d * f) for d, f in zip(shape, factors))
    return None


def _inferred(node: Any, values: list, opset: int) -> int | None:
    """Output size by ONNX shape inference from the input shapes (None if unknown)."""
    from onnx import helper, shape_inference

    inputs = []
    seen = set()
    for name, value in zip(node.input, values):
        if name and value is not None and name not in seen:
            seen.add(name)
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype),
                np.asarray(value).shape))
    outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
    graph = helper.make_graph([node], "budget", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - unknown: the caller decides
        return None
    total = 0
    for info in inferred.graph.output:
        dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else None
        if dims is None or not info.type.tensor_type.HasField("shape"):
            return None
        if any(not d.HasField("dim_value") for d in dims):
            return None
        total += math.prod(d.dim_value for d in dims)
    return total


def folded_elements(node: Any, values: list, attrs: dict, opset: int) -> int | None:
    """Elements of all outputs of ``node`` on the constant inputs ``values`` (ndarrays or
    None for missing optional inputs), or None when it cannot be told in advance."""
    try:
        known = _value_dependent(node.op_type, values, attrs)
    except (IndexError, TypeError, ValueError, OverflowError, AttributeError):
        known = None
    if known is not None:
        return known
    return _inferred(node, values, opset)


def infer_shapes_bounded(model: Any, plain: Any = None) -> Any:
    """ONNX shape inference, with data propagation where that is safe.

    Data propagation materialises 1-D tensors dimension by dimension: a ``Range`` of
    10^9 elements fed to a ``Cast`` exhausts memory inside ONNX.  So inference runs first
    without it, and with it only if every ``Range`` output has a known length within
    ``max_folded_elements`` (a ``Range`` whose length only data propagation could tell
    might be that large).  Returns ``model`` unchanged if inference fails.
    """
    import onnx

    from petab_sciml import limits

    if plain is None:
        try:
            plain = onnx.shape_inference.infer_shapes(model, data_prop=False)
        except Exception:  # noqa: BLE001 - shapes are a help, not a requirement
            return model
    budget = limits.current().max_folded_elements
    infos = {vi.name: vi for vi in (list(plain.graph.value_info) + list(plain.graph.output))}
    for node in plain.graph.node:
        if node.op_type != "Range" or node.domain not in ("", "ai.onnx"):
            continue
        info = infos.get(node.output[0])
        dims = info.type.tensor_type.shape.dim if info is not None else []
        if len(dims) != 1 or not dims[0].HasField("dim_value") or \
                dims[0].dim_value > budget:
            return plain
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001
        return plain
