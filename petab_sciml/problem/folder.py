"""Placing a problem's files in a new folder (``save``, training-strategy stages)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path


def unique_name(name: str, taken: Iterable[str]) -> str:
    """``name``, or ``stem_1.ext``, ``stem_2.ext``, ... if it is in ``taken``."""
    taken = set(taken)
    stem, suffix = os.path.splitext(name)
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{stem}_{k}{suffix}", k + 1
    return candidate


class FilePlacer:
    """Copies files and folders a problem lists into ``folder``, each once.

    A name relative to the problem's folder and inside it keeps its relative path; any
    other (absolute, or with ``..``) is placed at the top of ``folder`` under its base
    name, made unique.  ``resolve`` maps a listed name to its path (the problem config's
    ``resolve``)."""

    def __init__(self, resolve: Callable[[str], Path], folder: Path,
                 reserved: Iterable[str] = ()):
        self.resolve = resolve
        self.folder = folder
        self.placed: dict[str, str] = {}
        """Listed name -> name in ``folder``."""
        self.reserved = set(reserved)
        """Names in ``folder`` that copies must not take (tables written anew)."""

    def taken(self) -> set[str]:
        return {*self.placed.values(), *self.reserved}

    def place(self, name: str, content: Callable[[Path, Path], None] | None = None) -> str:
        """Copy file or folder ``name`` (as listed) into the folder, or write it with
        ``content(source, destination)``; returns its new name."""
        if name in self.placed:
            return self.placed[name]
        source = self.resolve(name)
        rel = Path(name)
        inside = not rel.is_absolute() and ".." not in rel.parts
        target = rel if inside and rel.as_posix() not in self.reserved \
            else Path(unique_name(rel.name, self.taken()))
        dest = self.folder / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        if content is not None:
            content(source, dest)
        elif source.is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)
        self.placed[name] = target.as_posix()
        return self.placed[name]
