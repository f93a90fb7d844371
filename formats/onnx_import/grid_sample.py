"""GridSample and AffineGrid: sampling at coordinates the network computes.

GridSample's coordinates are runtime values, so no index is known at import.  Along each
spatial axis the sampling is instead a weight matrix ``A[n, out, j]`` computed by the
network: for each kernel tap ``o`` (one for nearest, two for linear, four for cubic)
around the sampling point, the tap's weight where the tap's (padded) index equals ``j``,
summed over taps.  The input is then contracted with the matrices, the last axis by a
``matmul`` and the others by a product and a sum.  Gradients flow to the input and, through
the weights, to the grid.  The matrices are ``N * prod(out) * size`` each: fine for the
small images of a SciML network, heavy for large ones.

The definition followed is ONNX's (opset 20/22, as PyTorch's ``grid_sample``):
coordinates are denormalised (``align_corners``), nearest rounds half to even, a
coordinate outside the border range is clamped (``border``) or reflected
(``reflection``), and each tap index is padded with zeros, clamped or reflected.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import _Importer
from .registry import handles
from .values import _C

_CUBIC_A = -0.75


def _reflect(im: _Importer, v: str, low: float, high: float) -> str:
    """``v`` folded into ``[low, high]`` by reflection at the borders (any number of
    times): ``low + t`` or ``low + 2 r - t`` with ``t = (v - low) mod 2 r``."""
    span = high - low
    if span == 0:   # a one-pixel axis with align_corners: every point reflects onto it
        return im.emit("add", [im.emit("mul", [v, 0.0]), low])
    t = im.emit("remainder", [im.emit("sub", [v, low]), 2 * span])
    folded = im.emit("where", [im.emit("gt", [t, span]), im.emit("sub", [2 * span, t]), t])
    return im.emit("add", [folded, low])


def _padded(im: _Importer, index: str, size: int, padding: str, low: float, high: float
            ) -> str:
    """A tap's index as the input is read there: itself (zeros: no ``j`` matches outside
    the input), clamped, or reflected."""
    if padding == "zeros":
        return index
    if padding == "border":
        return im.emit("clamp", [index], {"min": 0.0, "max": float(size - 1)})
    return _outside_replaced(im, index, low, high, _reflect(im, index, low, high))


def _outside_replaced(im: _Importer, v: str, low: float, high: float, moved: str) -> str:
    """``moved`` where ``v`` lies outside ``[low, high]``, ``v`` inside."""
    above = im.emit("where", [im.emit("gt", [v, high]), moved, v])
    return im.emit("where", [im.emit("lt", [v, low]), moved, above])


def _cubic_weights(im: _Importer, t: str) -> list[str]:
    """Keys' cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2 from
    ``floor(x)``, for ``t = x - floor(x)``."""
    a = _CUBIC_A

    def far(d: str) -> str:   # 1 <= d < 2
        return im.emit("sub", [im.emit("mul", [im.emit("add", [im.emit("mul", [
            im.emit("sub", [im.emit("mul", [d, a]), 5 * a]), d]), 8 * a]), d]), 4 * a])

    def near(d: str) -> str:  # d <= 1
        return im.emit("add", [im.emit("mul", [im.emit("mul", [
            im.emit("sub", [im.emit("mul", [d, a + 2]), a + 3]), d]), d]), 1.0])

    one_minus = im.emit("sub", [1.0, t])
    return [far(im.emit("add", [t, 1.0])), near(t), near(one_minus),
            far(im.emit("sub", [2.0, t]))]


def _axis_matrix(im: _Importer, node: Any, coordinate: str, size: int, mode: str,
                 padding: str, align: bool) -> str:
    """``A[n, out..., j]`` along one axis of ``size`` for normalised coordinates
    ``coordinate`` (shape ``(N, out...)``)."""
    if align:
        v = im.emit("mul", [im.emit("add", [coordinate, 1.0]), (size - 1) / 2.0])
        low, high = 0.0, float(size - 1)
    else:
        v = im.emit("div", [im.emit("sub", [im.emit("mul", [im.emit("add", [coordinate, 1.0]),
                                                            float(size)]), 1.0]), 2.0])
        low, high = -0.5, size - 0.5
    if mode == "nearest":
        v = im.emit("round", [v])
    if padding != "zeros":
        moved = (im.emit("clamp", [v], {"min": 0.0, "max": float(size - 1)})
                 if padding == "border" else _reflect(im, v, low, high))
        v = _outside_replaced(im, v, low, high, moved)
    positions = im.tensor(_C(np.arange(size, dtype=np.float64), "grid_positions"), node)
    if mode == "nearest":
        taps = [(v, None)]
    else:
        base = im.emit("floor", [v])
        t = im.emit("sub", [v, base])
        weights = ([im.emit("sub", [1.0, t]), t] if mode == "linear"
                   else _cubic_weights(im, t))
        offsets = [0, 1] if mode == "linear" else [-1, 0, 1, 2]
        taps = [(im.emit("add", [base, float(o)]) if o else base, w)
                for o, w in zip(offsets, weights, strict=True)]
    total = None
    for index, weight in taps:
        index = _padded(im, index, size, padding if mode != "nearest" or padding == "zeros"
                        else "zeros", low, high)
        hit = im.emit("eq", [im.emit("unsqueeze", [index], {"dim": -1}), positions])
        if weight is None:  # a constant one, so that the result has the network's dtype
            weight = im.tensor(_C(np.ones(()), "grid_one"), node)
        else:
            weight = im.emit("unsqueeze", [weight], {"dim": -1})
        term = im.emit("where", [hit, weight, 0.0])
        total = term if total is None else im.emit("add", [total, term])
    return total


@handles("GridSample")
def _grid_sample(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    mode = at.get("mode", "linear" if im.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = at.get("padding_mode", "zeros")
    align = bool(at.get("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise im.error(node, f"mode={mode!r} is not one of nearest, linear, cubic")
    if padding not in ("zeros", "border", "reflection"):
        raise im.error(node, f"padding_mode={padding!r} is not one of zeros, border, "
                       "reflection")
    x_shape, grid_shape = im.static_shape(ins[0]), im.static_shape(ins[1])
    if x_shape is None or grid_shape is None:
        raise im.error(node, "GridSample needs the static shapes of X and grid (ONNX shape "
                       "inference found none)")
    k = len(x_shape) - 2
    if k < 1 or len(grid_shape) != k + 2 or grid_shape[-1] != k or grid_shape[0] != x_shape[0]:
        raise im.error(node, f"X {list(x_shape)} and grid {list(grid_shape)} do not match: "
                       "expected (N, C, D1..Dk) and (N, O1..Ok, k)")
    if mode == "cubic" and k != 2:
        raise im.error(node, "cubic mode is defined for 4-D inputs only")
    n, c, spatial, out = x_shape[0], x_shape[1], x_shape[2:], grid_shape[1:-1]
    points = int(np.prod(out))
    grid = im.tensor(ins[1], node)
    matrices = []
    for axis in range(k):  # grid[..., 0] is the last spatial axis
        coordinate = im.emit("getitem", [grid], {"index": ["...", k - 1 - axis]})
        matrix = _axis_matrix(im, node, coordinate, spatial[axis], mode, padding, align)
        matrices.append(im.emit("reshape", [matrix], {"shape": [n, points, spatial[axis]]}))
    # the last axis by a matmul: (N, C * D1..Dk-1, Dk) @ (N, Dk, P)
    x = im.emit("reshape", [im.tensor(ins[0], node)], {"shape": [n, -1, spatial[-1]]})
    y = im.emit("matmul", [x, im.emit("transpose", [matrices[-1]], {"dim0": 1, "dim1": 2})])
    y = im.emit("reshape", [y], {"shape": [n, c, *spatial[:-1], points]})
    for axis in range(k - 2, -1, -1):  # the others: product and sum over the axis
        a = im.emit("transpose", [matrices[axis]], {"dim0": 1, "dim1": 2})   # (N, Da, P)
        # y is (N, C, D1..Da, P): A broadcast over C and the axes before Da
        a = im.emit("reshape", [a], {"shape": [n, 1] + [1] * axis + [spatial[axis], points]})
        y = im.emit("sum", [im.emit("mul", [y, a])], {"dim": [2 + axis]})
    im.bind(node, 0, im.emit("reshape", [y], {"shape": [n, c, *out]},
                             name=im.out_name(node)), (n, c, *out))


@handles("AffineGrid")
def _affine_grid(im: _Importer, node: Any, ins: list) -> None:
    """``base @ theta^T``: the base grid (normalised pixel centres, or corners with
    ``align_corners``, and a column of ones) is a constant."""
    size = [int(s) for s in np.asarray(im.static(node, 1, "size")).reshape(-1)]
    align = bool(im.attrs(node).get("align_corners", 0))
    if len(size) not in (4, 5):
        raise im.error(node, f"size {size} must be (N, C, H, W) or (N, C, D, H, W)")
    spatial = size[2:]
    axes = []
    for d in spatial:
        if align:
            axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(1))
        else:
            axes.append((np.arange(d) * 2.0 + 1.0) / d - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")          # per spatial axis, (D.., H, W)
    columns = [m.reshape(-1) for m in reversed(mesh)]  # x (W) first, then y, z
    base = np.stack(columns + [np.ones(columns[0].size)], axis=1)   # (P, k + 1)
    theta = im.tensor(ins[0], node)
    grid = im.emit("matmul", [im.tensor(_C(base, "affine_grid_base"), node),
                              im.emit("transpose", [theta], {"dim0": 1, "dim1": 2})])
    out = [size[0], *spatial, len(spatial)]
    im.bind(node, 0, im.emit("reshape", [grid], {"shape": out}, name=im.out_name(node)), out)

