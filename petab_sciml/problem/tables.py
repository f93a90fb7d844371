"""Reading PEtab TSV tables into plain rows that remember their line numbers.

Cells are stripped strings ("" when empty or missing).  Nothing here needs pandas; the
readers are fast enough for tables with hundreds of thousands of rows.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "parameter": ("parameterId", "nominalValue", "estimate"),
    "mapping": ("petabEntityId", "modelEntityId"),
    "hybridization": ("targetId", "targetValue"),
    "condition": ("conditionId", "targetId", "targetValue"),
    "experiment": ("experimentId", "time", "conditionId"),
    "observable": ("observableId", "observableFormula"),
    "measurement": ("observableId", "time", "measurement"),
}


class TableError(Exception):
    """A table file cannot be read at all; ``code`` is the issue code to report."""

    def __init__(self, message: str, code: str = "TABLE_UNREADABLE"):
        super().__init__(message)
        self.code = code


@dataclass
class Row:
    """One data row: its 1-based line in the file and its cells by column name."""

    line: int
    cells: dict[str, str]

    def get(self, column: str) -> str:
        return self.cells.get(column, "")

    def __getitem__(self, column: str) -> str:
        return self.cells.get(column, "")


@dataclass
class Table:
    """A parsed TSV table.  ``file`` is the name used in issue locations."""

    kind: str
    path: Path
    file: str
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    problems: list[tuple[str, str, int, str | None]] = field(default_factory=list)
    """Defects found while reading that leave the table usable: ``(code, message, line,
    column)`` (a duplicate column name, a row longer than the header)."""

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def missing_columns(self) -> list[str]:
        return [c for c in REQUIRED_COLUMNS.get(self.kind, ()) if c not in self.columns]


def read_table(path: Path, kind: str, file: str) -> Table:
    """Read a TSV table (a regular file within ``max_file_bytes``); raises
    :class:`TableError` with a one-line reason.  A duplicate column name (the first
    column of that name is used) and rows longer than the header are recorded in
    ``Table.problems``."""
    import io

    from petab_sciml.errors import InputFileError, LimitError
    from petab_sciml.safe_read import read_text

    try:
        text = read_text(path, what="a tab-separated table")
    except LimitError as exc:
        raise TableError(exc.message, exc.code) from None
    except InputFileError as exc:
        raise TableError(exc.message, exc.code or "TABLE_UNREADABLE") from None
    header: list[str] | None = None
    rows: list[Row] = []
    problems: list[tuple[str, str, int, str | None]] = []
    positions: list[tuple[int, str]] = []
    # a cell may be as long as the file (a formula's own budget is checked later, with
    # its location); csv's default limit would make a long cell a table error
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
        for record in reader:
            if header is None:
                if not record or all(not c.strip() for c in record):
                    continue
                header = [c.strip() for c in record]
                positions = _columns(header, reader.line_num, problems)
                continue
            if not record or all(not c.strip() for c in record):
                continue
            if len(record) > len(header) and any(c.strip() for c in record[len(header):]):
                problems.append(("TABLE_ROW_TOO_LONG", f"the row has {len(record)} cells but "
                                 f"the header has {len(header)} columns", reader.line_num,
                                 None))
            cells = {name: (record[i].strip() if i < len(record) else "")
                     for i, name in positions}
            rows.append(Row(reader.line_num, cells))
    except csv.Error as exc:
        raise TableError(f"cannot read table: {exc}") from None
    if header is None:
        raise TableError("the file is empty; expected a header line")
    return Table(kind, path, file, header, rows, problems)


def _columns(header: list[str], line: int, problems: list) -> list[tuple[int, str]]:
    """(index, name) of the columns to read: named ones, the first of each name."""
    seen: dict[str, int] = {}
    for i, name in enumerate(header):
        if not name:
            continue
        if name in seen:
            problems.append(("TABLE_DUPLICATE_COLUMN", f"column {name!r} appears twice "
                             f"(columns {seen[name] + 1} and {i + 1}); a table has one column "
                             "of each name", line, name))
            continue
        seen[name] = i
    return [(i, name) for name, i in seen.items()]


def parse_float(text: str) -> float | None:
    """A PEtab number (``inf``, ``-Inf`` accepted); None if ``text`` is not a number."""
    t = text.strip()
    if not t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_bool(text: str) -> bool | None:
    """PEtab v2 booleans (``true``/``false``, any case; ``1``/``0`` accepted)."""
    t = text.strip().lower()
    if t in ("true", "1", "1.0"):
        return True
    if t in ("false", "0", "0.0"):
        return False
    return None


def experiment_periods(rows: Iterable[tuple[str, float, str]]
                       ) -> dict[str, list[tuple[float, list[str]]]]:
    """``experimentId -> [(start time, condition ids)]`` sorted by start time, from the
    experiment table's rows ``(experimentId, start time, conditionId cell)``: rows of one
    experiment and start time form one period, the cell may list ids separated by ``;``."""
    periods: dict[str, list[tuple[float, list[str]]]] = {}
    for eid, time, cell in rows:
        ids = [c.strip() for c in cell.split(";") if c.strip()]
        plist = periods.setdefault(eid, [])
        for start, conds in plist:
            if start == time:
                conds.extend(ids)
                break
        else:
            plist.append((time, ids))
    return {eid: sorted(p, key=lambda item: item[0]) for eid, p in periods.items()}

