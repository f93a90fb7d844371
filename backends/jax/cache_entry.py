"""One entry of the JAX export cache (:mod:`.cache`): its format and the checks it must
pass before the computation in it is used.

An entry is :data:`MAGIC`, a one-line JSON header (the entry's key, the size and the
SHA-256 of its content) and the content (``jax.export``'s serialized computation).  A
stored computation is compiled and run, so an entry is trusted only as far as these
checks go (``docs/security.md``):

* :func:`check_private` (on the opened file, before a byte is read): the entry belongs
  to this user and nobody else can write it, so an entry planted or replaced in a
  shared cache folder by another user is not loaded;
* :func:`unpack_entry`: the header names this entry's key, the size and the hash match
  (a truncated, damaged, or renamed entry is refused before deserializing);
* :func:`check_signature` (after deserializing, before compiling): the computation takes
  exactly the arguments of the objective it stands for (the same tree of arrays with the
  same shapes and dtypes) and runs on as many devices.

A header's hash is integrity, not authenticity: whoever can write an entry as this
user can also write a matching header.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any

MAGIC = b"PETAB-SCIML-EXPORT 1\n"
MAX_HEADER_BYTES = 4096


class EntryRefused(ValueError):
    """An entry that must not be used; the message says why."""


def pack_entry(key: str, blob: bytes) -> bytes:
    """A cache entry: header (key, size, SHA-256 of ``blob``) and ``blob``."""
    header = {"key": key, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + blob


def unpack_entry(data: bytes, key: str) -> bytes:
    """The content of an entry written by :func:`pack_entry` for ``key``; raises
    ``ValueError`` saying why an entry is not usable."""
    if not data.startswith(MAGIC):
        raise EntryRefused("not a petab-sciml cache entry (no header)")
    header_line, sep, blob = data[len(MAGIC):].partition(b"\n")
    if not sep or len(header_line) > MAX_HEADER_BYTES:
        raise EntryRefused("truncated or oversized header")
    try:
        header = json.loads(header_line)
    except (ValueError, RecursionError):
        raise EntryRefused("damaged header") from None
    if not isinstance(header, dict) or header.get("key") != key:
        raise EntryRefused("the entry belongs to another computation (key mismatch)")
    if header.get("size") != len(blob):
        raise EntryRefused(f"size {len(blob)} differs from the recorded {header.get('size')}")
    if header.get("sha256") != hashlib.sha256(blob).hexdigest():
        raise EntryRefused("content hash mismatch (damaged or altered)")
    return blob


def check_private(st: os.stat_result) -> None:
    """Refuse an entry file (its ``fstat``) that another user owns or that anyone but
    its owner can write (where the system has user ids)."""
    if not hasattr(os, "getuid"):
        return
    if st.st_uid != os.getuid():
        raise EntryRefused(f"written by another user (uid {st.st_uid}); entries of a cache "
                           "that others write to are not loaded")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise EntryRefused(f"others may write it (mode {stat.filemode(st.st_mode)}); such "
                           "entries are not loaded")


def check_signature(exported: Any, args: tuple, n_devices: int) -> None:
    """Refuse a deserialized computation that does not take ``args`` (tree, shapes,
    dtypes) or runs on another number of devices than ``n_devices``."""
    import jax

    leaves, tree = jax.tree_util.tree_flatten((args, {}))
    if exported.in_tree != tree:
        raise EntryRefused("the stored computation takes other arguments (structure)")
    avals = list(exported.in_avals)
    if len(avals) != len(leaves) or any(
            tuple(a.shape) != tuple(x.shape) or a.dtype != x.dtype
            for a, x in zip(avals, leaves)):
        raise EntryRefused("the stored computation takes other arguments (shapes or dtypes)")
    if exported.nr_devices not in (1, n_devices):
        raise EntryRefused(f"the stored computation runs on {exported.nr_devices} devices, "
                           f"not {n_devices}")
