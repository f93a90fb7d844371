"""The registry of NNEF operation handlers: one function per operation, found by name.

Each module of this package lifts one family of operations and registers its handlers
with :func:`handles`.  A handler is called as ``fn(lifter, op)`` with the parsed NNEF
operation (``op.name``, ``op.inputs``, ``op.attribs``, ``op.outputs``) and returns the
value of its output (a tuple for several outputs): a tensor, a number, a lazy variable
or a partial pattern (see :mod:`.lifter`).
"""

from __future__ import annotations

from ..op_registry import Registry

HANDLERS = Registry("NNEF operation")
handles = HANDLERS.handles
"""Decorator: register the handler of the given NNEF operations."""
