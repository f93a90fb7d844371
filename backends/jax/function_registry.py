"""The table of JAX implementations of catalogue functions, filled by the function
family modules (:mod:`.functions` imports them all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""Catalogue function name -> implementation."""


def implements(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the implementation of catalogue function
    ``name``."""
    def register(fn):
        FUNCTIONS[name] = fn
        return fn
    return register


def as_dims(value: Any) -> tuple[int, ...]:
    """A dimension argument (an int or a sequence of ints) as a tuple."""
    return (value,) if isinstance(value, int) else tuple(value)
