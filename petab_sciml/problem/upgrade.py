"""``petab-sciml upgrade``: rewrite a problem of an older draft in the current format.

:func:`upgrade_problem` reads ``OLD/problem.yaml`` and writes the same problem into a new
folder, changing only what the older draft (see :mod:`petab_sciml.problem.legacy`) has
differently, and returns one line per change:

* the single entry of ``problems:`` moves to the top level; ``parameter_file`` becomes
  ``parameter_files``; ``format_version: 2`` becomes ``2.0.0``; a missing extension
  ``version`` is added (the current one, :data:`~petab_sciml.problem.config.EXTENSION_VERSION`),
  and a missing ``required`` as ``true``;
* ``neural_nets`` becomes ``neural_networks`` and ``static`` ``pre_initialization``;
* measurements' ``simulationConditionId`` (and ``preequilibrationConditionId``) become an
  ``experimentId`` and a new experiment table: one experiment per distinct pair, a
  pre-equilibration period at ``-inf`` when there is one, the simulation condition from
  time 0 (where the older drafts start every simulation);
* a condition table with one column per target becomes ``conditionId, targetId,
  targetValue`` rows (empty and ``NaN`` cells, which change nothing, are left out);
* assignments that the current format keeps in the hybridization table (inputs of
  simulation networks, and targets set from a simulation network's outputs) move there
  from the condition table when every condition assigns the same value; a hybridization
  table is created when the problem has none.

Every other file (model, networks, array files, unchanged tables) is copied as it is.
Nothing is written when the problem is already in the current format.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from petab_sciml.errors import PetabSciMLError
from petab_sciml.problem.config import EXTENSION_VERSION, has_extension_version
from petab_sciml.problem.entities import EntityError, parse_entity
from petab_sciml.problem.legacy import (
    CONDITION_NAME_COLUMNS,
    OLD_MEASUREMENT_COLUMNS,
    is_wide_condition_table,
)
from petab_sciml.problem.model import ModelError, read_sbml_ids
from petab_sciml.problem.tables import TableError, read_table

EXTENSION_KEYS = ("sciml", "petab_sciml")
FILE_KEYS = ("parameter_files", "measurement_files", "observable_files", "experiment_files",
             "condition_files", "mapping_files")
_NO_CHANGE = {"", "nan"}
"""Cells of a per-target condition table that change nothing."""


class UpgradeError(PetabSciMLError):
    """The problem cannot be rewritten automatically; the message says why."""


@dataclass
class UpgradeResult:
    """What :func:`upgrade_problem` did."""

    source: Path
    problem: Path | None
    """The new problem YAML, or None when nothing needed upgrading (nothing written)."""
    changes: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


@dataclass
class _Tsv:
    """A table as written: header and rows of cells."""

    columns: list[str]
    rows: list[list[str]]

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows(self.rows)


def _ordered(top: dict[str, Any]) -> dict[str, Any]:
    """The YAML keys in the order of the specification's examples."""
    order = ["format_version", "model_files", *FILE_KEYS]
    out = {key: top[key] for key in order if key in top}
    out.update((k, v) for k, v in top.items() if k not in out)
    return out


def upgrade_problem(source: str | Path, destination: str | Path, *,
                    force: bool = False) -> UpgradeResult:
    """Rewrite the problem at ``source`` (its YAML file) in the current format into the
    folder ``destination``; the YAML keeps its file name.

    Raises :class:`UpgradeError` when the problem cannot be rewritten automatically (two
    problems in one file, the first draft's network entries, a condition-specific value
    for what the current format assigns once ...), and when ``destination`` already holds
    files of the same names (unless ``force``) or is the source folder.
    """
    src = Path(source)
    from petab_sciml.safe_read import load_yaml, read_text

    try:
        raw = load_yaml(read_text(src, what="a problem YAML file", limit="max_yaml_bytes"),
                        file=src)
    except (PetabSciMLError, yaml.YAMLError) as exc:
        raise UpgradeError(f"cannot read the problem YAML: {getattr(exc, 'message', exc)}",
                           file=src, entry=getattr(exc, "entry", None)) from None
    if not isinstance(raw, dict):
        raise UpgradeError("expected a mapping at the top level", file=src)
    job = _Upgrade(src, raw)
    job.run()
    result = UpgradeResult(src, None, job.changes)
    if not job.changes:
        return result
    dst = Path(destination)
    if dst.resolve() == src.parent.resolve():
        raise UpgradeError("the destination is the problem's own folder; choose a new folder "
                           "(the original is kept as it is)", file=dst)
    outputs = [dst / src.name, *(dst / name for name in job.tables),
               *(dst / name for name in job.copies)]
    clash = [p for p in outputs if p.exists()]
    if clash and not force:
        raise UpgradeError(f"{clash[0]} already exists; choose an empty folder or pass "
                           "--force to overwrite", file=dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name, table in job.tables.items():
        table.write(dst / name)
        result.written.append(dst / name)
    for name, origin in job.copies.items():
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if origin.is_dir():
            shutil.copytree(origin, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(origin, target)
        result.written.append(target)
    (dst / src.name).write_text(yaml.safe_dump(job.yaml, sort_keys=False), encoding="utf-8")
    result.problem = dst / src.name
    result.written.insert(0, result.problem)
    return result


class _Upgrade:
    """The rewrite, in memory: ``yaml`` (new top level), ``tables`` (new table files by
    relative name), ``copies`` (relative name -> file copied unchanged), ``changes``."""

    def __init__(self, src: Path, raw: dict[str, Any]):
        self.src = src
        self.base = src.parent
        self.raw = raw
        self.changes: list[str] = []
        self.yaml: dict[str, Any] = {}
        self.tables: dict[str, _Tsv] = {}
        self.copies: dict[str, Path] = {}

    def fail(self, message: str, file: Any = None) -> None:
        raise UpgradeError(message, file=file or self.src)

    # ------------------------------------------------------------------ main
    def run(self) -> None:
        top = self._top_level()
        ext = self._extension(top)
        self.yaml = top
        conditions = self._read_tables("condition_files")
        measurements = self._read_tables("measurement_files")
        legacy_measurements = [n for n, t in measurements.items()
                               if any(c in t.columns for c in OLD_MEASUREMENT_COLUMNS)]
        wide = [n for n, t in conditions.items() if is_wide_condition_table(t.columns)]
        if not (self.changes or legacy_measurements or wide):
            return
        long_rows = self._conditions(conditions, wide)
        hybridization = self._hybridization(ext, long_rows)
        self._write_conditions(conditions, long_rows)
        self._experiments(measurements, legacy_measurements, long_rows)
        self._parameters()
        if hybridization is not None:
            name = self._new_name("hybridization.tsv")
            self.tables[name] = hybridization
            ext["hybridization_files"] = [*ext.get("hybridization_files", []), name]
        self._copy_the_rest()

    # ------------------------------------------------------------------ YAML
    def _top_level(self) -> dict[str, Any]:
        raw = dict(self.raw)
        problems = raw.pop("problems", None)
        if problems is not None:
            if not (isinstance(problems, list) and len(problems) == 1
                    and isinstance(problems[0], dict)):
                count = len(problems) if isinstance(problems, list) else "no list of"
                self.fail(f"`problems:` holds {count} problems; the current format has one "
                          "problem per YAML file, so only a list with one entry can be "
                          "upgraded (split the file first)")
            for key, value in problems[0].items():
                if key in raw:
                    self.fail(f"{key!r} is given both at the top level and in `problems:`")
                raw[key] = value
            self.changes.append("moved the single entry of `problems:` to the top level")
        if "parameter_file" in raw:
            if "parameter_files" in raw:
                self.fail("both `parameter_file` and `parameter_files` are given")
            old = raw.pop("parameter_file")
            raw["parameter_files"] = old if isinstance(old, list) else [old]
            self.changes.append("`parameter_file` became `parameter_files`")
        version = raw.get("format_version")
        if str(version).strip() in ("2", "2.0"):
            raw["format_version"] = "2.0.0"
            self.changes.append(f"format_version {version!r} became '2.0.0'")
        for key in FILE_KEYS:
            if isinstance(raw.get(key), str):
                raw[key] = [raw[key]]
        return _ordered(raw)

    def _extension(self, top: dict[str, Any]) -> dict[str, Any]:
        extensions = top.get("extensions")
        key = next((k for k in EXTENSION_KEYS if isinstance(extensions, dict)
                    and isinstance(extensions.get(k), dict)), None)
        if key is None:
            self.fail("no SciML extension (extensions.sciml) to upgrade")
        ext = dict(extensions[key])
        top["extensions"] = {**extensions, key: ext}
        if not has_extension_version(ext):
            ext["version"] = EXTENSION_VERSION
            self.changes.append(f"extensions.{key}.version {EXTENSION_VERSION!r} added (the "
                                "current format requires it)")
        if not isinstance(ext.get("required"), bool):
            # PEtab v2 asks every extension whether it is needed to interpret the problem;
            # a SciML problem cannot be read without its networks.
            ext["required"] = True
            self.changes.append(f"extensions.{key}.required: true added (PEtab v2 requires "
                                "it of every extension)")
        if "neural_networks" not in ext and "neural_nets" not in ext:
            if any(isinstance(v, dict) and "file" in v for v in ext.values()):
                self.fail(f"extensions.{key} lists networks with `file:` and `hybridization:` "
                          "(the first draft of PEtab SciML); this layout cannot be upgraded "
                          "automatically: write neural_networks, a mapping table and a "
                          "hybridization table by hand")
            return ext
        if "neural_nets" in ext and "neural_networks" not in ext:
            ext = {("neural_networks" if k == "neural_nets" else k): v for k, v in ext.items()}
            top["extensions"][key] = ext
            self.changes.append(f"extensions.{key}.neural_nets became neural_networks")
        nets = ext.get("neural_networks")
        if isinstance(nets, dict):
            nets = dict(nets)
            ext["neural_networks"] = nets
            for net_id, entry in nets.items():
                if isinstance(entry, dict) and "static" in entry \
                        and "pre_initialization" not in entry:
                    nets[net_id] = {("pre_initialization" if k == "static" else k): v
                                    for k, v in entry.items()}
                    self.changes.append(f"network {net_id}: `static` became "
                                        "`pre_initialization`")
        return ext

    # ------------------------------------------------------------------ tables
    def _read_tables(self, key: str) -> dict[str, Any]:
        out = {}
        for name in self.yaml.get(key) or []:
            path = self.base / name
            if not path.is_file():
                continue  # copied as missing; the validator names it
            try:
                out[name] = read_table(path, key.removesuffix("_files"), name)
            except TableError as exc:
                self.fail(f"cannot read {name}: {exc}", file=path)
        return out

    def _conditions(self, conditions: dict[str, Any], wide: list[str]
                    ) -> dict[str, list[list[str]]]:
        """Condition rows ``[conditionId, targetId, targetValue]`` per table."""
        rows: dict[str, list[list[str]]] = {}
        for name, table in conditions.items():
            if name not in wide:
                rows[name] = [[r["conditionId"], r["targetId"], r["targetValue"]]
                              for r in table.rows]
                continue
            targets = [c for c in table.columns if c not in CONDITION_NAME_COLUMNS]
            rows[name] = [[r["conditionId"], t, r[t]] for r in table.rows for t in targets
                          if r[t].strip().lower() not in _NO_CHANGE]
            if targets:
                self.changes.append(f"{name}: one column per target ({', '.join(targets)}) "
                                    f"became conditionId/targetId/targetValue rows "
                                    f"({len(rows[name])} rows)")
            else:
                self.changes.append(f"{name}: no target columns (its conditions change "
                                    "nothing); written with the columns conditionId/"
                                    "targetId/targetValue and no rows")
            if "conditionName" in table.columns:
                self.changes.append(f"{name}: dropped the conditionName column (the current "
                                    "format has none)")
        return rows

    def _network_roles(self, ext: dict[str, Any]) -> tuple[set[str], set[str]]:
        """PEtab ids of inputs and outputs of simulation networks (``pre_initialization``
        false), from the mapping tables."""
        nets = ext.get("neural_networks") or {}
        simulation = {n for n, e in nets.items()
                      if isinstance(e, dict) and e.get("pre_initialization") is False}
        inputs: set[str] = set()
        outputs: set[str] = set()
        for table in self._read_tables("mapping_files").values():
            for row in table.rows:
                try:
                    ref = parse_entity(row["modelEntityId"], set(nets))
                except EntityError:
                    continue
                if ref is not None and ref.net in simulation:
                    (inputs if ref.kind == "inputs" else outputs if ref.kind == "outputs"
                     else set()).add(row["petabEntityId"])
        return inputs, outputs

    def _hybridization(self, ext: dict[str, Any], rows: dict[str, list[list[str]]]
                       ) -> _Tsv | None:
        """Move simulation-network assignments from conditions to a new hybridization
        table; None if nothing moves and the problem has a hybridization table."""
        from petab_sciml.problem.expressions import free_symbols

        inputs, outputs = self._network_roles(ext)
        all_conditions = {r[0] for table in rows.values() for r in table}
        moved: dict[str, str] = {}
        for name, table in rows.items():
            by_target: dict[str, dict[str, str]] = {}
            for cid, tid, value in table:
                if tid in inputs or free_symbols(value) & outputs:
                    by_target.setdefault(tid, {})[cid] = value
            for tid, values in by_target.items():
                distinct = set(values.values())
                if len(distinct) != 1 or set(values) != all_conditions:
                    self.fail(f"{name}: {tid!r} is assigned per condition "
                              f"({', '.join(f'{c}={v}' for c, v in values.items())}), but the "
                              "current format assigns inputs of simulation networks (and "
                              "targets set from their outputs) once, in the hybridization "
                              "table; make it the same in every condition first")
                moved[tid] = distinct.pop()
            if any(r[1] in by_target for r in table):
                rows[name] = [r for r in table if r[1] not in by_target]
        for tid, value in moved.items():
            self.changes.append(f"{tid} = {value}: moved from the condition table to the "
                                "hybridization table (assigned once, for the whole "
                                "simulation)")
        if "hybridization_files" in ext:
            if moved:
                self.changes.append("the hybridization rows moved from conditions go to a "
                                    "hybridization table of their own")
                return _Tsv(["targetId", "targetValue"], [[k, v] for k, v in moved.items()])
            return None
        self.changes.append("added a hybridization table (the current format requires one)")
        return _Tsv(["targetId", "targetValue"], [[k, v] for k, v in moved.items()])

    def _write_conditions(self, conditions: dict[str, Any],
                          rows: dict[str, list[list[str]]]) -> None:
        for name, table in conditions.items():
            old = [[r["conditionId"], r["targetId"], r["targetValue"]] for r in table.rows] \
                if not is_wide_condition_table(table.columns) else None
            if old == rows[name]:
                continue  # unchanged: copied as it is
            extra = [] if old is None else [c for c in table.columns
                                            if c not in ("conditionId", "targetId",
                                                         "targetValue")]
            if extra:
                self.fail(f"{name}: rows moved to the hybridization table, but the table has "
                          f"further columns ({', '.join(extra)}) this rewrite would drop")
            self.tables[name] = _Tsv(["conditionId", "targetId", "targetValue"], rows[name])

    def _experiments(self, measurements: dict[str, Any], legacy: list[str],
                     conditions: dict[str, list[list[str]]]) -> None:
        if not legacy:
            return
        if self.yaml.get("experiment_files"):
            self.fail(f"{legacy[0]} names conditions (simulationConditionId) although the "
                      "problem has an experiment table; which experiment a measurement "
                      "belongs to is ambiguous")
        # condition ids that array files key inputs by stay, rows or not (as in the
        # official suite, whose experiments name such conditions without any rows)
        defined = {r[0] for table in conditions.values() for r in table} | \
            self._array_condition_ids()
        taken = self._ids_in_use(conditions)
        experiments: dict[tuple[str, str], str] = {}
        for name in legacy:
            table = measurements[name]
            if "experimentId" in table.columns:
                self.fail(f"{name} has both experimentId and simulationConditionId")
            for row in table.rows:
                key = (row["preequilibrationConditionId"], row["simulationConditionId"])
                if key not in experiments:
                    experiments[key] = self._experiment_id(*key, taken)
            columns = [c for c in table.columns if c != "preequilibrationConditionId"]
            columns = ["experimentId" if c == "simulationConditionId" else c for c in columns]
            if "experimentId" not in columns:
                columns.insert(1, "experimentId")
            rows = []
            for row in table.rows:
                eid = experiments[(row["preequilibrationConditionId"],
                                   row["simulationConditionId"])]
                rows.append([eid if c == "experimentId" else row[c] for c in columns])
            self.tables[name] = _Tsv(columns, rows)
            self.changes.append(f"{name}: simulationConditionId"
                                + (" and preequilibrationConditionId"
                                   if "preequilibrationConditionId" in table.columns else "")
                                + " became experimentId")
        exp_rows: list[list[str]] = []
        empty: set[str] = set()
        for (pre, sim), eid in experiments.items():
            for time, cid in (("-inf", pre), ("0", sim)):
                if time == "-inf" and not pre:
                    continue
                if cid and cid not in defined:
                    empty.add(cid)  # changes nothing: the current format has no such row
                    cid = ""
                exp_rows.append([eid, time, cid])
        name = self._new_name("experiments.tsv")
        self.tables[name] = _Tsv(["experimentId", "time", "conditionId"], exp_rows)
        self.yaml["experiment_files"] = [name]
        self.yaml = _ordered(self.yaml)
        described = [f"{eid} = " + (f"{pre} (pre-equilibration), then " if pre else "")
                     + (sim or "no condition") for (pre, sim), eid in experiments.items()]
        self.changes.append(f"added the experiment table {name}: {', '.join(described)}")
        for cid in sorted(empty):
            self.changes.append(f"condition {cid!r} changes nothing, so its experiments use "
                                "no condition (a condition without rows does not exist in "
                                "the current format)")

    def _parameters(self) -> None:
        """``estimate`` 1/0 (PEtab v1) becomes true/false (PEtab v2)."""
        spelled = {"1": "true", "0": "false", "1.0": "true", "0.0": "false"}
        for name, table in self._read_tables("parameter_files").items():
            cells = [[r[c] for c in table.columns] for r in table.rows]
            if "estimate" not in table.columns:
                continue
            k = table.columns.index("estimate")
            if not any(row[k] in spelled for row in cells):
                continue
            for row in cells:
                row[k] = spelled.get(row[k], row[k])
            self.tables[name] = _Tsv(list(table.columns), cells)
            self.changes.append(f"{name}: estimate 1/0 became true/false")

    def _ids_in_use(self, conditions: dict[str, list[list[str]]]) -> set[str]:
        taken = {r[0] for table in conditions.values() for r in table}
        for key, column in (("parameter_files", "parameterId"),
                            ("observable_files", "observableId"),
                            ("mapping_files", "petabEntityId")):
            for table in self._read_tables(key).values():
                taken.update(r[column] for r in table.rows)
        for entry in (self.yaml.get("model_files") or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("location"), str):
                try:
                    taken |= read_sbml_ids(self.base / entry["location"]).entities
                except ModelError:
                    pass
        return taken

    @staticmethod
    def _experiment_id(pre: str, sim: str, taken: set[str]) -> str:
        stem = "experiment_" + "_".join(c for c in (pre, sim) if c) if (pre or sim) \
            else "experiment"
        eid, k = stem, 2
        while eid in taken:
            eid, k = f"{stem}_{k}", k + 1
        taken.add(eid)
        return eid

    # ------------------------------------------------------------------ files
    def _referenced(self) -> list[str]:
        names: list[str] = []
        for entry in (self.yaml.get("model_files") or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("location"), str):
                names.append(entry["location"])
        for key in FILE_KEYS:
            names.extend(n for n in self.yaml.get(key) or [] if isinstance(n, str))
        for key in EXTENSION_KEYS:
            ext = (self.yaml.get("extensions") or {}).get(key)
            if not isinstance(ext, dict):
                continue
            for list_key in ("array_files", "hybridization_files"):
                value = ext.get(list_key) or []
                names.extend([value] if isinstance(value, str) else
                             [n for n in value if isinstance(n, str)])
            for entry in (ext.get("neural_networks") or {}).values():
                if isinstance(entry, dict) and isinstance(entry.get("location"), str):
                    names.append(entry["location"])
        return names

    def _array_condition_ids(self) -> set[str]:
        """Condition ids that the array files' input keys name (``inputs/<id>/cond1``)."""
        from petab_sciml.arrays import ArrayFileError, condition_ids, read_array_file

        ids: set[str] = set()
        for key in EXTENSION_KEYS:
            ext = (self.yaml.get("extensions") or {}).get(key)
            value = ext.get("array_files") if isinstance(ext, dict) else None
            for name in [value] if isinstance(value, str) else (value or []):
                path = self.base / str(name)
                if not path.is_file():
                    continue
                try:
                    inputs = read_array_file(path, require_pytorch_format=False).inputs
                    for keyed in inputs.values():
                        for k in keyed:
                            ids.update(condition_ids(k) or ())
                except ArrayFileError:
                    continue   # reported by validate on the upgraded problem
        return ids

    def _copy_the_rest(self) -> None:
        for name in self._referenced():
            if name in self.tables or name in self.copies:
                continue
            path = Path(name)
            if path.is_absolute() or ".." in path.parts:
                self.fail(f"{name!r} lies outside the problem folder; copy it into the folder "
                          "and refer to it by a relative path first")
            origin = self.base / path
            if origin.exists():
                self.copies[name] = origin

    def _new_name(self, name: str) -> str:
        used = set(self._referenced()) | set(self.tables)
        stem, suffix = Path(name).stem, Path(name).suffix
        candidate, k = name, 2
        while candidate in used:
            candidate, k = f"{stem}_{k}{suffix}", k + 1
        return candidate
