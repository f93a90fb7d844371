"""Parameter resolution: parameter-table rows -> per-element network parameter data.

One function, :func:`resolve_network`, used by the validator, ``info``, the loader and
(through the loaded problem) every backend.  The result is plain data: numpy arrays keyed
``{layer: {array: ndarray}}`` in PyTorch layout, so a simulator can take it without
re-parsing anything.

Rules (PEtab SciML parameter table):

* each row mapped to ``net.parameters[...]`` covers the network (level 0), a layer (1), an
  array (2) or elements of an array (3); network- and layer-level rows cover the
  trainable arrays only (buffers such as running statistics only when named as arrays);
* for every element the most specific covering row wins, for every column (nominal value,
  estimate, bounds, prior, dropout); two rows of the same level covering one element are
  ambiguous (an error);
* ``nominalValue`` ``array`` takes the values from the array files, a number fills every
  covered element (array files are then ignored there), empty (only with ``estimate``
  true) takes the array files' values when present, else the backend's initialisation;
* bounds default to ``-inf``/``inf``; a prior applies to each element separately;
* ``dropout`` is decided per array by the most specific row covering the whole array
  (levels 0-2); empty means no dropout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.problem.entities import EntityRef
from petab_sciml.problem.issues import IssueList

ARRAY = "array"


@dataclass(frozen=True)
class Prior:
    """A PEtab prior applied to each element separately."""

    distribution: str
    parameters: tuple[float, ...]

    def __str__(self) -> str:
        return f"{self.distribution}({', '.join(f'{p:g}' for p in self.parameters)})"


@dataclass(frozen=True)
class ParameterRow:
    """A parameter-table row mapped to network parameters."""

    id: str
    ref: EntityRef
    line: int
    nominal: str | float | None
    """``"array"``, a number, or None (empty)."""
    estimate: bool
    lower: float = -math.inf
    upper: float = math.inf
    prior: Prior | None = None
    dropout: float | None = None


@dataclass
class RowSummary:
    """What one row resolved to: the elements it names and those where it wins."""

    row: ParameterRow
    targets: list[str]
    """``layer.array`` (with index) of every array the row names."""
    elements: int
    """Number of scalars the row names."""
    effective: int
    """Number of scalars where the row is the most specific (wins)."""


Nested = dict[str, dict[str, Any]]


@dataclass
class ResolvedNetwork:
    """Everything the parameter table says about one network's parameters.

    ``row_index[layer][array]`` holds, per element, the index into ``rows`` of the winning
    row (-1: no row covers it).  ``values`` holds the initial values (float64) where the
    problem defines them; ``from_backend[layer][array]`` marks elements whose initial value
    is the backend's own initialisation (no array file value and no number).  ``trainable``,
    ``lower``, ``upper`` and ``prior_index`` are derived per element on first access.
    """

    net_id: str
    shapes: dict[str, dict[str, tuple[int, ...]]]
    rows: list[ParameterRow]
    row_index: Nested
    summaries: list[RowSummary]
    dropout: dict[str, dict[str, float]] = field(default_factory=dict)
    values: Nested | None = None
    from_backend: Nested = field(default_factory=dict)
    mismatched: frozenset[tuple[str, str]] = frozenset()
    """``(layer, array)`` whose array-file entry has the wrong shape (reported as
    ``ARRAY_PARAMETERS_MISMATCH``): not reported again as missing."""

    def _per_element(self, column: np.ndarray, default: Any, dtype: Any) -> Nested:
        table = np.append(np.asarray(column, dtype=dtype), np.asarray([default], dtype=dtype))
        out: Nested = {}
        for layer, arrays in self.row_index.items():
            out[layer] = {}
            for name, idx in arrays.items():
                k = _uniform(idx)
                # -1 picks the default at the end; one row for a whole array (validation
                # keeps those as read-only broadcast views): no per-element copy
                out[layer][name] = table[idx] if k is None else np.broadcast_to(table[k],
                                                                                idx.shape)
        return out

    @cached_property
    def trainable(self) -> Nested:
        """Boolean masks: True where the element is estimated."""
        return self._per_element(np.array([r.estimate for r in self.rows], bool), False, bool)

    @cached_property
    def lower(self) -> Nested:
        return self._per_element(np.array([r.lower for r in self.rows], float), -np.inf,
                                 np.float64)

    @cached_property
    def upper(self) -> Nested:
        return self._per_element(np.array([r.upper for r in self.rows], float), np.inf,
                                 np.float64)

    @cached_property
    def priors(self) -> list[Prior]:
        """Distinct priors; ``prior_index`` points into this list (-1: none)."""
        seen: list[Prior] = []
        for r in self.rows:
            if r.prior is not None and r.prior not in seen:
                seen.append(r.prior)
        return seen

    @cached_property
    def prior_index(self) -> Nested:
        column = np.array([-1 if r.prior is None else self.priors.index(r.prior)
                           for r in self.rows], np.int32)
        return self._per_element(column, -1, np.int32)

    def prior_of(self, layer: str, array: str, index: tuple[int, ...]) -> Prior | None:
        i = int(self.prior_index[layer][array][index])
        return None if i < 0 else self.priors[i]

    @property
    def n_trainable(self) -> int:
        return int(sum(int(m.sum()) for arrays in self.trainable.values()
                       for m in arrays.values()))

    @property
    def n_elements(self) -> int:
        return int(sum(math.prod(s) for arrays in self.shapes.values() for s in arrays.values()))


def _targets(ref: EntityRef, shapes: Mapping[str, Mapping[str, tuple[int, ...]]],
             trainable: Mapping[str, Mapping[str, bool]]) -> list[tuple[str, str, Any]]:
    """(layer, array, numpy index) of every block ``ref`` covers."""
    if ref.layer is None:
        return [(lay, arr, ...) for lay, arrays in shapes.items() for arr in arrays
                if trainable[lay][arr]]
    if ref.layer not in shapes:
        return []
    if ref.array is None:
        return [(ref.layer, arr, ...) for arr in shapes[ref.layer] if trainable[ref.layer][arr]]
    if ref.array not in shapes[ref.layer]:
        return []
    return [(ref.layer, ref.array, ... if ref.index is None else tuple(ref.index))]


def resolve_network(
    network: Any,
    rows: list[ParameterRow],
    file_arrays: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    read_values: bool = True,
    issues: IssueList | None = None,
    table_file: str | None = None,
    mismatched: Iterable[tuple[str, str]] = (),
) -> ResolvedNetwork:
    """Resolve the rows of one network.

    ``network`` is the IR (only ``parameter_arrays()`` is used); ``rows`` its mapped
    parameter-table rows (already checked against the IR); ``file_arrays`` the
    ``{layer: {array: LazyArray | ndarray}}`` found in array files for this network.
    With ``read_values`` False nothing is read from the array files (validation).
    Problems are reported to ``issues`` (ambiguous rows, uncovered parameters, ``array``
    values missing from the files).
    """
    issues = issues if issues is not None else IssueList()
    file_arrays = file_arrays or {}
    infos = network.parameter_arrays()
    shapes = {lay: {arr: tuple(i.shape) for arr, i in a.items()} for lay, a in infos.items()}
    trainable = {lay: {arr: i.trainable for arr, i in a.items()} for lay, a in infos.items()}
    order = sorted(range(len(rows)), key=lambda k: (rows[k].ref.level, k))
    rows = [rows[k] for k in order]
    # Arrays that rows cover whole (levels 0-2) stay uniform: a read-only broadcast view
    # of one value, no memory per element; an element-level row makes a real array.
    row_index = {lay: {arr: np.broadcast_to(np.int32(-1), s) for arr, s in a.items()}
                 for lay, a in shapes.items()}
    level = {lay: {arr: np.broadcast_to(np.int8(-1), s) for arr, s in a.items()}
             for lay, a in shapes.items()}
    summaries: list[RowSummary] = []
    ambiguous_reported: set[tuple[str, str, int]] = set()

    def ambiguous(row: ParameterRow, other: ParameterRow, lay: str, arr: str) -> None:
        key = (lay, arr, row.ref.level)
        if key in ambiguous_reported:
            return
        ambiguous_reported.add(key)
        issues.add("PARAM_NN_AMBIGUOUS", f"rows {other.id!r} (line {other.line}) "
                   f"and {row.id!r} both set {lay}.{arr} of network "
                   f"{network.id!r} at the same specificity "
                   f"({row.ref.level_name}); which one wins is undefined",
                   file=table_file, row=row.line, column="parameterId")

    for k, row in enumerate(rows):
        names, count = _assign_row(k, rows, shapes, trainable, level, row_index, ambiguous)
        summaries.append(RowSummary(row, names, count, 0))
    _count_effective(row_index, summaries, len(rows))
    _check_coverage(network, shapes, trainable, row_index, rows, issues, table_file)
    dropout = _dropout(rows, shapes, trainable)
    result = ResolvedNetwork(network.id, shapes, rows, row_index, summaries, dropout,
                             mismatched=frozenset(mismatched))
    _values(result, file_arrays, read_values, issues, table_file)
    if read_values:   # the loader's arrays are ordinary (writable) arrays
        for nested in (result.row_index, result.from_backend):
            for arrays in nested.values():
                for name, value in arrays.items():
                    if not value.flags.writeable:
                        arrays[name] = np.array(value)
    return result


def _assign_row(k: int, rows: list[ParameterRow], shapes: dict, trainable: dict,
                level: dict, row_index: dict, ambiguous: Any) -> tuple[list[str], int]:
    """Let row ``k`` (rows sorted by specificity) set the elements it covers: their
    ``level`` becomes its level and their ``row_index`` ``k``; a row of the same level
    that set them before is reported through ``ambiguous(row, other, layer, array)``.
    Returns the names of the blocks it covers and how many elements they hold."""
    row = rows[k]
    lvl = row.ref.level
    count = 0
    names = []
    for lay, arr, idx in _targets(row.ref, shapes, trainable):
        names.append(f"{lay}.{arr}" + ("" if idx is ... else
                                       "[" + ", ".join(map(str, idx)) + "]"))
        if idx is ... and _uniform(level[lay][arr]) is not None:
            previous = _uniform(level[lay][arr])
            count += int(np.size(level[lay][arr]))
            if previous == lvl:
                ambiguous(row, rows[_uniform(row_index[lay][arr])], lay, arr)
            shape = shapes[lay][arr]
            level[lay][arr] = np.broadcast_to(np.int8(lvl), shape)
            row_index[lay][arr] = np.broadcast_to(np.int32(k), shape)
            continue
        if not level[lay][arr].flags.writeable:
            level[lay][arr] = np.array(level[lay][arr])
            row_index[lay][arr] = np.array(row_index[lay][arr])
        block = level[lay][arr][idx]
        count += int(np.size(block))
        clash = block == lvl
        if np.any(clash):
            prev = row_index[lay][arr][idx][clash]
            ambiguous(row, rows[int(prev.flat[0])], lay, arr)
        level[lay][arr][idx] = lvl
        row_index[lay][arr][idx] = k
    return names, count


def _count_effective(row_index: dict, summaries: list[RowSummary], n_rows: int) -> None:
    """Add to each row's summary how many elements it sets in the end."""
    for arrays in row_index.values():
        for idx in arrays.values():
            k = _uniform(idx)
            if k is not None:
                if k >= 0:
                    summaries[k].effective += int(idx.size)
                continue
            counts = np.bincount(idx[idx >= 0].ravel(), minlength=n_rows)
            for k in range(n_rows):
                summaries[k].effective += int(counts[k])


def _uniform(array: np.ndarray) -> int | None:
    """The value of a uniform (read-only broadcast) index array, else None."""
    if array.flags.writeable or array.size == 0:
        return None
    return int(array.flat[0])


def _check_coverage(network, shapes, trainable, row_index, rows, issues, table_file) -> None:
    missing = []
    for lay, arrays in row_index.items():
        for arr, idx in arrays.items():
            if trainable[lay][arr]:
                k = _uniform(idx)
                n = int((idx < 0).sum()) if k is None else (idx.size if k < 0 else 0)
                if n:
                    missing.append(f"{lay}.{arr} ({n} of {idx.size})")
    if missing:
        issues.add("PARAM_NN_UNCOVERED", f"parameters of network {network.id!r} are not "
                   f"covered by any parameter-table row: {', '.join(missing[:8])}"
                   f"{' ...' if len(missing) > 8 else ''}; map {network.id}.parameters to a "
                   "parameter id and add a row for it", file=table_file)


def _dropout(rows, shapes, trainable) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    best: dict[tuple[str, str], tuple[int, float | None]] = {}
    for row in rows:
        if row.ref.level > 2:
            continue
        for lay, arr, _ in _targets(row.ref, shapes, trainable):
            prev = best.get((lay, arr))
            if prev is None or row.ref.level >= prev[0]:
                best[(lay, arr)] = (row.ref.level, row.dropout)
    for (lay, arr), (_, p) in best.items():
        if p:
            out.setdefault(lay, {})[arr] = float(p)
    return out


def _values(result: ResolvedNetwork, file_arrays, read_values: bool, issues: IssueList,
            table_file: str | None) -> None:
    rows = result.rows
    kind = np.array([2 if r.nominal == ARRAY else (1 if isinstance(r.nominal, float) else 0)
                     for r in rows] + [0], np.int8)   # 0 empty/uncovered, 1 number, 2 array
    numbers = np.array([r.nominal if isinstance(r.nominal, float) else np.nan
                        for r in rows] + [np.nan], np.float64)
    values: Nested = {}
    files: dict[str, list] = {}
    """array file -> [elements whose value it gives, elements a number hides, rows]"""
    for lay, arrays in result.row_index.items():
        values[lay] = {}
        for arr, idx in arrays.items():
            source = file_arrays.get(lay, {}).get(arr)
            uniform = _uniform(idx)
            if source is not None:
                name = getattr(source, "path", None)
                stats = files.setdefault(Path(name).name if name else "", [0, 0, set()])
                if uniform is not None:
                    number_row = int(kind[uniform]) == 1
                    stats[0] += 0 if number_row else int(idx.size)
                    stats[1] += int(idx.size) if number_row else 0
                    if number_row:
                        stats[2].add(int(uniform))
                else:
                    k = kind[idx]
                    stats[0] += int(np.sum(k != 1))
                    stats[1] += int(np.sum(k == 1))
                    stats[2].update(np.unique(idx[k == 1]).tolist())
            if uniform is not None:   # one row (or none) for the whole array
                out = _uniform_values(result, lay, arr, idx, uniform, int(kind[uniform]),
                                      float(numbers[uniform]), source, read_values, issues,
                                      table_file)
                if out is not None:
                    values[lay][arr] = out
                continue
            k = kind[idx]
            needs_file = k == 2
            if source is None and np.any(needs_file):
                first = rows[int(idx[needs_file].flat[0])]
                _missing(issues, first, lay, arr, result, table_file)
            backend = (k == 0) & (source is None) | (k == 2) & (source is None)
            if np.any(backend):
                result.from_backend.setdefault(lay, {})[arr] = backend
            if not read_values:
                continue
            out = numbers[idx].astype(np.float64)
            use_file = (k != 1) & (source is not None)
            if np.any(use_file):
                data = np.asarray(source, dtype=np.float64)
                out = np.where(use_file, data, out) if not np.all(use_file) else data.copy()
            values[lay][arr] = out
    for name, (used, hidden, row_ids) in files.items():
        if used or not hidden:
            continue  # the file is used; numbers on some of its arrays are overrides
        shown = [rows[r] for r in sorted(row_ids, key=lambda r: rows[r].line)]
        numbers = ", ".join(f"{r.id!r} (nominalValue {r.nominal:g})" for r in shown)
        issues.add("PARAM_ARRAY_FILE_IGNORED", f"array file {name or '(in memory)'} holds "
                   f"{hidden} parameter(s) of network {result.net_id!r}, but the "
                   f"parameter table gives all of them numbers (row(s) {numbers}), which "
                   "win: none of the file's values is used. Write nominalValue 'array' to "
                   "use them", file=table_file, row=shown[0].line, column="nominalValue")
    if read_values:
        result.values = values


def _missing(issues: IssueList, first: ParameterRow, lay: str, arr: str,
             result: ResolvedNetwork, table_file: str | None) -> None:
    if (lay, arr) in result.mismatched:
        return   # the file's entry has the wrong shape, already reported
    net_id = result.net_id
    issues.add("PARAM_ARRAY_VALUES_MISSING", f"row {first.id!r} takes {lay}.{arr} of network "
               f"{net_id!r} from the array files (nominalValue array), but no array file "
               f"holds parameters/{net_id}/{lay}/{arr}", file=table_file, row=first.line,
               column="nominalValue")


def _uniform_values(result: ResolvedNetwork, lay: str, arr: str, idx: np.ndarray, row: int,
                    kind: int, number: float, source: Any, read_values: bool,
                    issues: IssueList, table_file: str | None) -> np.ndarray | None:
    """:func:`_values` for an array that one row (or none, ``row`` -1) covers whole."""
    if source is None and kind == 2:
        _missing(issues, result.rows[row], lay, arr, result, table_file)
    if source is None and kind in (0, 2):
        result.from_backend.setdefault(lay, {})[arr] = np.broadcast_to(True, idx.shape)
    if not read_values:
        return None
    if kind != 1 and source is not None:
        return np.array(source, dtype=np.float64)
    return np.full(idx.shape, number, np.float64)
