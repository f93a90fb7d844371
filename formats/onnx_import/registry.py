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
NO_FOLD = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike",
           "Bernoulli", "Multinomial"}


def handles(*ops: str) -> Callable[[Any], Any]:
    """Register the decorated function as the converter of ``ops``."""
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco
