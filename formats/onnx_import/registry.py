"""The registry of ONNX op converters: one function per op type, found by name.

Each module of this package converts one family of ops (``conv.py`` lifts Conv and
ConvTranspose, ``pooling.py`` the pools, ...) and registers its functions with
:func:`handles`.  A converter is called as ``fn(importer, node, inputs)`` with the node's
input values (see :mod:`.values`) and binds the node's outputs in ``importer.env``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HANDLERS: dict[str, Any] = {}
PREPASSES: list[Callable[[Any], None]] = []
"""Functions run on the importer before any node is converted (a family that needs to
claim nodes ahead, such as the gate reordering in front of recurrent ops)."""
NO_FOLD = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike",
           "Bernoulli", "Multinomial", "If"}
"""Ops never folded on their own: random ones, and If (its branches read outer values)."""


def handles(*ops: str) -> Callable[[Any], Any]:
    """Register the decorated function as the converter of ``ops``."""
    def deco(fn):
        for op in ops:
            if op in HANDLERS:   # import order would decide which one runs
                raise RuntimeError(f"two handlers for ONNX op {op}: {HANDLERS[op].__name__} "
                                   f"and {fn.__name__}")
            HANDLERS[op] = fn
        return fn
    return deco


def prepass(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """Register ``fn(importer)`` to run before the conversion."""
    PREPASSES.append(fn)
    return fn
