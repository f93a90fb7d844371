"""Confinement: read no file outside one folder (``--confine``, ``confine=True``).

A service or CI job that validates uploaded problems must not let a problem read the
server's files: a problem that names ``/etc/passwd``, ``../../secret.tsv``, or a symlink
that leads out of its folder would otherwise be opened, and the validator's messages quote
what it read (a table's column names, a YAML file's first line).

While a :func:`confined` block is active, :func:`check_confined` refuses every path whose
real location (symlinks resolved) lies outside the block's folder, *before* the file is
opened.  :mod:`petab_sciml.safe_read` calls it for every file it opens or checks, so the
files a problem names indirectly (the members of an NNEF folder, ...) are confined too;
the problem loader checks each name the problem YAML gives first, to report which entry
names the file.  Hard links cannot be told from the file they link to: extract uploads
with a tool that refuses links.

The folder is held in a context variable (like the budgets of :mod:`petab_sciml.limits`),
so concurrent threads and tasks keep their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

from petab_sciml.errors import InputFileError

__all__ = ["CODE", "OutsideFolderError", "check_confined", "confined", "confinement_root",
           "outside_of", "real_path", "refusal"]

CODE = "FILE_OUTSIDE_CONFINED"
"""The validator's issue code of a file refused by confinement."""

_ROOT: contextvars.ContextVar[Path | None] = contextvars.ContextVar("petab_sciml_confine",
                                                                    default=None)


class OutsideFolderError(InputFileError):
    """A file lies outside the folder reads are confined to; it was not opened."""

    code = CODE


def real_path(path: str | os.PathLike) -> Path:
    """``path`` with every symlink resolved (as far as it exists), absolute."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):   # a symlink loop: the path as written, absolute
        return Path(os.path.abspath(path))


def outside_of(path: str | os.PathLike, root: str | os.PathLike) -> Path | None:
    """The real location of ``path`` if it lies outside the real folder ``root``, else
    None (inside)."""
    target = real_path(path)
    return None if target.is_relative_to(real_path(root)) else target


def confinement_root() -> Path | None:
    """The real folder reads are confined to, or None when not confined."""
    return _ROOT.get()


@contextlib.contextmanager
def confined(folder: str | os.PathLike | None) -> Iterator[Path | None]:
    """Run a block with reads confined to ``folder`` (None: no confinement; an already
    active confinement stays in force)."""
    if folder is None:
        yield _ROOT.get()
        return
    token = _ROOT.set(real_path(folder))
    try:
        yield _ROOT.get()
    finally:
        _ROOT.reset(token)


def check_confined(path: str | os.PathLike, *, named_by: str | None = None) -> None:
    """Raise :class:`OutsideFolderError` (naming ``path`` and, if given, the entry that
    names it) when reads are confined and ``path`` lies outside the folder."""
    root = _ROOT.get()
    if root is None:
        return
    target = outside_of(path, root)
    if target is not None:
        raise OutsideFolderError(refusal(path, target, root), file=path, entry=named_by)


def refusal(path: str | os.PathLike, target: Path, root: Path) -> str:
    """The message of a refused file (without its location)."""
    where = f"outside {str(root)!r}, the folder that --confine allows; not opened"
    if Path(os.path.abspath(path)) == target:
        return f"lies {where}"
    return f"resolves to {str(target)!r}, {where}"
