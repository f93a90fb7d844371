"""A registry of op converters: names (layer types, catalogue functions, NNEF operations)
-> the one function that converts them, filled by a decorator in the module of the op's
family and read by the converter's driver.  The exporters and the NNEF reader keep
their registries as instances of :class:`Registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Handler = Callable[..., Any]


class Registry:
    """Names of one kind (``kind``: "layer type", "function", "NNEF operation") -> the
    function that converts them."""

    def __init__(self, kind: str):
        self.kind = kind
        self.handlers: dict[str, Handler] = {}

    def handles(self, *names: str) -> Callable[[Handler], Handler]:
        """Register the decorated function as the converter of ``names``."""
        def register(fn: Handler) -> Handler:
            for name in names:
                if name in self.handlers:  # pragma: no cover - a bug in a family module
                    raise ValueError(f"{self.kind} {name} has two converters")
                self.handlers[name] = fn
            return fn
        return register

    def get(self, name: str) -> Handler | None:
        return self.handlers.get(name)


__all__ = ["Handler", "Registry"]
