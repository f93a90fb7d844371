"""PEtab SciML HDF5 array files: network parameters, inputs and reference outputs.

Layout (all arrays row-major, in PyTorch index order)::

    metadata/pytorch_format          bool (or integer 0/1) scalar
    parameters/<netId>/<layerId>/<arrayId>
    inputs/<inputId>/<key>           key: "0" (all conditions), "cond1;cond2", or "data"
    outputs/<outputId>/<key>         (reference outputs of the official test suite)

Other top-level groups are allowed (the specification's schema does not forbid them)
and ignored.  ``pytorch_format`` false means the arrays follow the conventions of the
network's own format instead of PyTorch's (specification, "Array data"); every format this
package reads uses PyTorch's dimension order and row-major storage, so the arrays are used
as stored and their shapes are still checked against the network's.

Reading only walks the structure (names, shapes, dtypes); each dataset is a
:class:`LazyArray` read on demand.  Every problem with a file raises
:class:`~petab_sciml.errors.ArrayFileError` naming the file, the dataset path and what was
expected.  This module needs numpy and h5py only.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from petab_sciml.errors import ArrayFileError

if TYPE_CHECKING:  # pragma: no cover
    from petab_sciml.network import Network

__all__ = [
    "ArrayFile",
    "LazyArray",
    "check_parameters",
    "condition_ids",
    "load_parameters",
    "read_array_file",
    "save_parameters",
    "write_array_file",
]

GROUPS = ("metadata", "parameters", "inputs", "outputs")
"""The top-level groups of a PEtab SciML array file that carry meaning (others are ignored)."""

GLOBAL_KEYS = ("0", "data")
"""Keys of input/output arrays that apply to every condition."""

_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMERIC_KINDS = "biuf"
_FORMAT_HINT = "arrays must be stored row-major in PyTorch index order"

PathLike = str | os.PathLike


# ----------------------------------------------------------------------------- data model
@dataclass(frozen=True)
class LazyArray:
    """One dataset of an array file; its values are read only by :meth:`read`.

    ``dataset`` is the HDF5 path inside ``path`` (e.g. ``"parameters/net0/layer1/weight"``),
    ``shape`` and ``dtype`` were taken from the file when its structure was read.
    """

    path: Path
    dataset: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def read(self) -> np.ndarray:
        """Open the file, read the dataset into a new ndarray (0-d for scalars), close.

        Raises :class:`ArrayFileError` if the file or dataset is gone or has changed shape.
        """
        try:
            with h5py.File(self.path, "r") as h5:
                # the shape was checked against the budget when the structure was read
                node = _child(h5, self.dataset, self.path, self.dataset, budget=False)
                if not isinstance(node, h5py.Dataset):
                    raise ArrayFileError("expected a dataset, found a group (the file changed "
                                         "since it was read)", file=self.path, entry=self.dataset)
                if tuple(node.shape or ()) != self.shape:
                    raise ArrayFileError(f"dataset has shape {node.shape}, expected "
                                         f"{self.shape} (the file changed since it was read)",
                                         file=self.path, entry=self.dataset)
                value = np.array(node[()])
        except (OSError, KeyError) as exc:
            raise ArrayFileError(f"cannot read dataset: {_reason(exc)}", file=self.path,
                                 entry=self.dataset) from None
        if value.shape != self.shape:
            raise ArrayFileError(f"dataset has shape {value.shape}, expected {self.shape} (the "
                                 "file changed since it was read)", file=self.path,
                                 entry=self.dataset)
        return value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy protocol: ``np.asarray(lazy)`` reads the dataset."""
        value = self.read()
        return value if dtype is None else value.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"LazyArray({str(self.path)!r}, {self.dataset!r}, shape={self.shape}, " \
               f"dtype={self.dtype})"


@dataclass
class ArrayFile:
    """The structure of a PEtab SciML array file; arrays are :class:`LazyArray` objects."""

    path: Path
    inputs: dict[str, dict[str, LazyArray]] = field(default_factory=dict)
    """``{input_id: {key: array}}``"""
    parameters: dict[str, dict[str, dict[str, LazyArray]]] = field(default_factory=dict)
    """``{net_id: {layer_id: {array_id: array}}}``"""
    outputs: dict[str, dict[str, LazyArray]] = field(default_factory=dict)
    """``{output_id: {key: array}}``"""
    pytorch_format: bool = True
    """``metadata/pytorch_format`` (True for the legacy ``metadata/perm`` = "row")."""
    ignored_groups: tuple[str, ...] = ()
    """Top-level entries that are not part of the layout (allowed, not read)."""


def condition_ids(key: str) -> tuple[str, ...] | None:
    """Condition ids of an input/output key: ``None`` for a global key ("0", "data"),
    else the ``;``-separated ids (spaces around them ignored).

    Raises :class:`ArrayFileError` (without file) if the key is neither.
    """
    if key in GLOBAL_KEYS:
        return None
    parts = tuple(p.strip() for p in key.split(";"))
    if not all(_ID.match(p) for p in parts):
        raise ArrayFileError(
            f"invalid key {key!r}; expected '0' (all conditions), 'data', or condition ids "
            "separated by ';' (e.g. 'cond1;cond2')")
    return parts


# ----------------------------------------------------------------------------- reading
def read_array_file(path: PathLike, *, require_pytorch_format: bool = True) -> ArrayFile:
    """Read the structure (names, shapes, dtypes) of a PEtab SciML array file.

    Datasets are not read; they become :class:`LazyArray` objects.  With
    ``require_pytorch_format`` the file must hold ``metadata/pytorch_format`` as a boolean
    (or integer 0/1) scalar (the legacy marker ``metadata/perm`` = "row" is accepted in its
    place); its value is in :attr:`ArrayFile.pytorch_format`.  Raises
    :class:`ArrayFileError` for a missing or non-HDF5 file and for any layout problem.
    """
    path = Path(path)
    _check_is_hdf5(path)
    try:
        with h5py.File(path, "r") as h5:
            _count_entries(h5, path)
            return _read_root(h5, path, require_pytorch_format)
    except ArrayFileError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as exc:
        raise ArrayFileError(f"cannot read HDF5 file: {_reason(exc)}", file=path) from None


def _check_is_hdf5(path: Path) -> None:
    """Raise unless ``path`` is an existing regular file with an HDF5 signature (and,
    under ``--confine``, inside the confined folder)."""
    from petab_sciml.confine import check_confined

    check_confined(path)
    if not path.exists():
        raise ArrayFileError("file not found; expected a PEtab SciML HDF5 array file",
                             file=path)
    if not path.is_file():
        from petab_sciml.safe_read import file_kind

        raise ArrayFileError(f"is {file_kind(path.stat().st_mode)}, not a regular file; "
                             "expected a PEtab SciML HDF5 array file", file=path,
                             code="FILE_NOT_REGULAR")
    try:
        ok = h5py.is_hdf5(path)
    except OSError as exc:
        raise ArrayFileError(f"cannot open file: {_reason(exc)}", file=path) from None
    if not ok:
        raise ArrayFileError("not an HDF5 file (no HDF5 signature); expected a PEtab SciML "
                             "HDF5 array file", file=path)


def _count_entries(h5: h5py.File, path: Path) -> None:
    """Refuse files with more groups and datasets than ``max_array_entries`` before
    walking them (the layout is at most four levels deep; deeper groups are refused by
    the layout checks, so only the first levels are counted)."""
    from petab_sciml import limits

    budget = limits.current().max_array_entries
    total = 0
    level: list[tuple[str, h5py.Group]] = [("", h5)]
    for _ in range(4):
        below: list[tuple[str, h5py.Group]] = []
        for entry, group in level:
            total += len(group)
            if total > budget:
                raise limits.exceeded("max_array_entries", "groups and datasets", total,
                                      file=path, entry=entry or "/")
            for name in group:
                link = group.get(name, getlink=True)
                if isinstance(link, h5py.HardLink):
                    node = group.get(name)
                    if isinstance(node, h5py.Group):
                        below.append((f"{entry}/{name}".lstrip("/"), node))
        level = below


def _read_root(h5: h5py.File, path: Path, require_pytorch_format: bool) -> ArrayFile:
    """Check the top level and read each group's structure."""
    ignored = []
    for name in h5:
        _child(h5, name, path, name)   # an external link is refused as such, unfollowed
        if name not in GROUPS:
            ignored.append(name)
            continue
        _group(h5, name, path, name)
    result = ArrayFile(path, ignored_groups=tuple(ignored))
    if require_pytorch_format:
        result.pytorch_format = _check_metadata(h5, path)
    if "parameters" in h5:
        result.parameters = _read_parameters(h5["parameters"], path)
    for kind in ("inputs", "outputs"):
        if kind in h5:
            setattr(result, kind, _read_keyed(h5[kind], kind, path))
    return result


def _check_metadata(h5: h5py.File, path: Path) -> bool:
    """Read ``metadata/pytorch_format`` (a boolean, or the legacy ``metadata/perm`` =
    "row"); return its value."""
    # Membership by link (``getlink``): ``name in group`` would follow an external link.
    meta = _group(h5, "metadata", path, "metadata") if h5.get(
        "metadata", getlink=True) is not None else None

    def has(name: str) -> bool:
        return meta is not None and meta.get(name, getlink=True) is not None

    if not has("pytorch_format"):
        if has("perm"):
            _check_legacy_perm(meta, path)
            return True
        raise ArrayFileError(f"missing metadata/pytorch_format; expected a boolean scalar "
                             f"(true: {_FORMAT_HINT})", file=path,
                             entry="metadata/pytorch_format")
    entry = "metadata/pytorch_format"
    node = _dataset(meta, "pytorch_format", path, entry)
    if node.shape != () or node.dtype.kind not in "biu":
        raise ArrayFileError(f"must be a boolean (or integer 0/1) scalar, got dtype "
                             f"{node.dtype} and shape {node.shape}", file=path, entry=entry)
    value = int(node[()])
    if value not in (0, 1):
        raise ArrayFileError(f"is {value}, expected a boolean: 1 (true, {_FORMAT_HINT}) or "
                             "0 (false, the network format's own conventions)", file=path,
                             entry=entry)
    return bool(value)


def _check_legacy_perm(meta: h5py.Group, path: Path) -> None:
    """Accept the older ``metadata/perm`` marker when it says row-major."""
    entry = "metadata/perm"
    node = _dataset(meta, "perm", path, entry)
    value = node[()] if node.shape == () else None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value != "row":
        raise ArrayFileError(f"is {value!r}; only row-major files ('row', or "
                             f"metadata/pytorch_format = 1) are supported", file=path,
                             entry=entry)


_PARAMETER_LAYOUT = "parameters/<netId>/<layerId>/<arrayId>"


def _read_parameters(group: h5py.Group, path: Path) -> dict[str, dict[str, dict[str, LazyArray]]]:
    """``parameters/<netId>/<layerId>/<arrayId>`` -> nested dicts of lazy arrays."""
    out: dict[str, dict[str, dict[str, LazyArray]]] = {}
    for net_id in group:
        net_entry = f"parameters/{net_id}"
        net = _group(group, net_id, path, net_entry, _PARAMETER_LAYOUT)
        _check_id(net_id, "network id", path, net_entry)
        layers: dict[str, dict[str, LazyArray]] = {}
        for layer_id in net:
            entry = f"{net_entry}/{layer_id}"
            layer = _group(net, layer_id, path, entry, _PARAMETER_LAYOUT)
            _check_id(layer_id, "layer id", path, entry)
            for array_id in layer:
                _check_id(array_id, "array id", path, f"{entry}/{array_id}")
            layers[layer_id] = _read_leaves(layer, path, entry, _PARAMETER_LAYOUT)
        out[net_id] = layers
    return out


def _read_keyed(group: h5py.Group, kind: str, path: Path) -> dict[str, dict[str, LazyArray]]:
    """``<kind>/<id>/<key>`` (kind "inputs" or "outputs") -> ``{id: {key: array}}``."""
    layout = f"{kind}/<id>/<key>"
    out: dict[str, dict[str, LazyArray]] = {}
    for item_id in group:
        entry = f"{kind}/{item_id}"
        sub = _group(group, item_id, path, entry, layout)
        _check_id(item_id, f"{kind[:-1]} id", path, entry)
        arrays = _read_leaves(sub, path, entry, layout)
        _check_keys({key: array.dataset for key, array in arrays.items()}, path)
        out[item_id] = arrays
    return out


def _check_keys(entries: Mapping[str, str], path: Path) -> None:
    """``entries`` maps keys to dataset paths.  Each key must parse, a global key ("0",
    "data") stands alone, and no condition may appear under two keys."""
    seen: dict[str, str] = {}
    global_keys = [k for k in entries if k in GLOBAL_KEYS]
    if global_keys and len(entries) > 1:
        other = next(k for k in entries if k != global_keys[0])
        raise ArrayFileError(f"holds both a global dataset {global_keys[0]!r} (all "
                             f"conditions) and {other!r}; give either one global dataset "
                             "or condition-specific datasets", file=path,
                             entry=entries[other], code="ARRAY_INPUT_GLOBAL_AND_CONDITIONS")
    for key, entry in entries.items():
        try:
            ids = condition_ids(key)
        except ArrayFileError as exc:
            raise ArrayFileError(exc.message, file=path, entry=entry) from None
        for cid in ids or ():
            if cid in seen:
                raise ArrayFileError(f"condition {cid!r} appears under two keys ({seen[cid]!r} "
                                     f"and {key!r}); each condition may have one array",
                                     file=path, entry=entry)
            seen[cid] = key


def _read_leaves(group: h5py.Group, path: Path, entry: str, layout: str
                 ) -> dict[str, LazyArray]:
    """The datasets directly below ``group`` (at ``entry``); it must hold at least one,
    and nothing else."""
    if len(group) == 0:
        raise ArrayFileError(f"group holds no arrays; expected datasets (layout {layout})",
                             file=path, entry=entry)
    out = {}
    for name in group:
        node = _dataset(group, name, path, f"{entry}/{name}", layout)
        out[name] = LazyArray(path, f"{entry}/{name}", tuple(node.shape), node.dtype)
    return out


def _child(group: h5py.Group, name: str, path: Path, entry: str, *, budget: bool = True
           ) -> Any:
    """``group[name]`` (``name`` may be a path ``a/b/c``), with broken links and unreadable
    objects reported.  Links are resolved one level at a time: an external link (which
    would open another file), also one reached through soft links, is refused without
    being followed.  A dataset must hold its own data, and with ``budget`` at most
    ``max_array_elements`` elements."""
    try:
        node = _walk(group, name, path, entry, 0)
    except (KeyError, OSError, RuntimeError, ValueError) as exc:
        raise ArrayFileError(f"cannot open entry (broken link?): {_reason(exc)}", file=path,
                             entry=entry) from None
    if isinstance(node, h5py.Dataset):
        _check_own_data(node, path, entry, budget=budget)
    return node


def _walk(group: Any, name: str, path: Path, entry: str, hops: int) -> Any:
    node = group.file if name.startswith("/") else group
    for part in (p for p in name.split("/") if p and p != "."):
        if not isinstance(node, h5py.Group):
            raise KeyError(f"{part!r} below a dataset")
        link = node.get(part, getlink=True)
        if link is None:
            raise KeyError(f"no entry {part!r}")
        if isinstance(link, h5py.ExternalLink):
            raise ArrayFileError(f"is or passes through an external link to "
                                 f"{link.filename!r}:{link.path}; array files must hold their "
                                 "own data (external links read other files)", file=path,
                                 entry=entry, code="ARRAY_EXTERNAL_DATA")
        if isinstance(link, h5py.SoftLink):
            if hops >= 16:
                raise ArrayFileError("soft links nest more than 16 deep (a cycle?)",
                                     file=path, entry=entry)
            node = _walk(node, link.path, path, entry, hops + 1)
        else:
            node = node[part]
    return node


def _check_own_data(node: h5py.Dataset, path: Path, entry: str, *, budget: bool = True
                    ) -> None:
    """Refuse datasets whose values live in other files (external raw storage, virtual
    datasets) and datasets larger than ``max_array_elements``, before any value is
    read."""
    from petab_sciml import limits

    if node.external:
        files = ", ".join(repr(item[0]) for item in node.external[:3])
        raise ArrayFileError(f"dataset stores its values in external file(s) {files}; array "
                             "files must hold their own data", file=path, entry=entry,
                             code="ARRAY_EXTERNAL_DATA")
    if node.is_virtual:
        sources = ", ".join(sorted({repr(m.file_name) for m in node.virtual_sources()})[:3])
        raise ArrayFileError(f"is a virtual dataset reading {sources}; array files must hold "
                             "their own data", file=path, entry=entry,
                             code="ARRAY_EXTERNAL_DATA")
    if budget and node.shape:
        size = math.prod(node.shape)
        limits.check("max_array_elements", f"dataset of shape {tuple(node.shape)}: elements",
                     size, file=path, entry=entry, backed=size if _holds_its_bytes(node) else 0)


def _holds_its_bytes(node: h5py.Dataset) -> bool:
    """Whether the file stores every byte the dataset declares: contiguous, uncompressed
    and written (a chunked or compressed dataset, or one never written, may declare
    far more than the file holds)."""
    try:
        return (node.chunks is None and node.compression is None
                and node.id.get_storage_size() >= node.size * node.dtype.itemsize)
    except (OSError, ValueError, TypeError):
        return False


def _group(parent: h5py.Group, name: str, path: Path, entry: str,
           layout: str | None = None) -> h5py.Group:
    """The child group ``name`` (at ``entry``); a dataset here means the data sits one
    level too high."""
    node = _child(parent, name, path, entry)
    if not isinstance(node, h5py.Group):
        found = "a dataset" if isinstance(node, h5py.Dataset) else type(node).__name__
        where = f" (layout {layout})" if layout else ""
        raise ArrayFileError(f"expected a group, found {found}{where}", file=path, entry=entry)
    return node


def _dataset(parent: h5py.Group, name: str, path: Path, entry: str,
             layout: str | None = None) -> h5py.Dataset:
    """The child dataset ``name`` (at ``entry``) with a simple (non-null) dataspace;
    numeric if ``layout`` is given (i.e. it is a data array, not metadata)."""
    node = _child(parent, name, path, entry)
    where = f" (layout {layout})" if layout else ""
    if isinstance(node, h5py.Group):
        raise ArrayFileError(f"expected a dataset, found a group: nested too deep{where}",
                             file=path, entry=entry)
    if not isinstance(node, h5py.Dataset):
        raise ArrayFileError(f"expected a dataset, found {type(node).__name__}{where}",
                             file=path, entry=entry)
    if node.shape is None:
        raise ArrayFileError("dataset has a null dataspace (no shape); expected an array",
                             file=path, entry=entry)
    if layout and node.dtype.kind not in _NUMERIC_KINDS:
        raise ArrayFileError(f"expected a numeric array (bool, integer or float), got dtype "
                             f"{node.dtype}", file=path, entry=entry)
    return node


def _check_id(name: str, what: str, path: Path, entry: str) -> None:
    """Raise unless ``name`` is a PEtab id."""
    if not _ID.match(name):
        raise ArrayFileError(f"invalid {what} {name!r}; expected a PEtab id (letters, digits "
                             "and underscores, not starting with a digit)", file=path,
                             entry=entry)


def _reason(exc: BaseException) -> str:
    """A short one-line reason for an h5py/OS exception."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return text.strip().strip("\"'").splitlines()[0]


# ----------------------------------------------------------------------------- writing
def write_array_file(
    path: PathLike,
    *,
    parameters: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    inputs: Mapping[str, Mapping[str, Any]] | None = None,
    outputs: Mapping[str, Mapping[str, Any]] | None = None,
    overwrite: bool = True,
    inputs_of: Sequence[PathLike] = (),
) -> None:
    """Write a PEtab SciML array file atomically.

    ``parameters`` is ``{net_id: {layer_id: {array_id: array}}}``, ``inputs`` and
    ``outputs`` are ``{id: {key: array}}``.  Arrays keep their dtype and are stored as
    given (PyTorch index order).  All names and values are checked before anything is
    written; the data goes to a temporary file in the same folder that replaces ``path``
    only when complete, so a failure leaves an existing ``path`` untouched
    (:func:`petab_sciml.safe_write.staged_output`; ``overwrite`` False refuses an existing
    file, ``inputs_of`` lists files the output must not be).
    ``metadata/pytorch_format`` is always set to uint8 1.
    """
    from petab_sciml.safe_write import staged_output

    path = Path(path)
    datasets = _collect(path, parameters or {}, inputs or {}, outputs or {})
    try:
        with staged_output(path, overwrite=overwrite, inputs=inputs_of) as tmp:
            _write_datasets(tmp, datasets)
    except OSError as exc:
        raise ArrayFileError(f"cannot write file: {_reason(exc)}", file=path) from exc


def _write_datasets(tmp: Path, datasets: Mapping[str, np.ndarray]) -> None:
    # The newer file-format versions make small files about three times smaller.
    with h5py.File(tmp, "w", libver=("v110", "latest")) as h5:
        h5.create_dataset("metadata/pytorch_format", data=np.uint8(1))
        for name, value in datasets.items():
            h5.create_dataset(name, data=value)


def _collect(path: Path, parameters: Mapping, inputs: Mapping, outputs: Mapping
             ) -> dict[str, np.ndarray]:
    """Check all names and convert all values: ``{dataset path: ndarray}``."""
    out: dict[str, np.ndarray] = {}
    for net_id, layers in _items(parameters, "parameters", path):
        _check_id(net_id, "network id", path, f"parameters/{net_id}")
        for layer_id, arrays in _items(layers, f"parameters/{net_id}", path):
            _check_id(layer_id, "layer id", path, f"parameters/{net_id}/{layer_id}")
            for array_id, value in _items(arrays, f"parameters/{net_id}/{layer_id}", path):
                entry = f"parameters/{net_id}/{layer_id}/{array_id}"
                _check_id(array_id, "array id", path, entry)
                out[entry] = _to_numpy(value, path, entry)
    for kind, mapping in (("inputs", inputs), ("outputs", outputs)):
        for item_id, arrays in _items(mapping, kind, path):
            _check_id(item_id, f"{kind[:-1]} id", path, f"{kind}/{item_id}")
            for key, value in _items(arrays, f"{kind}/{item_id}", path):
                entry = f"{kind}/{item_id}/{key}"
                if not isinstance(key, str):
                    raise ArrayFileError(f"key must be a string, got {key!r}", file=path,
                                         entry=entry)
                out[entry] = _to_numpy(value, path, entry)
            _check_keys({key: f"{kind}/{item_id}/{key}" for key in arrays}, path)
    return out


def _items(mapping: Any, entry: str, path: Path) -> list[tuple[Any, Any]]:
    if not isinstance(mapping, Mapping):
        raise ArrayFileError(f"expected a mapping of names to arrays/groups, got "
                             f"{type(mapping).__name__}", file=path, entry=entry)
    for name in mapping:
        if not isinstance(name, str) or not name or "/" in name:
            raise ArrayFileError(f"invalid name {name!r}; expected a non-empty string "
                                 "without '/'", file=path, entry=entry)
    return list(mapping.items())


def _to_numpy(value: Any, path: Path, entry: str) -> np.ndarray:
    """A numeric ndarray from an array-like (numpy, torch, jax, LazyArray, nested lists)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch tensor, without torch
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, ArrayFileError) as exc:
        message = exc.message if isinstance(exc, ArrayFileError) else str(exc)
        raise ArrayFileError(f"cannot convert value to an array: {message}", file=path,
                             entry=entry) from None
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise ArrayFileError(f"expected a numeric array (bool, integer or float), got dtype "
                             f"{array.dtype}", file=path, entry=entry)
    return array


# ----------------------------------------------------------------------------- parameters
def check_parameters(
    network: Network,
    arrays: Mapping[str, Mapping[str, Any]],
    *,
    file: PathLike | None = None,
    net_id: str | None = None,
    strict: bool = True,
) -> None:
    """Check ``{layer_id: {array_id: array}}`` against ``network.parameter_arrays()``.

    Every group must be a layer (or free-parameter group) with arrays, every array one of
    its arrays with exactly the expected PyTorch shape (anything with ``.shape``, or
    nested lists).  With ``strict`` every trainable array must be present; buffers
    (e.g. BatchNorm running statistics) are always optional.  Errors name
    ``parameters/<net_id>/<layer>/<array>`` (``net_id`` defaults to ``network.id``).
    """
    net_id = net_id or network.id
    expected = network.parameter_arrays()
    if not isinstance(arrays, Mapping):
        raise ArrayFileError(f"expected a mapping {{layer_id: {{array_id: array}}}}, got "
                             f"{type(arrays).__name__}", file=file, entry=f"parameters/{net_id}")
    for layer_id, given in arrays.items():
        entry = f"parameters/{net_id}/{layer_id}"
        _check_group_known(network, expected, layer_id, file, entry)
        if not isinstance(given, Mapping):
            raise ArrayFileError(f"expected a mapping {{array_id: array}}, got "
                                 f"{type(given).__name__}", file=file, entry=entry)
        for array_id, value in given.items():
            _check_array(network, expected[layer_id], layer_id, array_id, value, file,
                         f"{entry}/{array_id}")
    if strict:
        _check_complete(network, expected, arrays, file, net_id)


def _describe(network: Network, group: str) -> str:
    layer = network.layers.get(group)
    return f"layer {group!r} ({layer.type})" if layer else f"free parameter group {group!r}"


def _check_group_known(network: Network, expected: Mapping, layer_id: str,
                       file: PathLike | None, entry: str) -> None:
    if layer_id in expected:
        return
    known = ", ".join(expected) or "none"
    if layer_id in network.layers:
        raise ArrayFileError(f"layer {layer_id!r} ({network.layers[layer_id].type}) has no "
                             f"parameters; layers with parameters: {known}", file=file,
                             entry=entry)
    raise ArrayFileError(f"unknown layer {layer_id!r}: network {network.id!r} has no such "
                         f"layer; layers with parameters: {known}", file=file, entry=entry)


def _check_array(network: Network, infos: Mapping, layer_id: str, array_id: str, value: Any,
                 file: PathLike | None, entry: str) -> None:
    what = _describe(network, layer_id)
    if array_id not in infos:
        raise ArrayFileError(f"unknown array {array_id!r} of {what}; expected "
                             f"{', '.join(infos)}", file=file, entry=entry)
    shape = getattr(value, "shape", None)
    try:
        shape = tuple(int(d) for d in (np.shape(value) if shape is None else shape))
    except (TypeError, ValueError):
        raise ArrayFileError(f"cannot determine the shape of {type(value).__name__}",
                             file=file, entry=entry) from None
    want = tuple(infos[array_id].shape)
    if shape != want:
        raise ArrayFileError(f"shape mismatch: got {shape}, expected {want} for "
                             f"{layer_id}.{array_id} of {what}", file=file, entry=entry)


def _check_complete(network: Network, expected: Mapping, arrays: Mapping,
                    file: PathLike | None, net_id: str) -> None:
    for layer_id, infos in expected.items():
        for array_id, info in infos.items():
            if info.trainable and array_id not in arrays.get(layer_id, {}):
                raise ArrayFileError(
                    f"missing trainable array {layer_id}.{array_id} of "
                    f"{_describe(network, layer_id)}, expected shape {tuple(info.shape)}",
                    file=file, entry=f"parameters/{net_id}/{layer_id}/{array_id}")


def load_parameters(path: PathLike, network: Network, *, strict: bool = True
                    ) -> dict[str, dict[str, np.ndarray]]:
    """Read and check the parameters of ``network`` from an array file.

    Uses ``parameters/<network.id>``; if the file holds exactly one other network id the
    error names both.  A file without a ``parameters`` group yields ``{}`` unless
    ``strict`` and the network has trainable arrays.  Returns
    ``{layer_id: {array_id: ndarray}}`` with the file's dtypes.
    """
    path = Path(path)
    nets = read_array_file(path).parameters
    if network.id in nets:
        groups = nets[network.id]
    elif nets:
        raise ArrayFileError(
            f"holds parameters for network(s) {', '.join(map(repr, nets))} but not for "
            f"network {network.id!r}; expected group parameters/{network.id}", file=path,
            entry=f"parameters/{next(iter(nets))}" if len(nets) == 1 else "parameters")
    else:
        groups = {}
    check_parameters(network, groups, file=path, net_id=network.id, strict=strict)
    return {layer: {name: array.read() for name, array in group.items()}
            for layer, group in groups.items()}


def save_parameters(path: PathLike, network: Network,
                    params: Mapping[str, Mapping[str, Any]], *, overwrite: bool = True,
                    inputs_of: Sequence[PathLike] = ()) -> None:
    """Check ``{layer_id: {array_id: array}}`` (non-strict) and write it atomically as
    ``parameters/<network.id>/...``.

    An existing array file is updated, not replaced: everything it holds besides
    ``parameters/<network.id>`` (inputs, outputs, other networks' parameters, attributes)
    is copied over unchanged.  It must be a readable PEtab SciML array file (else nothing
    is written).  ``overwrite`` False refuses an existing file.
    """
    from petab_sciml.safe_write import check_output, staged_output

    path = Path(path)
    check_parameters(network, params, file=path, net_id=network.id, strict=False)
    datasets = _collect(path, {network.id: params}, {}, {})
    check_output(path, overwrite=overwrite, inputs=inputs_of)
    keep = None
    if os.path.lexists(path):
        keep = read_array_file(path)   # refuses damaged files and external data
    try:
        with staged_output(path, overwrite=overwrite, inputs=inputs_of) as tmp:
            with h5py.File(tmp, "w", libver=("v110", "latest")) as h5:
                if keep is not None:
                    _copy_others(path, h5, network.id)
                if "metadata/pytorch_format" not in h5:
                    h5.create_dataset("metadata/pytorch_format", data=np.uint8(1))
                for name, value in datasets.items():
                    h5.create_dataset(name, data=value)
    except OSError as exc:
        raise ArrayFileError(f"cannot write file: {_reason(exc)}", file=path) from exc


def _copy_others(path: Path, h5: h5py.File, net_id: str) -> None:
    """Copy every group of the array file ``path`` into ``h5`` except
    ``parameters/<net_id>`` (links are copied as they are, never followed)."""
    with h5py.File(path, "r") as old:
        for name in old:
            if name == "parameters":
                group = h5.require_group("parameters")
                group.attrs.update(old["parameters"].attrs)
                for net in old["parameters"]:
                    if net != net_id:
                        old.copy(old["parameters"][net], group, name=net)
            else:
                old.copy(old[name], h5, name=name)
        h5.attrs.update(old.attrs)
