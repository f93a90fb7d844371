"""Discovery of network formats and backends through entry points.

Third parties add a format by registering a :class:`NetworkFormat` under the
``petab_sciml.formats`` entry-point group, and a backend (an object following
:class:`petab_sciml.backend_api.Backend`) under ``petab_sciml.backends``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from petab_sciml.errors import PetabSciMLError


@dataclass(frozen=True)
class NetworkFormat:
    """A network file format.

    ``read(path, **options)`` returns a :class:`~petab_sciml.network.Network`;
    ``write(network, path)`` may be None for import-only formats.  ``runs_code`` is True
    for formats whose loading executes code from the file (TorchScript, Python files):
    those refuse to load unless trust is given.  ``read_with_parameters(path, **options)``
    returns ``(network, {layer: {array: ndarray}})`` for formats that carry weights
    (None for the others); when not given, the function of that name in the module that
    defines ``read`` is used.
    """

    name: str
    extensions: tuple[str, ...]
    read: Callable[..., Any]
    write: Callable[..., None] | None = None
    runs_code: bool = False
    read_with_parameters: Callable[..., tuple[Any, dict[str, dict[str, Any]]]] | None = None

    def __post_init__(self) -> None:
        if self.read_with_parameters is None:
            module = sys.modules.get(getattr(self.read, "__module__", None) or "")
            fn = getattr(module, "read_with_parameters", None)
            if callable(fn):
                object.__setattr__(self, "read_with_parameters", fn)


@cache
def _group(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def _load(group: str, name: str, what: str) -> Any:
    eps = _group(group)
    key = name.lower()
    if key not in eps:
        raise PetabSciMLError(
            f"unknown {what} {name!r}; installed: {', '.join(sorted(eps)) or 'none'} "
            f"(entry-point group {group!r}; is the package installed with pip install -e .?)"
        )
    return eps[key].load()


def format_names() -> list[str]:
    return sorted(_group("petab_sciml.formats"))


def backend_names() -> list[str]:
    return sorted(_group("petab_sciml.backends"))


def get_format(name: str) -> NetworkFormat:
    """The format registered as ``name`` (case-insensitive)."""
    return _load("petab_sciml.formats", name, "network format")


def get_backend(name: str) -> Any:
    """The backend registered as ``name``; importing it may raise MissingExtraError."""
    return _load("petab_sciml.backends", name, "backend")


def format_for_path(path: str | os.PathLike, fmt: str | None = None) -> NetworkFormat:
    """The format named ``fmt``, else the one whose extension matches ``path``."""
    if fmt:
        return get_format(fmt)
    suffix = Path(path).suffix.lower()
    for name in format_names():
        f = get_format(name)
        if suffix in f.extensions:
            return f
    raise PetabSciMLError(f"{path}: cannot tell the network format from the extension "
                          f"{suffix!r}; pass the format explicitly "
                          f"(known: {', '.join(format_names())})")
