"""A PEtab v2 problem read as plain tables, to be rewritten into stage problems, and
the writer of a stage problem's folder.

Every table kind of the problem (its files concatenated) becomes a :class:`Rows`; a stage
problem is the source's YAML with new measurement, experiment, condition, observable and
parameter tables, plus copies of every other file it lists (model, mapping, networks,
array and hybridization files), so each stage folder is complete on its own.
"""

from __future__ import annotations

import copy
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from petab_sciml.errors import PetabSciMLError

KINDS = ("measurement", "observable", "experiment", "condition", "parameter")
"""The tables a training strategy rewrites (written as ``<kind>s.tsv``)."""

MINIMAL_COLUMNS = {
    "measurement": ["observableId", "experimentId", "time", "measurement"],
    "observable": ["observableId", "observableFormula", "noiseFormula", "noiseDistribution"],
    "experiment": ["experimentId", "time", "conditionId"],
    "condition": ["conditionId", "targetId", "targetValue"],
    "parameter": ["parameterId", "lowerBound", "upperBound", "nominalValue", "estimate"],
}


class StrategyError(PetabSciMLError):
    """A problem that a training strategy cannot transform as asked."""


@dataclass
class Rows:
    """A table as column names and rows of cells (missing cells read as "")."""

    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)

    def add(self, **cells: str) -> None:
        for name in cells:
            if name not in self.columns:
                self.columns.append(name)
        self.rows.append(dict(cells))

    def copy(self) -> Rows:
        return Rows(list(self.columns), [dict(r) for r in self.rows])

    def write(self, path: Path) -> None:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            out = csv.writer(fh, delimiter="\t", lineterminator="\n")
            out.writerow(self.columns)
            out.writerows([row.get(c, "") for c in self.columns] for row in self.rows)


@dataclass
class SourceProblem:
    """A valid PEtab v2 problem's YAML, tables and model states."""

    path: Path
    raw: dict[str, Any]
    tables: dict[str, Rows]
    state_ids: tuple[str, ...]
    state_kinds: dict[str, str]
    """``state -> "species" | "compartment" | "parameter"`` (SBML)."""
    config: Any

    @property
    def measurement_times(self) -> list[float]:
        return [parse_time(r["time"]) for r in self.tables["measurement"].rows]

    def ids(self) -> set[str]:
        """Every id the tables and the model define (new ids must avoid them)."""
        t = self.tables
        return ({r["parameterId"] for r in t["parameter"].rows}
                | {r["observableId"] for r in t["observable"].rows}
                | {r["conditionId"] for r in t["condition"].rows}
                | {r["experimentId"] for r in t["experiment"].rows}
                | set(self.state_ids) | self.model_ids)

    model_ids: set[str] = field(default_factory=set)


def parse_time(text: str) -> float:
    t = text.strip().lower()
    return float(t) if t else 0.0


def read_source(path: str | Path) -> SourceProblem:
    """Validate the problem at ``path`` (its YAML) and read it; raises
    :class:`StrategyError` naming the first errors if it is not valid."""
    from petab_sciml.problem.config import read_config
    from petab_sciml.problem.issues import IssueList
    from petab_sciml.problem.tables import read_table
    from petab_sciml.problem.validate import validate_problem

    path = Path(path)
    report = validate_problem(path)
    if not report.ok:
        first = "; ".join(str(i) for i in report.issues.errors[:3])
        raise StrategyError(f"the problem is not valid ({len(report.issues.errors)} "
                            f"error(s)): {first}", file=path)
    cfg = read_config(path, IssueList())
    if cfg.legacy:
        raise StrategyError("the problem uses an older PEtab SciML draft: run "
                            "`petab-sciml upgrade` first", file=path)
    tables = {}
    for kind in KINDS:
        rows = Rows(list(MINIMAL_COLUMNS[kind]) if not cfg.files[kind] else [])
        for name in cfg.files[kind]:
            table = read_table(cfg.resolve(name), kind, name)
            for c in table.columns:
                if c and c not in rows.columns:
                    rows.columns.append(c)
            rows.rows += [dict(r.cells) for r in table.rows]
        for c in MINIMAL_COLUMNS[kind]:
            if c not in rows.columns:
                rows.columns.append(c)
        rows.rows = [{c: r.get(c, "") for c in rows.columns} for r in rows.rows]
        tables[kind] = rows
    states, kinds, model_ids = _model_states(cfg)
    return SourceProblem(path, copy.deepcopy(cfg.raw), tables, states, kinds, cfg,
                         model_ids)


def _model_states(cfg: Any) -> tuple[tuple[str, ...], dict[str, str], set[str]]:
    from petab_sciml.sbml import load_sbml

    if len(cfg.model_files) != 1:
        raise StrategyError(f"expected one model, the problem lists {len(cfg.model_files)}",
                            file=cfg.path, entry="model_files")
    (entry,) = cfg.model_files.values()
    if str(entry.get("language", "sbml")).lower() != "sbml":
        raise StrategyError(f"training strategies need an SBML model, got language "
                            f"{entry.get('language')!r}", file=cfg.path, entry="model_files")
    model = load_sbml(cfg.resolve(entry["location"]))
    ids = {*model.parameters, *model.compartments, *model.species, *model.rules,
           *model.derived, *model.fluxes}
    return tuple(model.state_ids), dict(model.state_kinds), ids


TABLE_NAMES = {kind: f"{kind}s.tsv" for kind in KINDS}


def write_stage(source: SourceProblem, tables: dict[str, Rows], folder: Path) -> Path:
    """Write ``source`` with ``tables`` (every kind of :data:`KINDS`) into ``folder``
    (which must not exist or be empty); returns the new problem YAML."""
    from petab_sciml.problem.folder import FilePlacer

    folder.mkdir(parents=True, exist_ok=True)
    raw = copy.deepcopy(source.raw)
    cfg = source.config
    placer = FilePlacer(cfg.resolve, folder, reserved=TABLE_NAMES.values())
    for entry in (raw.get("model_files") or {}).values():
        entry["location"] = placer.place(entry["location"])
    if raw.get("mapping_files"):
        raw["mapping_files"] = [placer.place(n) for n in raw["mapping_files"]]
    for kind, name in TABLE_NAMES.items():
        table = tables[kind]
        key = f"{kind}_files"
        if not table.rows and kind in ("experiment", "condition"):
            raw.pop(key, None)
            continue
        table.write(folder / name)
        raw[key] = [name]
    if cfg.extension_key is not None:
        ext = raw["extensions"][cfg.extension_key]
        for key in ("hybridization_files", "array_files"):
            if ext.get(key):
                ext[key] = [placer.place(n) for n in ext[key]]
        nets = "neural_networks" if "neural_networks" in ext else "neural_nets"
        for entry in (ext.get(nets) or {}).values():
            if isinstance(entry, dict) and entry.get("location"):
                entry["location"] = placer.place(entry["location"])
    out = folder / source.path.name
    out.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return out


def number(value: float) -> str:
    """A float as a table cell (shortest round-trip form; ``inf`` / ``-inf``)."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))
