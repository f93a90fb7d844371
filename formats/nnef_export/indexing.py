"""Indexing and joining: getitem (``slice``, ``squeeze``, ``unsqueeze``), cat
(``concat``), stack, chunk (slices), flip (a negative-stride ``slice``) and pad
(``pad`` where NNEF consumers run it, else concatenated slices or constants)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .registry import function
from .writer import _Ident, _Writer


@function("cat", "stack")
def _join(w: _Writer, node: Any, x: Any) -> _Ident:
    b, f = node.bound, node.function
    values = [w.value(r) for r in b["tensors"]]
    rank = w.rank(b["tensors"][0].name) + (1 if f == "stack" else 0)
    return w.op(node.name, "concat" if f == "cat" else "stack", values,
                axis=w.axis(b["dim"], rank))


@function("chunk")
def _chunk(w: _Writer, node: Any, x: Any) -> tuple[_Ident, ...]:
    """torch.chunk as slices of ceil(size / chunks)."""
    b = node.bound
    shape = w.shapes[b["input"].name]
    axis = w.axis(b["dim"], len(shape))
    size, chunks = shape[axis], int(b["chunks"])
    step = -(-size // chunks)
    return tuple(w.op(f"{node.name}_{k}", "slice", x, axes=[axis], begin=[start],
                      end=[min(start + step, size)])
                 for k, start in enumerate(range(0, size, step)))


@function("flip")
def _flip(w: _Writer, node: Any, x: Any) -> _Ident:
    b = node.bound
    shape = w.shapes[b["input"].name]
    dims = b["dims"] if isinstance(b["dims"], (list, tuple)) else [b["dims"]]
    axes = sorted({w.axis(d, len(shape)) for d in dims})
    if not axes:
        return w.op(node.name, "copy", x)
    # nnef_tools' spelling of a full reversal: from the last element to before
    # the first (an end below -size is clamped to -1)
    return w.op(node.name, "slice", x, axes=axes, begin=[-1] * len(axes),
                end=[-2147483647] * len(axes), stride=[-1] * len(axes))


@function("getitem")
def _getitem(w: _Writer, node: Any, x: Any) -> _Ident:
    """Slices and ints as one ``slice`` (then ``squeeze`` of the int axes), Nones as
    ``unsqueeze``; negative steps have no NNEF slice."""
    base, shape = node.name, w.shapes[node.bound["input"].name]
    axes, begin, end, stride, squeeze, unsqueeze = [], [], [], [], [], []
    dim = 0
    out_dim = 0
    for it in _expanded(node.bound["index"], len(shape)):
        if it is None:
            unsqueeze.append(out_dim)
            out_dim += 1
            continue
        size = shape[dim]
        if isinstance(it, dict):
            start, stop, step = it["slice"]
            step = 1 if step is None else step
            if step < 0:
                raise w.error("negative slice steps have no NNEF slice")
            start = 0 if start is None else (start + size if start < 0 else start)
            stop = size if stop is None else (stop + size if stop < 0 else stop)
            start, stop = max(0, min(start, size)), max(0, min(stop, size))
            if (start, stop, step) != (0, size, 1):
                axes.append(dim)
                begin.append(start)
                end.append(stop)
                stride.append(step)
            out_dim += 1
        else:
            i = it + size if it < 0 else it
            axes.append(dim)
            begin.append(i)
            end.append(i + 1)
            stride.append(1)
            squeeze.append(dim)
        dim += 1
    y = x
    if axes:
        y = w.op(f"{base}_slice" if (squeeze or unsqueeze) else base, "slice", y,
                 axes=axes, begin=begin, end=end, stride=stride)
    if squeeze:
        y = w.op(f"{base}_squeeze" if unsqueeze else base, "squeeze", y, axes=squeeze)
    if unsqueeze:
        y = w.op(base, "unsqueeze", y, axes=unsqueeze)
    if y is x:
        y = w.op(base, "copy", x)
    return y


def _expanded(index: Any, rank: int) -> list[Any]:
    """The items of an index with its Ellipsis replaced by whole-axis slices."""
    items = index if isinstance(index, list) else [index]
    n_real = sum(1 for it in items if it != "..." and it is not None)
    expanded: list[Any] = []
    for it in items:
        if it == "...":
            expanded += [{"slice": [None, None, None]}] * (rank - n_real)
        else:
            expanded.append(it)
    return expanded


@function("pad")
def _pad(w: _Writer, node: Any, x: Any) -> _Ident:
    """``F.pad``: NNEF ``pad`` where NNEF consumers commonly run it (3-5-d tensors,
    spatial dimensions only, no circular border), else per-dimension concatenation of
    slices (or constants) of the input; negative pads crop."""
    b, base = node.bound, node.name
    shape, pad, mode = w.shapes[b["input"].name], list(b["pad"]), b["mode"]
    value = 0.0 if b["value"] is None else float(b["value"])
    rank = len(shape)
    pairs = [(0, 0)] * rank
    for k in range(len(pad) // 2):
        pairs[rank - 1 - k] = (int(pad[2 * k]), int(pad[2 * k + 1]))
    grow = [(max(p, 0), max(q, 0)) for p, q in pairs]
    native = (mode in ("constant", "reflect", "replicate") and 3 <= rank <= 5
              and grow[:2] == [(0, 0), (0, 0)])
    y, size = x, list(shape)
    if native and any(p or q for p, q in grow):
        y = w.op(f"{base}_grown" if grow != pairs else base, "pad", y, padding=grow,
                 border=mode, value=value)
        size = [s + p + q for s, (p, q) in zip(size, grow)]
    elif not native:
        for axis, (p, q) in enumerate(grow):
            if p or q:
                y = pad_axis(w, f"{base}_{axis}", y, size, axis, p, q, mode, value)
                size[axis] += p + q
    crop = [(axis, -p if p < 0 else 0, size[axis] + q if q < 0 else size[axis])
            for axis, (p, q) in enumerate(pairs) if p < 0 or q < 0]
    if crop:
        y = w.op(base, "slice", y, axes=[c[0] for c in crop], begin=[c[1] for c in crop],
                 end=[c[2] for c in crop])
    return y if y is not x else w.op(base, "copy", x)


def pad_axis(w: _Writer, base: str, x: _Ident, size: Sequence[int], axis: int, before: int,
             after: int, mode: str, value: float) -> _Ident:
    """Pad one axis of ``x`` (of shape ``size``) by concatenating slices of it (or
    constants) in PyTorch's ``mode``."""
    n = size[axis]

    def piece(i: int, j: int) -> _Ident:
        return w.slice_axis(f"{base}_part", x, axis, i, j)

    if mode == "constant":
        def block(k: int) -> list[_Ident]:
            filled = list(size)
            filled[axis] = k
            return [w.filled(f"{base}_fill", filled, value)] if k else []
        left, right = block(before), block(after)
    elif mode == "replicate":
        left = [piece(0, 1)] * before
        right = [piece(n - 1, n)] * after
    elif mode == "reflect":
        left = [piece(i, i + 1) for i in range(before, 0, -1)]
        right = [piece(n - 2 - j, n - 1 - j) for j in range(after)]
    else:  # circular
        left = [piece(n - before, n)] if before else []
        right = [piece(0, after)] if after else []
    return w.op(base, "concat", [*left, x, *right], axis=axis)
