"""Reading PEtab TSV tables into plain rows that remember their line numbers.

Cells are stripped strings ("" when empty or missing).  Nothing here needs pandas; the
readers are fast enough for tables with hundreds of thousands of rows.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
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
    """A table file cannot be read at all."""


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

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def missing_columns(self) -> list[str]:
        return [c for c in REQUIRED_COLUMNS.get(self.kind, ()) if c not in self.columns]


def read_table(path: Path, kind: str, file: str) -> Table:
    """Read a TSV table; raises :class:`TableError` with a one-line reason."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, delimiter="\t")
            header: list[str] | None = None
            rows: list[Row] = []
            for record in reader:
                if header is None:
                    if not record or all(not c.strip() for c in record):
                        continue
                    header = [c.strip() for c in record]
                    continue
                if not record or all(not c.strip() for c in record):
                    continue
                cells = {name: (record[i].strip() if i < len(record) else "")
                         for i, name in enumerate(header) if name}
                rows.append(Row(reader.line_num, cells))
    except FileNotFoundError:
        raise TableError("file not found") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TableError(f"cannot read table: {exc}") from None
    if header is None:
        raise TableError("the file is empty; expected a header line")
    return Table(kind, path, file, header, rows)


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


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
