"""Zip archives of arrays (``.npz`` checkpoints, PyTorch's ``torch.save`` files) read
from memory without surprises.

* :func:`stored_zip`: every member stored uncompressed (what ``np.savez`` and
  ``torch.save`` write), unencrypted, and all of them together no larger than the
  archive itself, so no member can expand into more memory than the file took; a damaged
  or truncated archive is refused before a member is read.
* :func:`read_npz`: each ``.npy`` member's header is parsed first: an object dtype (which
  only pickle can read) is refused, and the data must be exactly as long as the shape
  and dtype say, before an array is built.  Nothing is unpickled.

Errors are :class:`~petab_sciml.fit.artifacts.ArtifactError` naming the file and the
member.
"""

from __future__ import annotations

import io
import math
import zipfile
from pathlib import Path

import numpy as np

from petab_sciml.fit.artifacts import refused


def stored_zip(data: bytes, path: Path, what: str) -> zipfile.ZipFile:
    """The zip archive in ``data`` (read from ``path``, expected to be ``what``)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise refused(path, f"is not {what} (not a readable zip archive: "
                      f"{str(exc)[:120] or type(exc).__name__}); truncated or damaged?") \
            from None
    total = 0
    for info in members:
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            raise refused(path, f"member {info.filename[:80]!r} is compressed or encrypted; "
                          f"{what} stores its members as they are")
        total += info.file_size
        if total > len(data):
            raise refused(path, "its members claim more bytes than the archive holds "
                          "(damaged?)")
    return archive


def read_npz(data: bytes, path: Path) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive in ``data`` (read from ``path``), by name."""
    archive = stored_zip(data, path, "an .npz archive of arrays")
    out: dict[str, np.ndarray] = {}
    for info in archive.infolist():
        name = info.filename
        if not name.endswith(".npy") or name[:-4] in out:
            raise refused(path, f"member {name[:80]!r} is not an array of an .npz archive")
        try:
            raw = archive.read(info)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
            raise refused(path, f"cannot read member {name[:80]!r}: {exc}") from None
        out[name[:-4]] = _npy(raw, path, name[:-4])
    return out


def _npy(raw: bytes, path: Path, name: str) -> np.ndarray:
    """The array of one ``.npy`` file's bytes; the header is checked before any data."""
    from numpy.lib import format as npy

    stream = io.BytesIO(raw)
    try:
        version = npy.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = npy.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npy.read_array_header_2_0(stream)
        else:
            raise ValueError(f"unknown .npy version {version}")
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise refused(path, f"damaged .npy header: {str(exc).splitlines()[0][:160]}",
                      entry=name) from None
    if dtype.hasobject:
        raise refused(path, f"holds Python objects (dtype {dtype}), which only pickle can "
                      "read: refused, nothing unpickled", entry=name)
    body = raw[stream.tell():]
    size = math.prod(shape) * dtype.itemsize
    if len(body) != size:
        raise refused(path, f"an array of shape {shape} and dtype {dtype} needs {size:,} "
                      f"bytes, the file holds {len(body):,} (truncated?)", entry=name)
    array = np.frombuffer(body, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    return array.copy()
