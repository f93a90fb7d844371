"""Reading ``results.h5`` (the layout in :mod:`petab_sciml.fit.results`) as untrusted
input: a results file is what people share.

Only the entries of the layout are read, each by a hard link of this file: an external
link, a soft link, a dataset whose values live in other files (external raw storage, a
virtual dataset) is refused without being followed.  Every dataset and attribute must be
numeric (attributes may be text) with at most ``max_array_elements`` elements, and a
file at most ``max_array_entries`` starts and optimizer arrays per start, all checked
from the metadata before a value is read.  Errors are
:class:`~petab_sciml.fit.artifacts.ArtifactError` naming the file and the entry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.fit.artifacts import ArtifactError
from petab_sciml.fit.task import StartResult

START_DATASETS = ("objective", "trace", "w", "mech")
START_ATTRIBUTES = ("ok", "steps", "seconds", "interrupted")


def read_results(path: Path) -> tuple[dict[str, Any], tuple[str, ...], list[StartResult]]:
    """``(settings, parameter ids, starts)`` of the results file ``path``."""
    import h5py

    from petab_sciml.errors import InputFileError
    from petab_sciml.safe_read import check_regular_file

    try:
        check_regular_file(path, what="a results file (HDF5)", limit=None)
        if not h5py.is_hdf5(path):
            raise ArtifactError("not an HDF5 file; expected a fit's results.h5", file=path)
        with h5py.File(path, "r") as h5:
            settings = {k: _attribute(h5, k, path, "/") for k in h5.attrs
                        if k not in ("best", "parameter_ids")}
            ids = tuple(str(x) for x in np.atleast_1d(_attribute(h5, "parameter_ids", path,
                                                                 "/")) if str(x))
            starts = _group(h5, "starts", path)
            _count(starts, path, "starts")
            results = [_start(_group(starts, key, path, f"starts/{key}"), key, path)
                       for key in starts]
    except InputFileError as exc:
        raise ArtifactError(exc.message, file=path, entry=exc.entry) from None
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ArtifactError(f"cannot read the results file: {reason}", file=path) from None
    return settings, ids, results


def _start(g: Any, key: str, path: Path) -> StartResult:
    where = f"starts/{key}"
    if not key.isdigit():
        raise ArtifactError("expected a start number", file=path, entry=where)
    values = {name: _dataset(g, name, path, f"{where}/{name}") for name in START_DATASETS}
    optimizer = _group(g, "optimizer", path, f"{where}/optimizer")
    _count(optimizer, path, f"{where}/optimizer")
    state = {k.replace("|", "/"): _dataset(optimizer, k, path, f"{where}/optimizer/{k}")
             for k in optimizer}
    attrs = {k: _attribute(g, k, path, where) for k in START_ATTRIBUTES}
    stopped_at = _attribute(g, "stopped_at", path, where) if "stopped_at" in g.attrs else 0
    named = {}
    if "parameters" in g:       # absent in files written before names were stored
        group = _group(g, "parameters", path, f"{where}/parameters")
        _count(group, path, f"{where}/parameters")
        named = {k: np.asarray(_dataset(group, k, path, f"{where}/parameters/{k}"),
                               dtype=np.float64) for k in group}
    return StartResult(int(key), values["trace"], float(values["objective"]), values["w"],
                       values["mech"], state, bool(attrs["ok"]), int(attrs["steps"]),
                       float(attrs["seconds"]), bool(attrs["interrupted"]), int(stopped_at),
                       named)


def _link(parent: Any, name: str, path: Path, entry: str) -> Any:
    """``parent[name]`` if it is a hard link of this file."""
    import h5py

    link = parent.get(name, getlink=True)
    if link is None:
        raise ArtifactError("missing", file=path, entry=entry)
    if isinstance(link, h5py.ExternalLink):
        raise ArtifactError(f"is an external link to {link.filename!r}; a results file "
                            "holds its own data (not followed)", file=path, entry=entry)
    if not isinstance(link, h5py.HardLink):
        raise ArtifactError("is a soft link; a results file holds its own data (not "
                            "followed)", file=path, entry=entry)
    return parent[name]


def _group(parent: Any, name: str, path: Path, entry: str | None = None) -> Any:
    import h5py

    node = _link(parent, name, path, entry or name)
    if not isinstance(node, h5py.Group):
        raise ArtifactError("expected a group", file=path, entry=entry or name)
    return node


def _count(group: Any, path: Path, entry: str) -> None:
    from petab_sciml import limits

    limits.check("max_array_entries", "entries", len(group), file=path, entry=entry)


def _dataset(parent: Any, name: str, path: Path, entry: str) -> np.ndarray:
    """The values of a numeric dataset that holds its own data, within the budget."""
    import h5py

    from petab_sciml import limits

    node = _link(parent, name, path, entry)
    if not isinstance(node, h5py.Dataset) or node.shape is None:
        raise ArtifactError("expected an array", file=path, entry=entry)
    if node.external or node.is_virtual:
        raise ArtifactError("stores its values in other files; a results file holds its "
                            "own data (not read)", file=path, entry=entry)
    if node.dtype.kind not in "biuf":
        raise ArtifactError(f"expected numbers, found dtype {node.dtype}", file=path,
                            entry=entry)
    limits.check("max_array_elements", f"dataset of shape {node.shape}: elements",
                 math.prod(node.shape), file=path, entry=entry)
    return node[()]


def _attribute(node: Any, name: str, path: Path, where: str) -> Any:
    """An attribute's value (numbers or text, within the element budget)."""
    from petab_sciml import limits

    entry = f"{where.rstrip('/')}@{name}" if where != "/" else f"@{name}"
    if name not in node.attrs:
        raise ArtifactError("missing attribute", file=path, entry=entry)
    attr = node.attrs.get_id(name)
    shape = attr.shape or ()
    limits.check("max_array_elements", "attribute elements", math.prod(shape), file=path,
                 entry=entry)
    import h5py

    text = attr.dtype.kind in "SU" or h5py.check_string_dtype(attr.dtype) is not None
    if attr.dtype.kind not in "biuf" and not text:
        raise ArtifactError(f"expected numbers or text, found dtype {attr.dtype}",
                            file=path, entry=entry)
    value = node.attrs[name]
    return value.item() if hasattr(value, "item") and np.ndim(value) == 0 else value
