"""Resize and Upsample as constant interpolation matrices, one per resized axis.

Every mode of ONNX's Resize (``nearest`` with its four rounding rules, ``linear``,
``cubic``, each with or without ``antialias``; every coordinate transformation;
``exclude_outside``; ``axes``; ``keep_aspect_ratio_policy``) is separable: along one
axis, output ``j`` is a fixed weighted sum of input elements.  With the input's static
shape known at import, each resized axis becomes one ``matmul`` with a constant
``(n_out, n_in)`` matrix (a buffer of the ``constants`` group), and
``tf_crop_and_resize``'s ``extrapolation_value`` one added constant.  Both backends run
that as they run any product, with gradients, and no interpolation code of their own.

The weights follow the operator's definition (opset 19): output coordinate ``y`` maps to
``x`` in the input by the coordinate transformation; the kernel's points are the ``n``
input indices around ``x`` (the left one preferred at a tie), edge-padded (clamped), with
``exclude_outside`` zeroing and renormalising the weights of points outside the input.
Before opset 11 (Upsample, Resize-10) the coordinates are ``asymmetric`` and nearest
rounds down when upsampling and up when downsampling, as onnxruntime does.

A product gives ``0 * inf = nan``: where an input holds an infinite value, a nearest
resize spreads ``nan`` into the output elements that did not copy that element.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from petab_sciml import limits

from .importer import _Importer
from .registry import handles
from .values import _C

_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                     "align_corners", "asymmetric", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(n_in: int, n_out: int, scale: float, mode: str,
                       roi: tuple[float, float] | None = None) -> np.ndarray:
    """Input coordinate of each output index along one axis (``float64``, ``(n_out,)``)
    for coordinate transformation ``mode``; ``scale`` is the axis's float scale (for
    ``sizes``, ``n_out / n_in``)."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in   # the "length_resized" of the definition, a float
    if mode == "asymmetric":
        return y / scale
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    if mode == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if width == 1:
            x = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x = y * (end - start) * (n_in - 1) / (width - 1)
        return x + start * (n_in - 1)
    raise ValueError(f"unknown coordinate transformation {mode!r}")


def _kernel(ratio: np.ndarray, scale: float, mode: str, nearest: str, cubic_a: float,
            antialias: bool) -> tuple[np.ndarray, int]:
    """Weights ``(n_out, n)`` of the ``n`` points ``left - n/2 + 1 + k`` (``left`` the
    point at or just below ``x``, ``ratio = x - left`` in ``(0, 1]``), and the first
    point's offset from ``left``."""
    r = ratio[:, None]
    if mode == "nearest":
        whole = ratio == 1.0
        if nearest == "round_prefer_floor":
            right = ratio > 0.5
        elif nearest == "round_prefer_ceil":
            right = ratio >= 0.5
        elif nearest == "floor":
            right = np.zeros_like(whole)
        else:  # ceil
            right = np.ones_like(whole)
        right = right | whole
        return np.stack([~right, right], axis=1).astype(np.float64), 0
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        first = int(math.floor(-1 / s)) + 1
        offsets = np.arange(first, 2 - first, dtype=np.float64)
        weights = np.clip(1 - np.abs((offsets[None, :] - r) * s), 0, 1)
    else:  # cubic (Keys, with A = cubic_coeff_a)
        first = int(math.floor(-2 / s)) + 1
        offsets = np.arange(first, 2 - first, dtype=np.float64)
        d = np.abs((offsets[None, :] - r) * s)
        a = cubic_a
        near = ((a + 2) * d - (a + 3)) * d * d + 1
        far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
        weights = np.where(d <= 1, near, np.where(d < 2, far, 0.0))
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return weights, first


def interpolation_matrix(n_in: int, n_out: int, scale: float, *, mode: str,
                         coordinate_mode: str, nearest_mode: str = "round_prefer_floor",
                         cubic_a: float = -0.75, exclude_outside: bool = False,
                         antialias: bool = False, roi: tuple[float, float] | None = None,
                         legacy_nearest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``(n_out, n_in)`` matrix of a Resize along one axis, and a bool ``(n_out,)``
    mask of the outputs that ``tf_crop_and_resize`` extrapolates (their rows are zero;
    the caller adds the extrapolation value).  ``legacy_nearest``: opset 10 and older,
    where nearest rounds down when upsampling and up when downsampling."""
    x = source_coordinates(n_in, n_out, scale, coordinate_mode, roi)
    if legacy_nearest and mode == "nearest":
        index = np.floor(x) if scale >= 1 else np.ceil(x)
        weights = np.ones((n_out, 1))
        points = np.clip(index.astype(np.int64), 0, n_in - 1)[:, None]
    else:
        left = np.floor(x)
        whole = x == left
        left = np.where(whole, x - 1, left)
        ratio = x - left
        weights, first = _kernel(ratio, scale, mode, nearest_mode, cubic_a, antialias)
        points = left.astype(np.int64)[:, None] + first + np.arange(weights.shape[1])[None, :]
        if exclude_outside:
            weights = np.where((points < 0) | (points >= n_in), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        points = np.clip(points, 0, n_in - 1)
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.repeat(np.arange(n_out), points.shape[1]), points.reshape(-1)),
              weights.reshape(-1))
    outside = np.zeros(n_out, dtype=bool)
    if coordinate_mode == "tf_crop_and_resize":
        outside = (x < 0) | (x > n_in - 1)
        matrix[outside] = 0.0
    return matrix, outside


# ---------------------------------------------------------------- the node
def _text(value: Any, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(im: _Importer, node: Any, index: int, what: str) -> np.ndarray | None:
    """Input ``index`` as a constant, or None where it is absent or empty."""
    value = im.static(node, index, what)
    if value is None or np.asarray(value).size == 0:
        return None
    return np.asarray(value)


def _targets(im: _Importer, node: Any, shape: tuple[int, ...], at: dict
             ) -> tuple[list[int], list[float], np.ndarray | None]:
    """Per axis of the input: the output size and the float scale; the roi (length
    ``2 * rank``) where given."""
    rank = len(shape)
    legacy = node.op_type == "Upsample" or im.opset < 11
    if legacy:
        scales = (np.asarray(at["scales"], np.float32) if "scales" in at
                  else _optional(im, node, 1, "scales"))
        roi, sizes, axes = None, None, list(range(rank))
    else:
        roi = _optional(im, node, 1, "roi")
        scales = _optional(im, node, 2, "scales")
        sizes = _optional(im, node, 3, "sizes")
        axes = [im.norm_axis(node, int(a), rank) for a in at.get("axes", range(rank))]
    if (scales is None) == (sizes is None):
        raise im.error(node, "exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if len(given) != len(axes) or len(set(axes)) != len(axes):
        raise im.error(node, f"{'scales' if sizes is None else 'sizes'} has {len(given)} "
                       f"entries for {len(axes)} distinct axes")
    full_roi = None
    if roi is not None:
        if roi.size != 2 * len(axes):
            raise im.error(node, f"roi has {roi.size} entries; expected {2 * len(axes)}")
        full_roi = np.array([0.0] * rank + [1.0] * rank)
        for i, a in enumerate(axes):
            full_roi[a], full_roi[rank + a] = roi[i], roi[len(axes) + i]
    out = list(shape)
    factor = [1.0] * rank
    if sizes is not None:
        for a, n in zip(axes, sizes.astype(np.int64), strict=True):
            out[a], factor[a] = int(n), int(n) / shape[a]
        policy = _text(at.get("keep_aspect_ratio_policy"), "stretch")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise im.error(node, f"keep_aspect_ratio_policy={policy!r} is not one of "
                           "stretch, not_larger, not_smaller")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(factor[a] for a in axes)
            for a in axes:
                factor[a], out[a] = common, int(common * shape[a] + 0.5)
    else:
        if np.any(scales <= 0):
            raise im.error(node, f"scales must be positive, got {scales.tolist()}")
        for a, s in zip(axes, scales, strict=True):
            # the product in the scales' own precision, as onnxruntime computes it
            out[a] = int(np.floor(s * scales.dtype.type(shape[a])))
            factor[a] = float(s)
        if full_roi is not None and np.any(full_roi != np.array([0.0] * rank + [1.0] * rank)):
            raise im.error(node, "a roi with scales (not sizes) is not supported: the ONNX "
                           "definition and its reference implementation size the output "
                           "differently")
    return out, factor, full_roi


@handles("Resize", "Upsample")
def _resize(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    shape = im.static_shape(ins[0])
    if shape is None:
        raise im.error(node, f"{node.op_type} needs the input's static shape (ONNX shape "
                       "inference found none)")
    legacy = node.op_type == "Upsample" or im.opset < 11
    mode = _text(at.get("mode"), "nearest")
    coordinate_mode = "asymmetric" if legacy else _text(
        at.get("coordinate_transformation_mode"), "half_pixel")
    nearest_mode = _text(at.get("nearest_mode"), "round_prefer_floor")
    allowed = ("nearest", "linear") if legacy else ("nearest", "linear", "cubic")
    if legacy and mode == "bilinear":  # Upsample-7's spelling
        mode = "linear"
    if mode not in allowed:
        raise im.error(node, f"mode={mode!r} is not one of {', '.join(allowed)}")
    if coordinate_mode not in _COORDINATE_MODES:
        raise im.error(node, f"coordinate_transformation_mode={coordinate_mode!r} is not one "
                       f"of {', '.join(_COORDINATE_MODES)}")
    if nearest_mode not in _NEAREST_MODES:
        raise im.error(node, f"nearest_mode={nearest_mode!r} is not one of "
                       f"{', '.join(_NEAREST_MODES)}")
    antialias = bool(at.get("antialias", 0))
    if antialias and mode == "nearest":
        raise im.error(node, "antialias is defined for linear and cubic modes only")
    out, factor, roi = _targets(im, node, shape, at)
    rank = len(shape)
    y = im.tensor(ins[0], node)
    pending = [a for a in range(rank) if out[a] != shape[a] or factor[a] != 1.0
               or coordinate_mode == "tf_crop_and_resize"]
    for a in list(pending):
        if shape[a] == 0 or out[a] == 0:
            raise im.error(node, f"axis {a}: a resize from or to size 0 is not supported")
        # a constant computed at import, budgeted as folded constants are
        limits.check("max_folded_elements", f"node {node.name or node.op_type!r}: the "
                     f"{out[a]} x {shape[a]} interpolation matrix of axis {a}",
                     shape[a] * out[a])
    steps = []
    for a in pending:
        matrix, outside = interpolation_matrix(
            shape[a], out[a], factor[a], mode=mode, coordinate_mode=coordinate_mode,
            nearest_mode=nearest_mode, cubic_a=float(at.get("cubic_coeff_a", -0.75)),
            exclude_outside=bool(at.get("exclude_outside", 0)), antialias=antialias,
            roi=None if roi is None else (float(roi[a]), float(roi[rank + a])),
            legacy_nearest=legacy)
        extrapolation = float(at.get("extrapolation_value", 0.0))
        if not outside.any() and matrix.shape[0] == matrix.shape[1] \
                and np.array_equal(matrix, np.eye(matrix.shape[0])):
            continue
        steps.append((a, matrix, outside, extrapolation))
    if not steps:
        im.alias(node, 0, ins[0])
        return
    for i, (a, matrix, outside, extrapolation) in enumerate(steps):
        last = i == len(steps) - 1
        add = outside.any() and extrapolation != 0.0
        name = im.out_name(node) if last and not add else None
        y = _along_axis(im, node, y, a, rank, matrix, name)
        if add:
            fill = np.where(outside, extrapolation, 0.0).reshape((-1,) + (1,) * (rank - 1 - a))
            y = im.emit("add", [y, im.tensor(_C(fill, "extrapolation"), node)],
                        name=im.out_name(node) if last else None)
    im.bind(node, 0, y, out)


def _along_axis(im: _Importer, node: Any, x: str, axis: int, rank: int, matrix: np.ndarray,
                name: str | None) -> str:
    """``matrix`` applied along ``axis`` of ``x``: ``x @ M^T`` on the last axis,
    ``M @ x`` on the one before, the last axis's product between two transposes
    elsewhere."""
    if axis == rank - 1:
        return im.emit("matmul", [x, im.tensor(_C(matrix.T.copy(), "interpolation"), node)],
                       name=name)
    if axis == rank - 2:
        return im.emit("matmul", [im.tensor(_C(matrix, "interpolation"), node), x], name=name)
    moved = im.emit("transpose", [x], {"dim0": axis, "dim1": rank - 1})
    product = im.emit("matmul", [moved, im.tensor(_C(matrix.T.copy(), "interpolation"),
                                                  node)])
    return im.emit("transpose", [product], {"dim0": axis, "dim1": rank - 1}, name=name)
