"""Reading a problem into one :class:`ProblemContext`: config, tables, model ids,
networks (through the format plugins), array-file structure and mapped entities.

Reading never raises for bad input: everything wrong goes to ``ctx.issues``.  Nothing
here imports torch or jax; networks whose format runs code are loaded only with trust.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from petab_sciml.errors import ArrayFileError, MissingExtraError, PetabSciMLError
from petab_sciml.problem.config import SPEC_FORMATS, ProblemConfig, read_config
from petab_sciml.problem.entities import EntityError, EntityRef, check_entity, parse_entity
from petab_sciml.problem.issues import IssueList, Severity
from petab_sciml.problem.legacy import report_legacy
from petab_sciml.problem.model import ModelError, ModelInfo, read_sbml_ids
from petab_sciml.problem.tables import ID_RE, Row, Table, TableError, read_table

CODE_FORMATS = ("torchscript", "pytorch", "equinox", "lux.jl")
"""Formats whose loading executes code from the problem (known even without a plugin)."""


@dataclass
class Mapped:
    """One mapping-table row: the PEtab id, the parsed network entity (or None for a
    plain model entity), and where it is."""

    petab_id: str
    model_id: str
    ref: EntityRef | None
    row: Row
    table: Table
    valid: bool = True


@dataclass
class ArraySources:
    """Array-file structure merged over all array files (nothing read yet)."""

    parameters: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """``{net: {layer: {array: LazyArray}}}``"""
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{input_id: {key: LazyArray}}``"""
    input_files: dict[str, str] = field(default_factory=dict)
    """``input_id`` -> array file name."""
    parameter_files: dict[str, str] = field(default_factory=dict)
    """``net`` -> array file name (first file holding it)."""
    pytorch_format: dict[str, bool] = field(default_factory=dict)
    """Array file name -> its ``metadata/pytorch_format``."""
    mismatched: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """``net`` -> ``(layer, array)`` whose entry does not fit the network (reported)."""


@dataclass
class ProblemContext:
    path: Path
    issues: IssueList
    trust_code: bool = False
    config: ProblemConfig | None = None
    tables: dict[str, list[Table]] = field(default_factory=dict)
    model: ModelInfo | None = None
    networks: dict[str, Any] = field(default_factory=dict)
    """Loaded networks (IR) by network id."""
    unchecked_networks: set[str] = field(default_factory=set)
    """Networks that could not be loaded (runs code, no plugin, invalid)."""
    arrays: ArraySources = field(default_factory=ArraySources)
    mapping: dict[str, Mapped] = field(default_factory=dict)
    huge_formulas: set[str] = field(default_factory=set)
    """Tables (file names) with a formula that does not parse or holds a constant too
    large for exact arithmetic; libpetab's second opinion skips them (sympy's exact
    arithmetic on ``9^9^9`` or ``1e999999`` has no practical end)."""

    # ------------------------------------------------------------------ helpers
    def rows(self, kind: str):
        for table in self.tables.get(kind, []):
            for row in table.rows:
                yield table, row

    def refs(self, kind: str) -> dict[str, EntityRef]:
        """PEtab id -> entity for mapped network entities of ``kind``."""
        return {pid: m.ref for pid, m in self.mapping.items()
                if m.ref is not None and m.ref.kind == kind}

    def hybridization_of(self, net_id: str) -> bool | None:
        entry = self.config.networks.get(net_id) if self.config else None
        return None if entry is None else entry.pre_initialization


def load_context(path: str | Path, *, trust_code: bool = False,
                 read_network: Callable[..., Any] | None = None) -> ProblemContext:
    """Read everything; never raises for bad input."""
    path = Path(path)
    ctx = ProblemContext(path=path, issues=IssueList(), trust_code=trust_code)
    ctx.config = read_config(path, ctx.issues)
    if ctx.config is None:
        return ctx
    _read_tables(ctx)
    report_legacy(ctx)
    _read_model(ctx)
    _read_networks(ctx)
    _read_arrays(ctx)
    _read_mapping(ctx)
    return ctx


# ---------------------------------------------------------------------- tables
def _read_tables(ctx: ProblemContext) -> None:
    cfg = ctx.config
    lists = dict(cfg.files)
    lists["hybridization"] = cfg.hybridization_files
    for kind, names in lists.items():
        for name in names:
            key = "hybridization_files" if kind == "hybridization" else f"{kind}_files"
            yaml_path = f"{cfg.extension_path}.{key}" if kind == "hybridization" else key
            target = cfg.resolve(name)
            if not check_inside(ctx, name, yaml_path):
                continue
            if not target.exists():
                ctx.issues.add("FILE_NOT_FOUND", f"{kind} table {name!r} not found",
                               file=cfg.path.name, path=yaml_path)
                continue
            try:
                table = read_table(target, kind, name)
            except TableError as exc:
                ctx.issues.add(exc.code, str(exc), file=name)
                continue
            for code, message, line, column in table.problems:
                ctx.issues.add(code, message, file=name, row=line, column=column)
            for column in table.missing_columns():
                ctx.issues.add("TABLE_COLUMNS_MISSING", f"required column {column!r} is "
                               f"missing (columns: {', '.join(table.columns)})", file=name,
                               row=1, column=column)
            ctx.tables.setdefault(kind, []).append(table)


def check_inside(ctx: ProblemContext, name: str, yaml_path: str) -> bool:
    """Whether the file ``name`` (as the problem YAML writes it, at ``yaml_path``) may be
    read.  One outside the problem's folder (``../x``, an absolute path, or a symlink
    leading out) is an error and is not read under ``--confine`` (checked before
    anything, its existence included, is looked at); otherwise an existing one gets a
    warning and is read."""
    from petab_sciml.confine import confinement_root, outside_of, real_path, refusal

    cfg = ctx.config
    target = outside_of(cfg.resolve(name), cfg.base)
    if target is None:
        return True
    root = confinement_root()
    if root is not None:
        ctx.issues.add("FILE_OUTSIDE_CONFINED", f"{name!r} " + refusal(cfg.resolve(name),
                       target, root), file=cfg.path.name, path=yaml_path)
        return False
    if cfg.resolve(name).exists():
        ctx.issues.add("FILE_OUTSIDE_PROBLEM", f"{name!r} resolves to {str(target)!r}, outside "
                       f"the problem folder {str(real_path(cfg.base))!r}; the problem reads "
                       "files elsewhere", file=cfg.path.name, path=yaml_path)
    return True


def _read_model(ctx: ProblemContext) -> None:
    cfg = ctx.config
    if not cfg.model_files:
        return
    if len(cfg.model_files) > 1:
        ctx.issues.add("MODEL_INVALID", "only one model file is supported",
                       file=cfg.path.name, path="model_files")
    model_id, entry = next(iter(cfg.model_files.items()))
    where = f"model_files.{model_id}"
    language = str(entry.get("language", "sbml")).lower()
    target = cfg.resolve(entry["location"])
    if not check_inside(ctx, entry["location"], f"{where}.location"):
        return
    if not target.exists():
        ctx.issues.add("FILE_NOT_FOUND", f"model file {entry['location']!r} not found",
                       file=cfg.path.name, path=f"{where}.location")
        return
    if language != "sbml":
        ctx.issues.add("MODEL_INVALID", f"model language {language!r} is not supported by "
                       "this validator (only sbml); model-dependent checks are skipped",
                       file=cfg.path.name, path=f"{where}.language", severity=_warning())
        return
    try:
        ctx.model = read_sbml_ids(target)
    except ModelError as exc:
        ctx.issues.add(exc.code, str(exc), file=entry["location"])
        return
    for ident, count in sorted(ctx.model.duplicates.items()):
        ctx.issues.add("MODEL_DUPLICATE_ID", f"id {ident!r} is used by {count} elements; SBML "
                       "ids must be unique", file=entry["location"])


def _warning() -> Severity:
    return Severity.WARNING


# ---------------------------------------------------------------------- networks
def _read_networks(ctx: ProblemContext) -> None:
    """Read every network the problem names into ``ctx.networks``; a network that cannot
    be read (or is not read: code without trust) goes to ``ctx.unchecked_networks`` with
    its issue."""
    from petab_sciml.plugins import format_names

    cfg = ctx.config
    installed = set(format_names())
    for net_id, entry in cfg.networks.items():
        if entry.location is None or entry.format is None:
            ctx.unchecked_networks.add(net_id)
            continue
        target = cfg.resolve(entry.location)
        plugin = None
        if _network_file_ok(ctx, entry, target):
            plugin = _network_reader(ctx, net_id, entry, installed)
        network = _load_network(ctx, net_id, entry, plugin, target) if plugin else None
        if network is None:
            ctx.unchecked_networks.add(net_id)
            continue
        if network.id != net_id:
            ctx.issues.add("NN_MODEL_ID_MISMATCH", f"the network file names its network "
                           f"{network.id!r}; the problem calls it {net_id!r} (used from here "
                           "on)", file=entry.location)
            network = dataclasses.replace(network, id=net_id)
        ctx.networks[net_id] = network


def _network_file_ok(ctx: ProblemContext, entry: Any, target: Path) -> bool:
    """The network file (or folder) exists, lies inside the problem folder (else an
    issue) and is a regular file if not a folder."""
    cfg = ctx.config
    if not check_inside(ctx, entry.location, f"{entry.yaml_path}.location"):
        return False
    if not target.exists():
        ctx.issues.add("FILE_NOT_FOUND", f"network file {entry.location!r} not found",
                       file=cfg.path.name, path=f"{entry.yaml_path}.location")
        return False
    if not target.is_dir():
        from petab_sciml.errors import InputFileError
        from petab_sciml.safe_read import check_regular_file

        try:
            check_regular_file(target, what="a network file", limit=None)
        except InputFileError as exc:
            ctx.issues.add(_code(exc, "NN_FILE_INVALID"), _short(exc), file=entry.location)
            return False
    return True


def _network_reader(ctx: ProblemContext, net_id: str, entry: Any,
                    installed: set[str]) -> Any:
    """The format plugin that reads the network, or None (with its issue): format not
    installed, unknown or not loadable, or running code without trust."""
    from petab_sciml.plugins import get_format

    cfg = ctx.config
    fmt = entry.format.lower()
    if fmt not in installed:
        if fmt in SPEC_FORMATS:
            runs = " (its loading runs code)" if fmt in CODE_FORMATS else ""
            ctx.issues.add("NN_FORMAT_UNKNOWN", f"format {entry.format!r}{runs} has no "
                           f"installed reader; network {net_id!r} cannot be checked",
                           file=cfg.path.name, path=f"{entry.yaml_path}.format",
                           severity=_warning())
        else:
            ctx.issues.add("NN_FORMAT_UNKNOWN", f"unknown network format "
                           f"{entry.format!r}; known: {', '.join(SPEC_FORMATS)}",
                           file=cfg.path.name, path=f"{entry.yaml_path}.format")
        return None
    try:
        plugin = get_format(fmt)
    except (PetabSciMLError, MissingExtraError, ImportError) as exc:
        ctx.issues.add("NN_FORMAT_UNKNOWN", f"the reader for format {entry.format!r} "
                       f"cannot be loaded ({exc}); network {net_id!r} cannot be checked",
                       file=cfg.path.name, path=f"{entry.yaml_path}.format",
                       severity=_warning())
        return None
    if plugin.runs_code and not ctx.trust_code:
        ctx.issues.add("NN_CODE_NOT_RUN", f"format {entry.format!r} runs code from "
                       f"{entry.location!r} when loaded; not loaded without trust "
                       f"(--trust-code); checks that need network {net_id!r} are skipped",
                       file=cfg.path.name, path=f"{entry.yaml_path}.format")
        return None
    return plugin


def _load_network(ctx: ProblemContext, net_id: str, entry: Any, plugin: Any,
                  target: Path) -> Any:
    """The network IR read by ``plugin``, or None (with its issue)."""
    try:
        if plugin.runs_code:
            return plugin.read(target, trust_code=True, net_id=net_id)
        return plugin.read(target)
    except MissingExtraError as exc:
        ctx.issues.add("NN_FORMAT_UNKNOWN", f"{exc}; network {net_id!r} cannot be "
                       "checked", file=ctx.config.path.name,
                       path=f"{entry.yaml_path}.format", severity=_warning())
    except PetabSciMLError as exc:
        ctx.issues.add(_code(exc, "NN_FILE_INVALID"), _short(exc), file=entry.location,
                       path=getattr(exc, "entry", None))
    except Exception as exc:  # a plugin failing on bad input is still bad input
        ctx.issues.add("NN_FILE_INVALID", f"cannot read network: "
                       f"{type(exc).__name__}: {exc}", file=entry.location)
    return None


def _short(exc: PetabSciMLError) -> str:
    return getattr(exc, "message", None) or str(exc)


def _code(exc: BaseException, default: str) -> str:
    """The issue code an error carries (a budget, a special file), else ``default``."""
    from petab_sciml.problem.issues import RULES

    code = getattr(exc, "code", None)
    return code if code in RULES and code != "FILE_NOT_FOUND" else default


# ---------------------------------------------------------------------- array files
def _read_arrays(ctx: ProblemContext) -> None:
    from petab_sciml.arrays import read_array_file

    cfg = ctx.config
    src = ctx.arrays
    seen_files: dict[Path, str] = {}
    for name in cfg.array_files:
        target = cfg.resolve(name)
        if target.resolve() in seen_files:
            ctx.issues.add("ARRAY_FILE_REPEATED", f"array file {name!r} is listed more than "
                           f"once (as {seen_files[target.resolve()]!r} before); read once",
                           file=cfg.path.name, path=f"{cfg.extension_path}.array_files")
            continue
        seen_files[target.resolve()] = name
        if not check_inside(ctx, name, f"{cfg.extension_path}.array_files"):
            continue
        if not target.exists():
            ctx.issues.add("FILE_NOT_FOUND", f"array file {name!r} not found",
                           file=cfg.path.name, path=f"{cfg.extension_path}.array_files")
            continue
        try:
            data = read_array_file(target)
        except PetabSciMLError as exc:
            entry = exc.entry or ""
            code = "ARRAY_PYTORCH_FORMAT" if entry.startswith("metadata") else \
                "ARRAY_FILE_INVALID"
            ctx.issues.add(_code(exc, code), _short(exc), file=name, path=exc.entry)
            continue
        except Exception as exc:  # h5py can raise odd things on damaged files
            ctx.issues.add("ARRAY_FILE_INVALID", f"cannot read array file: "
                           f"{type(exc).__name__}: {exc}", file=name)
            continue
        for group in data.ignored_groups:
            ctx.issues.add("ARRAY_GROUP_IGNORED", f"top-level entry {group!r} is not part of "
                           "the PEtab SciML layout (metadata, inputs, parameters); ignored",
                           file=name, path=group)
        if not data.pytorch_format:
            ctx.issues.add("ARRAY_NOT_PYTORCH_FORMAT", "pytorch_format is false: the arrays follow "
                           "the conventions of each network's format, which for every format "
                           "this tool reads is PyTorch's layout; they are used as stored",
                           file=name, path="metadata/pytorch_format")
        src.pytorch_format[name] = data.pytorch_format
        for net_id, layers in data.parameters.items():
            if net_id not in cfg.networks:
                ctx.issues.add("ARRAY_PARAMETERS_UNKNOWN_NETWORK", f"parameters for network "
                               f"{net_id!r}, which the problem does not define", file=name,
                               path=f"parameters/{net_id}")
                continue
            network = ctx.networks.get(net_id)
            merged = src.parameters.setdefault(net_id, {})
            src.parameter_files.setdefault(net_id, name)
            for layer_id, arrays in layers.items():
                if network is not None:
                    arrays = _fitting_arrays(ctx, network, net_id, layer_id, arrays, name,
                                             data.pytorch_format)
                for array_id, lazy in arrays.items():
                    if array_id in merged.get(layer_id, {}):
                        ctx.issues.add("ARRAY_DUPLICATE", f"{net_id}.{layer_id}.{array_id} is "
                                       "also given by an earlier array file", file=name,
                                       path=f"parameters/{net_id}/{layer_id}/{array_id}")
                        continue
                    merged.setdefault(layer_id, {})[array_id] = lazy
        for input_id, keyed in data.inputs.items():
            if input_id in src.inputs:
                ctx.issues.add("ARRAY_DUPLICATE", f"input {input_id!r} is also given by "
                               f"{src.input_files[input_id]!r}", file=name,
                               path=f"inputs/{input_id}")
                continue
            src.inputs[input_id] = keyed
            src.input_files[input_id] = name


def _fitting_arrays(ctx: ProblemContext, network: Any, net_id: str, layer_id: str,
                    arrays: dict[str, Any], name: str, pytorch_format: bool) -> dict[str, Any]:
    """The arrays of ``layer_id`` that fit the network; each one that does not (unknown
    layer or array, wrong shape) is reported on its own, with the shapes."""
    from petab_sciml.arrays import check_parameters

    hint = "" if pytorch_format else " (pytorch_format is false, but the network's " \
        "format stores arrays in PyTorch's layout)"
    try:   # the layer itself (known, has parameters)
        check_parameters(network, {layer_id: {}}, file=name, net_id=net_id, strict=False)
    except ArrayFileError as exc:
        ctx.issues.add("ARRAY_PARAMETERS_MISMATCH", _short(exc) + hint, file=name,
                       path=exc.entry)
        return {}
    fitting = {}
    for array_id, lazy in arrays.items():
        try:
            check_parameters(network, {layer_id: {array_id: lazy}}, file=name,
                             net_id=net_id, strict=False)
        except ArrayFileError as exc:
            ctx.issues.add("ARRAY_PARAMETERS_MISMATCH", _short(exc) + hint, file=name,
                           path=exc.entry)
            ctx.arrays.mismatched.setdefault(net_id, set()).add((layer_id, array_id))
            continue
        fitting[array_id] = lazy
    return fitting


# ---------------------------------------------------------------------- mapping
def _read_mapping(ctx: ProblemContext) -> None:
    nets = set(ctx.config.networks)
    seen_targets: dict[str, Mapped] = {}
    for table, row in ctx.rows("mapping"):
        pid, mid = row["petabEntityId"], row["modelEntityId"]
        if not pid:
            ctx.issues.add("TABLE_ID_INVALID", "empty petabEntityId", file=table.file,
                           row=row.line, column="petabEntityId")
            continue
        if not ID_RE.match(pid):
            ctx.issues.add("TABLE_ID_INVALID", f"petabEntityId {pid!r} is not a valid PEtab "
                           "id", file=table.file, row=row.line, column="petabEntityId")
        if pid in nets:
            ctx.issues.add("NN_ID_AS_PETAB_ID", f"{pid!r} is a network id, which is not a "
                           "PEtab id; map the network's entities to other ids",
                           file=table.file, row=row.line, column="petabEntityId")
        if pid in ctx.mapping:
            ctx.issues.add("TABLE_DUPLICATE_ID", f"petabEntityId {pid!r} is mapped twice "
                           f"(first on line {ctx.mapping[pid].row.line})", file=table.file,
                           row=row.line, column="petabEntityId")
            continue
        try:
            ref = parse_entity(mid, nets)
        except EntityError as exc:
            ctx.issues.add(exc.code, exc.message, file=table.file, row=row.line,
                           column="modelEntityId")
            ctx.mapping[pid] = Mapped(pid, mid, None, row, table, valid=False)
            continue
        mapped = Mapped(pid, mid, ref, row, table)
        if ref is None and pid != mid.strip() and ID_RE.match(mid.strip()):
            ctx.issues.add("MAPPING_ALIAS_OF_VALID_ID", f"{pid!r} aliases {mid.strip()!r}, "
                           "which is already a valid PEtab id; PEtab v2 maps only entities "
                           f"without one: use {mid.strip()!r} directly", file=table.file,
                           row=row.line, column="modelEntityId")
        if ref is not None and ref.net in ctx.networks:
            try:
                mapped.ref = check_entity(ref, ctx.networks[ref.net])
            except EntityError as exc:
                ctx.issues.add(exc.code, exc.message, file=table.file, row=row.line,
                               column="modelEntityId")
                mapped.valid = False
        ctx.mapping[pid] = mapped
        if mapped.ref is not None and mapped.valid:
            key = mapped.ref.canonical()
            if key in seen_targets:
                ctx.issues.add("MAPPING_DUPLICATE_TARGET", f"{key} is already mapped to "
                               f"{seen_targets[key].petab_id!r}", file=table.file,
                               row=row.line, column="modelEntityId")
            else:
                seen_targets[key] = mapped
