"""What a fit reads back from its output folder, read as untrusted input.

A fit folder is what people share (attached to a paper, copied from a cluster, sent by
a colleague), and ``--out`` may sit on storage others can write to.  So ``fit.json`` and
the checkpoints that ``--resume`` continues from are held to the rules of every other
input (``docs/security.md``):

* nothing in them runs code: checkpoints are archives of arrays read without pickle
  (``.npz``: :mod:`petab_sciml.fit.archive`) or unpickled with PyTorch's
  ``weights_only`` loader (``backends/torch/checkpoint.py``);
* a checkpoint must be a regular file of the folder (not a link), no larger than the
  model's state can be (:func:`checkpoint_budget`), and carry an identity record
  (:func:`checkpoint_identity`: the problem's fingerprint, the start, the settings) equal
  to the resumed fit's, before any of its arrays is compared with the model;
* the entries a fit writes (``fit.json``, ``results.h5``, ``best/``, ``plots/``,
  ``checkpoints/``) must not be symbolic links or special files (:func:`check_fit_folder`),
  so that no write goes through them to another place.

Every failure is an :class:`ArtifactError` that names the file (and the entry in it),
says what is wrong, and how to start over (:data:`START_OVER`).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from petab_sciml.errors import PetabSciMLError

CHECKPOINT_FORMAT = "petab-sciml fit checkpoint 1"
"""The ``format`` of a checkpoint's identity record; another value is refused."""

START_OVER = ("to start over, rerun without --resume and with --force (force=True), "
              "which replaces the fit in this folder")

FIT_ENTRIES = ("fit.json", "results.h5", "best", "plots", "checkpoints")
"""What a fit writes into its output folder."""

_FOLDERS = ("best", "plots", "checkpoints")


class ArtifactError(PetabSciMLError):
    """A file of a fit's output folder is damaged, foreign, or unsafe to read; the
    message names it, what is wrong, and how to start over."""


def refused(path: str | os.PathLike, problem: str, entry: str | None = None) -> ArtifactError:
    """The :class:`ArtifactError` for ``path`` (not raised): ``problem``, then how to
    start over."""
    return ArtifactError(f"{problem}; {START_OVER}", file=path, entry=entry)


# --------------------------------------------------------------------------- fit folder
def check_fit_folder(out: Path, *, force: bool) -> None:
    """Refuse (or, with ``force``, remove) entries of ``out`` that a fit writes but that
    are symbolic links or special files: writing through them would change files
    outside ``out``.  Nothing is read."""
    for name in FIT_ENTRIES:
        path = out / name
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise refused(path, f"cannot inspect: {exc.strerror or exc}") from None
        folder = name in _FOLDERS
        if stat.S_ISLNK(st.st_mode):
            what = f"a symbolic link to {os.readlink(path)!r}"
        elif folder and not stat.S_ISDIR(st.st_mode) or \
                not folder and not stat.S_ISREG(st.st_mode):
            from petab_sciml.safe_read import file_kind

            what = file_kind(st.st_mode)
        else:
            continue
        if not force:
            raise refused(path, f"is {what}; a fit folder holds its own files and folders")
        if stat.S_ISDIR(st.st_mode):
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()


def read_fit_record(path: Path) -> dict[str, Any]:
    """The settings in ``fit.json`` (a JSON object of a regular file within the YAML
    budget)."""
    from petab_sciml.errors import InputFileError, LimitError
    from petab_sciml.safe_read import read_text

    try:
        text = read_text(path, what="the settings of a fit (JSON)", limit="max_yaml_bytes")
        data = json.loads(text)
    except (InputFileError, LimitError) as exc:
        raise refused(path, exc.message) from None
    except (ValueError, RecursionError) as exc:
        raise refused(path, f"is not valid JSON ({str(exc).splitlines()[0][:200]})") from None
    if not isinstance(data, dict):
        raise refused(path, f"expected a JSON object of settings, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- checkpoints
def checkpoint_identity(task: Any, start: int, fingerprint: str) -> dict[str, Any]:
    """What a checkpoint of start ``start`` of ``task`` records about itself: a resumed
    start must find the same problem (its fingerprint: the YAML and every file it
    names), start and settings."""
    identity = {"format": CHECKPOINT_FORMAT, "problem": fingerprint,
                "backend": task.backend, "start": int(start), "seed": int(task.seed),
                "optimizer": task.optimizer, "lr": float(task.lr),
                "options": json.dumps(task.options, sort_keys=True)}
    schedule = getattr(task, "schedule", "constant")
    if schedule != "constant":   # absent for a constant rate, as before schedules
        identity["schedule"] = f"{schedule} {float(task.lr_decay)!r} {int(task.steps)}"
    return identity


def check_identity(saved: Any, expected: dict[str, Any], path: Path) -> None:
    """Raise :class:`ArtifactError` unless the identity record ``saved`` (as read from
    ``path``) is ``expected``, saying what differs."""
    if not isinstance(saved, dict) or "format" not in saved:
        raise refused(path, "has no identity record: not a checkpoint of this version of "
                      "petab-sciml", entry="identity")
    if saved.get("format") != expected["format"]:
        raise refused(path, f"is a checkpoint of format {str(saved.get('format'))[:80]!r}, "
                      f"not {expected['format']!r}", entry="identity")
    if saved.get("problem") != expected["problem"]:
        raise refused(path, "was written for another problem (or the problem's files "
                      "changed since)", entry="identity")
    if saved.get("start") != expected["start"]:
        raise refused(path, f"holds start {str(saved.get('start'))[:20]}, not start "
                      f"{expected['start']}", entry="identity")
    differ = [k for k in expected if saved.get(k) != expected[k]]
    if differ:
        shown = ", ".join(f"{k} ({str(saved.get(k))[:60]!r} there, {expected[k]!r} now)"
                          for k in differ)
        raise refused(path, f"was written by a fit with other settings: {shown}",
                      entry="identity")


def checkpoint_budget(n_values: int, n_arrays: int) -> int:
    """The most bytes a checkpoint of a model with ``n_values`` scalars in ``n_arrays``
    arrays can take: the values, their previous step and up to five optimizer arrays of
    8 bytes each, per-array archive overhead, and room for a long loss trace."""
    return 64 * n_values + 4096 * n_arrays + 16 * 1024 * 1024


def read_checkpoint_bytes(path: Path, budget: int) -> bytes:
    """The content of the checkpoint ``path``: a regular file (not a symbolic link) of at
    most ``budget`` bytes."""
    from petab_sciml.errors import InputFileError, LimitError
    from petab_sciml.safe_read import read_bytes

    try:
        if os.path.islink(path):
            raise refused(path, f"is a symbolic link to {os.readlink(path)!r}; a fit folder "
                          "holds its own checkpoints")
        return read_bytes(path, what="a checkpoint of this model", max_bytes=budget)
    except (InputFileError, LimitError) as exc:
        raise refused(path, exc.message) from None
