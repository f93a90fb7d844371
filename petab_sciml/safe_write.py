"""Writing outputs so that nothing is lost: every writer of petab-sciml goes through here.

The contract of :func:`staged_output` (and of :func:`write_bytes` / :func:`write_text`,
built on it):

* **Checked first** (:func:`check_output`), before anything is read or written: the
  output's folder exists; the output is not, and does not resolve to, one of the inputs
  (same path, symlink or hard link), and for a folder output no input lies inside it;
  it is not a device, FIFO or socket, nor a symbolic link; it is a folder where a folder
  is written and a file where a file is; and it does not exist unless ``overwrite``.
* **Staged**: the output is written to a fresh path inside a private folder (created
  with ``tempfile.mkdtemp``: mode 0700, unique name, ``O_EXCL`` semantics) in the same
  folder as the output, so no other user can plant a symlink there and no predictable
  temporary name is ever opened.
* **Swapped in** only when complete: a file by ``os.replace`` (atomic); a folder by an
  atomic exchange (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames, the old
  folder kept until the new one is in place), after which the old content is removed.
  An error or an interrupt (``KeyboardInterrupt``, ``SystemExit``) removes the staging
  folder and leaves an existing output as it was.

The output path itself is replaced (never written through), so nothing outside it
changes.  Refusals raise :class:`~petab_sciml.errors.OutputError` (the CLI exits 2).

Use it for any new writer::

    with staged_output(path, overwrite=force, inputs=[source]) as tmp:
        h5py.File(tmp, "w") ...          # or any library that wants a path

A writer that updates an existing file (keeping what it does not own, as
:func:`petab_sciml.arrays.save_parameters` keeps other groups) reads the old file
inside the block and writes the merged result to ``tmp``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from petab_sciml.errors import OutputError

__all__ = ["OutputError", "check_output", "staged_output", "write_bytes", "write_text"]

PathLike = str | os.PathLike


def _describe(mode: int) -> str:
    from petab_sciml.safe_read import file_kind

    return file_kind(mode)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return path.absolute()


def _same_file(a: Path, b: Path) -> bool:
    if _resolved(a) == _resolved(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: PathLike, *, overwrite: bool = False,
                 inputs: Iterable[PathLike | None] = (), folder: bool = False) -> Path:
    """Refuse an unsafe output before anything is written (see the module notes).

    ``folder`` says whether the output is a folder (NNEF model folder) or a file.
    Returns ``path`` as a :class:`~pathlib.Path`; raises
    :class:`~petab_sciml.errors.OutputError`.
    """
    path = Path(path)
    what = "folder" if folder else "file"
    if not path.name or path.name in (".", ".."):
        raise OutputError(f"is not a {what} name", file=path)
    for source in inputs:
        if source is None:
            continue
        source = Path(source)
        if _same_file(path, source):
            raise OutputError(f"is the input {str(source)!r}; write the output to another "
                              "path", file=path)
        if folder and _resolved(source).is_relative_to(_resolved(path)):
            raise OutputError(f"holds the input {str(source)!r}; replacing the folder "
                              "would delete it", file=path)
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(f"the folder {str(parent)!r} does not exist (create it first)",
                          file=path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise OutputError(f"cannot inspect the output: {exc.strerror or exc}",
                          file=path) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"is a symbolic link (to {os.readlink(path)!r}); refusing to write "
                          "through or replace it: remove it, or write to its target", file=path)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise OutputError(f"is {_describe(st.st_mode)}; refusing to write to it", file=path)
    if stat.S_ISDIR(st.st_mode) and not folder:
        raise OutputError("is a folder; expected the path of a file to write", file=path)
    if stat.S_ISREG(st.st_mode) and folder:
        raise OutputError("is a file; expected the path of a folder to write", file=path)
    if not overwrite:
        raise OutputError(f"the {what} exists; pass --force (overwrite=True) to replace it",
                          file=path)
    return path


@contextlib.contextmanager
def staged_output(path: PathLike, *, overwrite: bool = False,
                  inputs: Iterable[PathLike | None] = (), folder: bool = False
                  ) -> Iterator[Path]:
    """Check ``path`` (:func:`check_output`), yield a fresh staging path to write the
    output to (nothing exists there yet; for a folder output, create it), then swap the
    result in; on any exception the staging area is removed and ``path`` is untouched.
    Exceptions of the writing block propagate unchanged; refusals and a failed swap raise
    :class:`~petab_sciml.errors.OutputError`."""
    path = check_output(path, overwrite=overwrite, inputs=inputs, folder=folder)
    try:
        private = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp",
                                        dir=path.parent))
    except OSError as exc:
        raise OutputError(f"cannot write to the folder: {exc.strerror or exc}",
                          file=path) from None
    staged = private / path.name
    try:
        yield staged
        if not os.path.lexists(staged):
            raise OutputError("the writer produced no output", file=path)
        try:
            _fsync(staged)
            if folder:
                _swap_folder(staged, path, private, overwrite)
            else:
                _check_not_replaced(path, overwrite)
                os.replace(staged, path)
        except OSError as exc:
            raise OutputError(f"cannot write {'folder' if folder else 'file'}: "
                              f"{exc.strerror or exc}", file=path) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _check_not_replaced(path: Path, overwrite: bool) -> None:
    """Re-check the target just before the swap (it may have appeared meanwhile)."""
    if os.path.lexists(path):
        check_output(path, overwrite=overwrite, folder=os.path.isdir(path) and
                     not os.path.islink(path))


def _swap_folder(staged: Path, path: Path, private: Path, overwrite: bool) -> None:
    if not os.path.lexists(path):
        os.rename(staged, path)
        return
    check_output(path, overwrite=overwrite, folder=True)
    if _exchange(staged, path):
        return  # the old folder is now at ``staged`` and goes with ``private``
    old = private / "old"
    os.rename(path, old)
    try:
        os.rename(staged, path)
    except BaseException:
        os.rename(old, path)
        raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2); False where unsupported."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
                       _RENAME_EXCHANGE)
    if result == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: the filesystem cannot
        return False
    raise OSError(errno, os.strerror(errno))


def _fsync(path: Path) -> None:
    """Flush the staged files to disk before they replace anything."""
    targets = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for target in targets:
        try:
            fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def write_bytes(path: PathLike, data: bytes, *, overwrite: bool = True,
                inputs: Iterable[PathLike | None] = (), mode: int = 0o666) -> Path:
    """Write ``data`` to the file ``path`` through :func:`staged_output`; the file is
    created with the permissions ``mode`` (less the process's umask)."""
    with staged_output(path, overwrite=overwrite, inputs=inputs) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return Path(path)


def write_text(path: PathLike, text: str, *, overwrite: bool = True,
               inputs: Iterable[PathLike | None] = (), encoding: str = "utf-8") -> Path:
    """Write ``text`` to the file ``path`` through :func:`staged_output`."""
    return write_bytes(path, text.encode(encoding), overwrite=overwrite, inputs=inputs)
