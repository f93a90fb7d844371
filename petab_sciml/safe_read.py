"""Reading input files without surprises: regular files only, within the size budgets,
and YAML without alias bombs or runaway nesting.

* :func:`read_bytes` / :func:`read_text` open a file without blocking (a FIFO never
  hangs), refuse anything but a regular file (``/dev/zero``, a FIFO, a socket, a folder)
  with ``FILE_NOT_REGULAR``, and read at most the budget (``max_file_bytes``, or the one
  named), so a file that grows while being read cannot exhaust memory either.
* :func:`check_regular_file` is the same check for files that a library opens itself
  (h5py, onnx, nnef).
* Inside a :func:`petab_sciml.confine.confined` block both refuse, before opening, any
  file whose real location lies outside the confined folder (``--confine``).
* :func:`load_yaml` parses YAML with the safe loader after checking, from the parser's
  event stream, the nesting depth (``max_yaml_depth``) and the number of nodes once
  aliases are expanded (``max_yaml_nodes``): a "billion laughs" file is refused before
  anything is expanded, at the line of the alias that crosses the budget.

Budgets come from :mod:`petab_sciml.limits`.  Errors are
:class:`~petab_sciml.errors.InputFileError` (with ``code`` ``FILE_NOT_FOUND`` or
``FILE_NOT_REGULAR``) and :class:`~petab_sciml.errors.LimitError`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from petab_sciml import limits
from petab_sciml.confine import check_confined
from petab_sciml.errors import InputFileError

__all__ = ["check_regular_file", "file_kind", "load_yaml", "read_bytes", "read_text"]

PathLike = str | os.PathLike


def file_kind(mode: int) -> str:
    """A short description of a file type from ``st_mode`` (for messages)."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def _not_regular(path: Path, mode: int, what: str) -> InputFileError:
    return InputFileError(f"is {file_kind(mode)}, not a regular file; expected {what}",
                          file=path, code="FILE_NOT_REGULAR")


def check_regular_file(path: PathLike, *, what: str = "a file",
                       limit: str | None = "max_file_bytes") -> os.stat_result:
    """``os.stat`` of ``path`` (symlinks followed) if it is a regular file within the
    budget ``limit`` (None: no size check); raises otherwise."""
    path = Path(path)
    check_confined(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(f"file not found; expected {what}", file=path,
                             code="FILE_NOT_FOUND") from None
    except OSError as exc:
        raise InputFileError(f"cannot open: {exc.strerror or exc}", file=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    if limit is not None:
        limits.check(limit, "file size in bytes", st.st_size, file=path)
    return st


def read_bytes(path: PathLike, *, what: str = "a file", limit: str = "max_file_bytes",
               max_bytes: int | None = None,
               check_stat: Callable[[os.stat_result], None] | None = None) -> bytes:
    """The content of the regular file ``path``, at most the budget ``limit`` in bytes.

    ``max_bytes``: a tighter bound, for files whose legitimate size is known (a file over
    it raises :class:`~petab_sciml.errors.InputFileError`).  ``check_stat``: called with
    the ``fstat`` of the opened file before a byte is read (to refuse, say, a file that
    another user owns); what it raises propagates."""
    path = Path(path)
    check_confined(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputFileError(f"file not found; expected {what}", file=path,
                             code="FILE_NOT_FOUND") from None
    except IsADirectoryError:
        raise InputFileError(f"is a folder, not a regular file; expected {what}", file=path,
                             code="FILE_NOT_REGULAR") from None
    except OSError as exc:
        raise InputFileError(f"cannot open: {exc.strerror or exc}", file=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode, what)
        budget = getattr(limits.current(), limit)
        limits.check(limit, "file size in bytes", st.st_size, file=path)
        if check_stat is not None:
            check_stat(st)
        if max_bytes is not None and max_bytes < budget:
            budget = max_bytes
            if st.st_size > budget:
                raise InputFileError(f"is {st.st_size:,} bytes, more than {what} can hold "
                                     f"({budget:,} bytes)", file=path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, budget + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > budget:
                if max_bytes is not None and budget == max_bytes:
                    raise InputFileError(f"grew while read beyond the {budget:,} bytes "
                                         f"{what} can hold", file=path)
                raise limits.exceeded(limit, "file size in bytes (grew while read)", total,
                                      file=path)
        return b"".join(chunks)
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)


def read_text(path: PathLike, *, what: str = "a text file", limit: str = "max_file_bytes",
              encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded (``utf-8`` with an optional byte-order mark)."""
    data = read_bytes(path, what=what, limit=limit)
    if encoding == "utf-8" and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputFileError(f"is not {encoding} text (byte {exc.start}, line {line}); "
                             f"expected {what}", file=path) from None


def load_yaml(text: str, *, file: object | None = None) -> Any:
    """Parse YAML ``text`` (safe loader, C version when available) within the YAML
    budgets; ``file`` names the source in errors.  ``yaml.YAMLError`` propagates for
    invalid YAML; budgets raise :class:`~petab_sciml.errors.LimitError` located at a line.
    """
    import yaml

    limits.check("max_yaml_bytes", "YAML text size in bytes", len(text.encode("utf-8")),
                 file=file)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    _check_yaml_events(yaml.parse(text, Loader=loader), file)
    return yaml.load(text, Loader=loader)


def _check_yaml_events(events: Any, file: object | None) -> None:
    """Depth and alias-expanded node count from the event stream, before constructing."""
    import yaml

    budget = limits.current()
    sizes: dict[str, int] = {}
    stack: list[list[Any]] = [[None, 0]]   # [anchor, expanded nodes] per open collection
    total = 0
    for event in events:
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) > budget.max_yaml_depth:
                raise limits.exceeded("max_yaml_depth", "YAML nesting depth", len(stack),
                                      file=file, entry=_line(event))
            stack.append([event.anchor, 1])
            added = 1
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, count = stack.pop()
            if anchor is not None:
                sizes[anchor] = count
            stack[-1][1] += count
            continue
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                sizes[event.anchor] = 1
            added = 1
            stack[-1][1] += 1
        elif isinstance(event, yaml.AliasEvent):
            added = sizes.get(event.anchor, 1)
            stack[-1][1] += added
        else:
            continue
        total += added
        if total > budget.max_yaml_nodes:
            raise limits.exceeded("max_yaml_nodes", "YAML nodes with aliases expanded",
                                  total, file=file, entry=_line(event))


def _line(event: Any) -> str | None:
    mark = getattr(event, "start_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
