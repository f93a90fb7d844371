"""The registries of ONNX exporters: one function per layer type and per catalogue
function, found by name.

A layer exporter is called as ``fn(ex, layer, ins)`` with the layer and the ONNX values
of its inputs (a tuple for a recurrent state ``(h_0, c_0)``); a function exporter as
``fn(ex, function, bound)`` with the node's bound arguments (:class:`~petab_sciml.network.Ref`
for tensors).  Both return the ONNX value name of the result (a tuple of names for a
tuple result).  ``opset`` gives the lowest opset at which the exporter writes the native
op: a number, or a function of the layer's config / the node's bound arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..op_registry import Handler, Registry

MIN_EXPORT_OPSET = 17
"""Oldest opset written."""

LAYERS = Registry("layer type")
FUNCTIONS = Registry("function")
LAYER_OPSETS: dict[str, Callable[[Mapping[str, Any]], int]] = {}
FUNCTION_OPSETS: dict[str, Callable[[Mapping[str, Any]], int]] = {}

OpsetRule = int | Callable[[Mapping[str, Any]], int] | None


def _register(registry: Registry, opsets: dict[str, Callable[[Mapping[str, Any]], int]],
              names: tuple[str, ...], opset: OpsetRule) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        registry.handles(*names)(fn)
        if opset is not None:
            rule = opset if callable(opset) else (lambda _args, need=int(opset): need)
            opsets.update(dict.fromkeys(names, rule))
        return fn
    return register


def layer(*types: str, opset: OpsetRule = None) -> Callable[[Handler], Handler]:
    """Register the decorated function as the exporter of the layer ``types``."""
    return _register(LAYERS, LAYER_OPSETS, types, opset)


def function(*names: str, opset: OpsetRule = None) -> Callable[[Handler], Handler]:
    """Register the decorated function as the exporter of the catalogue functions
    ``names``."""
    return _register(FUNCTIONS, FUNCTION_OPSETS, names, opset)
