"""``parameterScale``: the scale on which an estimated mechanistic parameter is optimized.

Nominal values, bounds and the objective's parameter vector ``w`` stay linear; the native
trainable models (JAX and PyTorch) hold ``lin`` values as they are, ``log`` values as
their natural logarithm and ``log10`` values as their decadic logarithm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

SCALE_CODES = {"lin": 0, "log": 1, "log10": 2}


def to_scale(values: np.ndarray, scales: Sequence[str]) -> np.ndarray:
    """Linear values -> values on their scale (float64; 0 -> -inf on log scales)."""
    out = np.asarray(values, np.float64).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, s in enumerate(scales):
            if s == "log":
                out[i] = np.log(out[i])
            elif s == "log10":
                out[i] = np.log10(out[i])
    return out


def from_scale(values: np.ndarray, scales: Sequence[str]) -> np.ndarray:
    """Values on their scale -> linear values (float64)."""
    out = np.asarray(values, np.float64).copy()
    for i, s in enumerate(scales):
        if s == "log":
            out[i] = np.exp(out[i])
        elif s == "log10":
            out[i] = 10.0 ** out[i]
    return out


def scale_codes(scales: Sequence[str]) -> np.ndarray:
    """``int8`` codes of ``scales`` (:data:`SCALE_CODES`)."""
    return np.array([SCALE_CODES[s] for s in scales], np.int8)


def on_scale(values: Iterable[float], scale: str) -> tuple[float, ...]:
    """Linear ``values`` (Python floats, e.g. bounds) on ``scale``: ``lin``, ``log``
    (natural) or ``log10``; 0 and negative values map to -inf, infinities stay."""
    if scale == "lin":
        return tuple(values)
    log = math.log if scale == "log" else math.log10
    return tuple(-math.inf if v <= 0 else log(v) if math.isfinite(v) else v for v in values)
