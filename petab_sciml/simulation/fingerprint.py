"""The fingerprint of a problem's files: keys caches of code compiled for its plan."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["problem_fingerprint"]


def problem_fingerprint(cfg: Any) -> str:
    """Hash of everything that shapes the computation: the problem YAML and every file
    or folder it names (tables, model, networks, array files), each under the name the
    problem gives it.  Folders (an NNEF model) contribute every file below them by
    relative path and content, so an edit to any of them changes the hash.
    ``cfg`` is the problem's :class:`~petab_sciml.problem.config.ProblemConfig`."""

    def hash_file(path: Path) -> None:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                h.update(b"<special>\0")
                return
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            h.update(digest.digest())
        except OSError:
            h.update(b"<unreadable>\0")

    def hash_path(path: Path) -> None:
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            h.update(b"<missing>\0")
            return
        if not is_dir:
            hash_file(path)
            return
        h.update(b"<folder>\0")
        for root, dirs, files in os.walk(path):   # symlinked folders are not entered
            dirs.sort()
            for name in sorted(files):
                file = Path(root) / name
                h.update(file.relative_to(path).as_posix().encode() + b"\0")
                hash_file(file)

    h = hashlib.sha256()
    entries: list[tuple[str, Path]] = [("problem", cfg.path)]
    for kind, names in cfg.files.items():
        entries.extend((f"{kind}:{n}", cfg.resolve(n)) for n in names)
    entries.extend((f"model:{e['location']}", cfg.resolve(e["location"]))
                   for e in cfg.model_files.values())
    entries.extend((f"hybridization:{n}", cfg.resolve(n)) for n in cfg.hybridization_files)
    entries.extend((f"arrays:{n}", cfg.resolve(n)) for n in cfg.array_files)
    entries.extend((f"network:{k}:{e.location}", cfg.resolve(e.location))
                   for k, e in cfg.networks.items() if e.location)
    for label, path in entries:
        h.update(label.encode() + b"\0")
        hash_path(path)
    return h.hexdigest()
