"""Indexing and joining: getitem (Slice, Gather, Unsqueeze; an element of a recurrent
layer's tuple), cat, stack, chunk (Split), flip (Slice with step -1) and pad (Pad)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from petab_sciml.network import Ref

from .exporter import INT64_MAX, _Exporter, dims
from .registry import function

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
              "circular": "wrap"}
"""F.pad modes -> ONNX Pad modes."""


@function("cat")
def _cat(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("Concat", [ex.operand(r) for r in b["tensors"]], axis=int(b["dim"]))


@function("stack")
def _stack(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    dim = int(b["dim"])
    parts = [ex.op("Unsqueeze", [ex.operand(r), ex.ints([dim])]) for r in b["tensors"]]
    return ex.op("Concat", parts, axis=dim)


@function("chunk")
def _chunk(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> tuple[str, ...]:
    """Split into pieces of ceil(size / chunks) (needs the static size of the axis)."""
    x = ex.input(b)
    shape = ex.shape(x)
    dim = int(b["dim"])
    chunks = int(b["chunks"])
    size = None if shape is None else shape[dim]
    if size is None:
        raise ex.error("chunk needs the static size of its axis; pass input_shapes")
    step = -(-size // chunks)
    sizes = [min(step, size - s) for s in range(0, size, step)]
    if len(sizes) != chunks:
        raise ex.error(f"chunk: a size of {size} does not split into {chunks} pieces")
    return tuple(ex.op("Split", [x, ex.ints(sizes, "split")], chunks, axis=dim))


@function("flip")
def _flip(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    axes = dims(b["dims"])
    if not axes:
        return ex.op("Identity", [x])
    k = len(axes)
    return ex.op("Slice", [x, ex.ints([-1] * k, "starts"), ex.ints([-INT64_MAX - 1] * k, "ends"),
                           ex.ints(axes), ex.ints([-1] * k, "steps")])


def _pad_opset(b: Mapping[str, Any]) -> int:
    """Pad takes its axes as an input from opset 18 (no rank needed); wrap is 19."""
    return 19 if b["mode"] == "circular" else 18


@function("pad", opset=_pad_opset)
def _pad(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    x = ex.input(b)
    pad = [int(p) for p in b["pad"]]
    mode = b["mode"]
    if mode != "constant" and any(p < 0 for p in pad):
        raise ex.error(f"negative pads in {mode} mode have no ONNX equivalent")
    if mode == "circular" and ex.opset < 19:
        raise ex.error("circular padding needs opset 19 or newer")
    k = len(pad) // 2
    begins, ends = pad[0::2], pad[1::2]  # last axis first
    if ex.opset >= 18:
        args = [x, ex.ints(begins + ends, "pads")]
        axes = ex.ints([-1 - i for i in range(k)])
    else:
        r = ex.need_rank(x, "pad at opset 17")
        full_b, full_e = [0] * r, [0] * r
        for i in range(k):
            full_b[r - 1 - i], full_e[r - 1 - i] = begins[i], ends[i]
        args = [x, ex.ints(full_b + full_e, "pads")]
        axes = None
    value = b["value"]
    if mode == "constant" and value is not None and value != 0:
        args.append(ex.const(float(value), name="value"))
    elif axes is not None:
        args.append("")
    if axes is not None:
        args.append(axes)
    return ex.op("Pad", args, mode=_PAD_MODES[mode])


@function("getitem")
def _getitem(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> Any:
    """Slice for the slices, Gather for the ints, Unsqueeze for the Nones.  The input
    axes of the items before an Ellipsis count from the left, those after it from the
    right (negative), so that the rank is not needed."""
    whole = ex.value[b["input"].name] if isinstance(b["input"], Ref) else None
    if isinstance(whole, tuple):  # an element of a recurrent layer's (output, h_n)
        return whole[b["index"]]
    x = ex.input(b)
    index = b["index"]
    items = list(index) if isinstance(index, list) else [index]
    if items.count("...") > 1:
        raise ex.error("an index with more than one Ellipsis")
    if "..." in items:
        k = items.index("...")
        before, after = items[:k], items[k + 1:]
    else:
        before, after = items, []
    slices: list[tuple[int, int, int, int]] = []
    ints: list[tuple[int, int]] = []
    axis = 0
    for it in before:
        if it is not None:
            _classify(ex, it, axis, slices, ints)
            axis += 1
    axis = -sum(1 for it in after if it is not None)
    for it in after:
        if it is not None:
            _classify(ex, it, axis, slices, ints)
            axis += 1
    y = x
    if slices:
        axes, starts, ends, steps = zip(*slices)
        y = ex.op("Slice", [y, ex.ints(starts, "starts"), ex.ints(ends, "ends"),
                            ex.ints(axes), ex.ints(steps, "steps")])
    for a, i in sorted((t for t in ints if t[0] >= 0), reverse=True) + \
            sorted(t for t in ints if t[0] < 0):
        y = ex.op("Gather", [y, ex.const(np.int64(i), dtype=np.int64, name="index")], axis=a)
    new_axes = _new_axes(before, after)
    if new_axes:
        y = ex.op("Unsqueeze", [y, ex.ints(new_axes)])
    if y == x:
        y = ex.op("Identity", [x])
    return y


def _classify(ex: _Exporter, item: Any, axis: int, slices: list, ints: list) -> None:
    """Record an int item in ``ints``, a slice that is not the whole axis in ``slices``."""
    if isinstance(item, int) and not isinstance(item, bool):
        ints.append((axis, item))
        return
    start, stop, step = item["slice"]
    step = 1 if step is None else int(step)
    if step <= 0:
        raise ex.error("slice steps must be positive")
    if start is None and stop is None and step == 1:
        return
    slices.append((axis, 0 if start is None else int(start),
                   INT64_MAX if stop is None else int(stop), step))


def _new_axes(before: list[Any], after: list[Any]) -> list[int]:
    """Output axes of the None items (from the left before an Ellipsis, from the right
    after it)."""
    new_axes = []
    pos = 0
    for it in before:
        if it is None:
            new_axes.append(pos)
            pos += 1
        elif not isinstance(it, int):
            pos += 1
    pos = -1
    for it in reversed(after):
        if it is None:
            new_axes.append(pos)
            pos -= 1
        elif not isinstance(it, int):
            pos -= 1
    return new_axes
