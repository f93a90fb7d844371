"""The registries of NNEF writers: one function per layer type and per catalogue
function, found by name.

A layer writer is called as ``fn(w, call)`` with the writer and a
:class:`~.writer.LayerCall`; a function writer as ``fn(w, node, x)`` with the node (its
``name``, ``function`` and ``bound`` arguments) and the NNEF operand of its ``input``
(None where that is not a tensor).  Both return the identifier of the result (nested
tuples of identifiers for a tuple result), named after the node.
"""

from __future__ import annotations

from ..op_registry import Registry

LAYERS = Registry("layer type")
FUNCTIONS = Registry("function")
layer = LAYERS.handles
"""Decorator: register a layer writer for the given layer types."""
function = FUNCTIONS.handles
"""Decorator: register a function writer for the given catalogue functions."""
