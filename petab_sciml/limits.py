"""Budgets on what an input file may make petab-sciml do: bytes read, YAML aliases and
nesting, declared array elements, expression depth and size, HDF5 shapes and entries,
ONNX constant folding, archive members.

A small file must never cost unbounded time or memory.  Every reader checks the budget
*before* it allocates or computes, and a file over a budget raises :class:`LimitError`
naming the file, the entry, the budget and how to raise it.  The validator reports it
with the budget's issue code (``LIMIT_*``, see ``docs/validation.md``).

The budgets in force are a :class:`Limits` held in a context variable: the command line
sets them from ``--limit NAME=VALUE``; in Python use :func:`use_limits`::

    with use_limits(max_elements=10**9):
        problem = load_problem("big/problem.yaml")
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from petab_sciml.errors import LimitError

__all__ = ["LIMIT_CODES", "Limits", "LimitError", "current", "parse_limit", "use_limits"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """The budgets (defaults suit problems with networks up to 5 x 10^7 parameters)."""

    max_file_bytes: int = 256 * MiB
    """Size of a table, SBML model or other text file read whole."""
    max_yaml_bytes: int = 2 * MiB
    """Size of a YAML file (problem, network, JSON metadata)."""
    max_yaml_nodes: int = 1_000_000
    """YAML nodes after expanding aliases (``*ref``): stops "billion laughs" files."""
    max_yaml_depth: int = 100
    """Nesting of YAML mappings and lists."""
    max_elements: int = 50_000_000
    """Scalars a network declares (all its parameter arrays; a variable of an NNEF graph
    without its data)."""
    max_array_elements: int = 50_000_000
    """Elements of one dataset of an HDF5 array file (from its shape, before reading)."""
    max_expression_depth: int = 100
    """Height of a math expression's tree (nested calls, operators, powers)."""
    max_expression_chars: int = 100_000
    """Length of one math expression."""
    max_array_entries: int = 10_000
    """Groups plus datasets in one HDF5 array file."""
    max_folded_elements: int = 10_000_000
    """Elements of one value computed while folding constants of an ONNX graph."""
    max_archive_member_bytes: int = 256 * MiB
    """Size of one member of a ``.tgz`` archive (NNEF); the total is bounded by 4x."""

    def replace(self, **changes: int) -> Limits:
        """A copy with some budgets changed (unknown names raise ``ValueError``)."""
        for name in changes:
            if name not in _FIELDS:
                raise ValueError(f"unknown limit {name!r}; known: {', '.join(_FIELDS)}")
        return dataclasses.replace(self, **changes)


_FIELDS = tuple(f.name for f in dataclasses.fields(Limits))

LIMIT_CODES: Mapping[str, str] = {
    "max_file_bytes": "LIMIT_FILE_SIZE",
    "max_yaml_bytes": "LIMIT_YAML_SIZE",
    "max_yaml_nodes": "LIMIT_YAML_ALIASES",
    "max_yaml_depth": "LIMIT_YAML_DEPTH",
    "max_elements": "LIMIT_ELEMENTS",
    "max_array_elements": "LIMIT_ARRAY_SHAPE",
    "max_expression_depth": "LIMIT_EXPRESSION_DEPTH",
    "max_expression_chars": "LIMIT_EXPRESSION_SIZE",
    "max_array_entries": "LIMIT_ARRAY_ENTRIES",
    "max_folded_elements": "LIMIT_CONSTANT_FOLDING",
    "max_archive_member_bytes": "LIMIT_ARCHIVE_MEMBER",
}
"""Issue code of each budget (the validator reports an exceeded budget with it)."""

_DEFAULT = Limits()
_CURRENT: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("petab_sciml_limits",
                                                                         default=None)


def current() -> Limits:
    """The budgets in force."""
    return _CURRENT.get() or _DEFAULT


@contextlib.contextmanager
def use_limits(limits: Limits | None = None, **changes: int) -> Iterator[Limits]:
    """Run a block with other budgets: ``limits`` (default: those in force) with
    ``changes`` applied."""
    new = (limits or current()).replace(**changes)
    token = _CURRENT.set(new)
    try:
        yield new
    finally:
        _CURRENT.reset(token)


def parse_limit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` (``max_elements=1e9``, ``max_yaml_bytes=64MiB``; the ``max_`` prefix
    may be left out) -> ``(name, int value)``; raises ``ValueError`` with the reason."""
    name, eq, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not eq or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    if not name.startswith("max_"):
        name = f"max_{name}"
    if name not in _FIELDS:
        raise ValueError(f"unknown limit {name!r}; known: {', '.join(_FIELDS)}")
    value = value.strip()
    scale = 1
    for suffix, factor in (("KiB", 1024), ("MiB", MiB), ("GiB", 1024 * MiB)):
        if value.endswith(suffix):
            value, scale = value[: -len(suffix)].strip(), factor
            break
    try:
        number = float(value) * scale
    except ValueError:
        raise ValueError(f"limit {name}: expected a number, got {value!r}") from None
    if not number >= 1 or number > 2**62:
        raise ValueError(f"limit {name}: expected a number between 1 and 2^62, got {value!r}")
    return name, int(number)


def exceeded(limit: str, what: str, value: int | float, *, file: object | None = None,
             entry: str | None = None) -> LimitError:
    """The :class:`LimitError` for ``value`` over the budget ``limit`` (not raised)."""
    budget = getattr(current(), limit)
    flag = f"--limit {limit}=N"
    return LimitError(f"{what} ({_num(value)}) exceeds the limit {limit} = {_num(budget)} "
                      f"(if the file is trusted, raise it with {flag})",
                      code=LIMIT_CODES[limit], limit=limit, file=file, entry=entry)


def check(limit: str, what: str, value: int | float, *, file: object | None = None,
          entry: str | None = None, backed: int = 0) -> None:
    """Raise :class:`LimitError` if ``value`` exceeds the budget ``limit``.

    ``backed``: how many of the ``value`` elements are backed by bytes the file actually
    holds (ONNX initializers, NNEF variable data, a contiguous HDF5 dataset whose storage
    is written).  The budgets stop files that *declare* more than they hold; backed
    elements pass up to :func:`memory_elements`, and only the unbacked rest counts
    against the budget."""
    budget = getattr(current(), limit)
    if value <= budget:
        return
    backed = min(int(backed), int(value))
    if value - backed <= budget and value <= memory_elements():
        return
    raise exceeded(limit, what, value, file=file, entry=entry)


def memory_elements() -> int:
    """float32 elements that fit in a quarter of the memory available now (a network's
    arrays are held several times: as read, in the backend, as gradients and optimizer
    state); 0 where the platform does not say."""
    import os

    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0
    return int(available) // 16


def _num(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3g}"
    value = int(value)
    return f"{value:,}" if value < 10**15 else f"{value:.3e}"
