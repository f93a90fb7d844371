"""Reductions: ``mean_reduce``, ``sum_reduce``, ``max_reduce``, ``min_reduce`` (kept
dimensions; no axes reduces nothing)."""

from __future__ import annotations

from typing import Any

from .lifter import _axes, _input, _Lifter, _out, _rank
from .registry import handles

_REDUCE = {"mean_reduce": "mean", "sum_reduce": "sum", "max_reduce": "amax",
           "min_reduce": "amin"}


@handles(*_REDUCE)
def _reduce(lf: _Lifter, op: Any) -> Any:
    function = _REDUCE[op.name]
    axes = _axes(lf, op.attribs["axes"], _rank(lf, op))
    if not axes:  # NNEF reduces nothing; PyTorch would reduce every dimension
        return _input(lf, op, "input")
    return lf.call(function, {"input": _input(lf, op, "input"), "dim": axes,
                              "keepdim": True}, base=_out(op))
