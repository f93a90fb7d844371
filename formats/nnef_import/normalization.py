"""``batch_normalization`` -> BatchNormNd (statistics as buffers) and
``mean_variance_normalization`` -> InstanceNormNd, or BatchNormNd without running
statistics."""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml.formats.graph_building import Tensor

from .lifter import _Array, _axes, _input, _Lifter, _out, _rank
from .registry import handles


def _vector(lf: _Lifter, value: Any, what: str, channels: int | None) -> _Array | float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    array = lf.array(value, what)
    if array.constant and array.data.size and np.all(array.data == array.data.flat[0]):
        return float(array.data.flat[0])
    if channels is not None and array.data.size != channels:
        raise lf.error(f"{what} has {array.data.size} values; expected {channels}")
    return array


def _norm_rank(lf: _Lifter, op: Any) -> int:
    rank = _rank(lf, op)
    if rank is None:
        raise lf.error("normalization needs the input rank (shapes could not be inferred)")
    return rank


def _claim_affine(lf: _Lifter, op: Any, layer_id: str, scale: Any, offset: Any, c: int
                  ) -> None:
    """A norm's scale/offset as its weight/bias (a number where the other is a variable
    fills the array); numbers alone must be 1/0 (``affine=False``)."""
    if isinstance(scale, _Array) or isinstance(offset, _Array):
        for name, value in (("weight", scale), ("bias", offset)):
            if isinstance(value, _Array):
                lf.claim(value, layer_id, name, (c,))
            else:
                lf.params.setdefault(layer_id, {})[name] = np.full((c,), value, np.float32)
    elif scale != 1.0 or offset != 0.0:
        raise lf.error(f"{op.name} with constant scale/offset other than 1/0")


@handles("batch_normalization")
def _batch_norm(lf: _Lifter, op: Any) -> Tensor:
    rank = _norm_rank(lf, op)
    n = {2: 1, 3: 1, 4: 2, 5: 3}.get(rank)
    if n is None:
        raise lf.error(f"batch_normalization of a rank-{rank} tensor is not supported")
    mean = lf.array(_input(lf, op, "mean"), "batch_normalization mean")
    var = lf.array(_input(lf, op, "variance"), "batch_normalization variance")
    c = int(mean.data.size)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    affine = isinstance(offset, _Array) or isinstance(scale, _Array)
    arrays = [a.base for a in (scale, offset, mean, var) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    lf.claim(mean, layer_id, "running_mean", (c,))
    lf.claim(var, layer_id, "running_var", (c,))
    _claim_affine(lf, op, layer_id, scale, offset, c)
    args = {"num_features": c, "eps": float(op.attribs["epsilon"]), "affine": affine,
            "track_running_stats": True}
    return lf.add_layer(layer_id, f"BatchNorm{n}d", args, [_input(lf, op, "input")], _out(op))


@handles("mean_variance_normalization")
def _mvn(lf: _Lifter, op: Any) -> Tensor:
    rank = _norm_rank(lf, op)
    axes = _axes(lf, op.attribs["axes"], rank)
    n = len(axes)
    # over the batch and spatial axes: a BatchNorm normalising with batch statistics
    batch = rank in (2, 3, 4, 5) and axes == [0, *range(2, rank)]
    if not batch and (n not in (1, 2, 3) or axes != list(range(rank - n, rank))
                      or rank not in (n + 1, n + 2)):
        raise lf.error(f"mean_variance_normalization over axes {axes} of a rank-{rank} "
                       "tensor is neither an instance norm nor a batch norm")
    shape = lf.shape(op.inputs["input"])
    c = int(shape[1] if batch else shape[rank - n - 1])
    scale = _vector(lf, _input(lf, op, "scale"), "scale", c)
    offset = _vector(lf, _input(lf, op, "offset"), "offset", c)
    affine = isinstance(scale, _Array) or isinstance(offset, _Array)
    arrays = [a.base for a in (scale, offset) if isinstance(a, _Array)]
    layer_id = lf.layer_id(_out(op), arrays)
    _claim_affine(lf, op, layer_id, scale, offset, c)
    args = {"num_features": c, "eps": float(op.attribs.get("epsilon", 1e-5)),
            "affine": affine, "track_running_stats": False}
    layer_type = f"BatchNorm{max(rank - 2, 1)}d" if batch else f"InstanceNorm{n}d"
    return lf.add_layer(layer_id, layer_type, args, [_input(lf, op, "input")], _out(op))
