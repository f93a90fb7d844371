"""Reductions: sum, mean, amax, amin, prod (Reduce*) and cumsum (CumSum)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .exporter import _Exporter, dims
from .registry import function

_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "amax": "ReduceMax",
           "amin": "ReduceMin"}


@function(*_REDUCE)
def _reduce(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    dim = b["dim"]  # None or [] (PyTorch): every axis
    axes = None if dim is None else dims(dim)
    return ex.reduce(_REDUCE[fn], ex.input(b), axes or None, bool(b["keepdim"]))


@function("prod")
def _prod(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    dim = b["dim"]
    return ex.reduce("ReduceProd", ex.input(b), None if dim is None else [int(dim)],
                     bool(b["keepdim"]))


@function("cumsum")
def _cumsum(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("CumSum", [ex.input(b), ex.const(np.int64(b["dim"]), dtype=np.int64,
                                                  name="axis")])
