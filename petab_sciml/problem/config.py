"""The problem YAML: PEtab v2 file lists plus the SciML extension.

Accepted spellings: the extension under ``extensions.sciml`` (official test suite) or
``extensions.petab_sciml`` (specification text); ``neural_networks`` or the older
``neural_nets``; ``pre_initialization`` or the older ``static``; format names in any case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from petab_sciml.problem.issues import IssueList
from petab_sciml.problem.legacy import LegacyConstruct, current_view, yaml_constructs
from petab_sciml.problem.tables import ID_RE

EXTENSION_KEYS = ("sciml", "petab_sciml")
EXTENSION_VERSION = "0.1.0"
"""The version of the PEtab SciML extension this package implements (the official test
suite's problems state it)."""
SPEC_FORMATS = ("yaml", "onnx", "nnef", "torchscript", "pytorch", "equinox", "lux.jl")
"""Format names a problem may use; those without an installed plugin cannot be checked."""

FILE_LISTS = {
    "parameter_files": "parameter",
    "measurement_files": "measurement",
    "observable_files": "observable",
    "condition_files": "condition",
    "experiment_files": "experiment",
    "mapping_files": "mapping",
}


@dataclass
class NetworkEntry:
    """One entry of ``neural_networks``."""

    id: str
    location: str | None
    format: str | None
    pre_initialization: bool | None
    yaml_path: str

    @property
    def hybridization(self) -> str:
        if self.pre_initialization is None:
            return "unknown"
        return "pre-initialization" if self.pre_initialization else "simulation"


@dataclass
class ProblemConfig:
    """What the problem YAML says, with paths resolved against its folder."""

    path: Path
    base: Path
    raw: dict[str, Any]
    format_version: str | None = None
    files: dict[str, list[str]] = field(default_factory=dict)
    """Table kind -> file names (relative as written)."""
    model_files: dict[str, dict[str, Any]] = field(default_factory=dict)
    extension_key: str | None = None
    extension_path: str = "extensions"
    networks: dict[str, NetworkEntry] = field(default_factory=dict)
    hybridization_files: list[str] = field(default_factory=list)
    array_files: list[str] = field(default_factory=list)
    legacy: list[LegacyConstruct] = field(default_factory=list)
    """Constructs of an older draft found in the YAML (their files are read from where
    that draft has them; see :mod:`petab_sciml.problem.legacy`)."""

    def resolve(self, name: str) -> Path:
        p = Path(name)
        return p if p.is_absolute() else self.base / p


def read_config(path: Path, issues: IssueList) -> ProblemConfig | None:
    """Parse the problem YAML; report problems in ``issues``.  None if unusable."""
    from petab_sciml.errors import InputFileError, LimitError
    from petab_sciml.safe_read import load_yaml, read_text

    file = path.name
    try:
        text = read_text(path, what="a problem YAML file", limit="max_yaml_bytes")
        raw = load_yaml(text, file=file)
    except LimitError as exc:
        issues.add(exc.code, exc.message, file=file, path=exc.entry)
        return None
    except InputFileError as exc:
        code = exc.code if exc.code in ("FILE_NOT_REGULAR", "FILE_OUTSIDE_CONFINED") \
            else "YAML_UNREADABLE"
        issues.add(code, f"problem {exc.message}", file=str(path))
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        issues.add("YAML_UNREADABLE", f"invalid YAML: {problem}", file=file, path=where)
        return None
    if not isinstance(raw, dict):
        issues.add("YAML_UNREADABLE", f"expected a mapping at the top level, got "
                   f"{type(raw).__name__}", file=file)
        return None
    cfg = ProblemConfig(path=path, base=path.parent, raw=raw)
    cfg.legacy = yaml_constructs(raw, file)
    view = current_view(raw) if cfg.legacy else raw
    _read_core(cfg, view, issues, file)
    _read_extension(cfg, view, issues, file)
    return cfg


def is_file_name(value: Any) -> bool:
    """Whether ``value`` can name a file: a non-empty string without a NUL character
    (the operating system refuses those; ``Path.resolve`` raised ``ValueError``)."""
    return isinstance(value, str) and bool(value) and "\x00" not in value


def _string_list(value: Any, key: str, issues: IssueList, file: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(is_file_name(v) for v in value):
        issues.add("YAML_FIELD_INVALID", f"expected a list of file names, got {value!r}",
                   file=file, path=key)
        return [v for v in value if is_file_name(v)] if isinstance(value, list) else []
    return list(value)


def _read_core(cfg: ProblemConfig, raw: dict, issues: IssueList, file: str) -> None:
    version = raw.get("format_version")
    cfg.format_version = None if version is None else str(version)
    if version is None or not str(version).strip().startswith("2"):
        issues.add("YAML_FORMAT_VERSION", f"format_version must be a PEtab 2.x version, got "
                   f"{version!r}", file=file, path="format_version")
    for key, kind in FILE_LISTS.items():
        cfg.files[kind] = _string_list(raw.get(key), key, issues, file)
    for key in ("parameter_files", "observable_files", "measurement_files"):
        if not cfg.files[FILE_LISTS[key]] and key not in _reported(issues, key):
            issues.add("YAML_FIELD_INVALID", f"{key} is required and must list at least one "
                       "file", file=file, path=key)
    models = raw.get("model_files")
    if not isinstance(models, dict) or not models:
        issues.add("YAML_FIELD_INVALID", "model_files is required: a mapping of model ids to "
                   "{location, language}", file=file, path="model_files")
        return
    for model_id, entry in models.items():
        where = f"model_files.{model_id}"
        if not isinstance(entry, dict) or not is_file_name(entry.get("location")):
            issues.add("YAML_FIELD_INVALID", "expected a mapping with a location string",
                       file=file, path=where)
            continue
        cfg.model_files[str(model_id)] = entry


def _reported(issues: IssueList, path: str) -> set[str]:
    return {i.path for i in issues if i.path == path}


def _read_extension(cfg: ProblemConfig, raw: dict, issues: IssueList, file: str) -> None:
    extensions = raw.get("extensions")
    if extensions is not None and not isinstance(extensions, dict):
        issues.add("YAML_FIELD_INVALID", "extensions must be a mapping", file=file,
                   path="extensions")
        extensions = None
    ext = None
    for key in EXTENSION_KEYS:
        if isinstance(extensions, dict) and key in extensions:
            ext, cfg.extension_key = extensions[key], key
            break
    if cfg.extension_key is None:
        return  # a plain PEtab v2 problem: no networks
    base = cfg.extension_path = f"extensions.{cfg.extension_key}"
    if not isinstance(ext, dict):
        issues.add("EXT_NEURAL_NETWORKS_MISSING", f"{base} must be a mapping with "
                   "neural_networks", file=file, path=base)
        return
    nets_key = "neural_networks" if "neural_networks" in ext else (
        "neural_nets" if "neural_nets" in ext else None)
    if nets_key == "neural_nets":
        issues.add("EXT_LEGACY_SPELLING", "neural_nets is an older spelling of "
                   "neural_networks", file=file, path=f"{base}.neural_nets")
    nets = ext.get(nets_key) if nets_key else None
    if nets is not None and not isinstance(nets, dict):
        issues.add("EXT_NEURAL_NETWORKS_MISSING", "neural_networks must be a mapping of "
                   "network ids to {location, format, pre_initialization}", file=file,
                   path=f"{base}.{nets_key or 'neural_networks'}")
    elif nets:
        for net_id, entry in nets.items():
            cfg.networks[str(net_id)] = _network_entry(
                str(net_id), entry, f"{base}.{nets_key}.{net_id}", issues, file)
    version = ext.get("version")
    if not has_extension_version(ext):
        issues.add("EXT_VERSION_MISSING", f"the extension's version is required (PEtab v2 "
                   f"extensions state the version they follow, e.g. version: "
                   f"{EXTENSION_VERSION}), got {version!r}", file=file, path=f"{base}.version")
    if "hybridization_files" not in ext and cfg.networks:
        issues.add("EXT_HYBRIDIZATION_FILES_MISSING", "hybridization_files is required",
                   file=file, path=f"{base}.hybridization_files")
    cfg.hybridization_files = _string_list(ext.get("hybridization_files"),
                                           f"{base}.hybridization_files", issues, file)
    cfg.array_files = _string_list(ext.get("array_files"), f"{base}.array_files", issues,
                                   file)


def _network_entry(net_id: str, entry: Any, where: str, issues: IssueList,
                   file: str) -> NetworkEntry:
    if not ID_RE.match(net_id):
        issues.add("NN_ID_INVALID", f"network id {net_id!r} is not a valid identifier",
                   file=file, path=where)
    if not isinstance(entry, dict):
        issues.add("NN_LOCATION_MISSING", "expected a mapping with location, format and "
                   "pre_initialization", file=file, path=where)
        return NetworkEntry(net_id, None, None, None, where)
    location = entry.get("location")
    if not is_file_name(location):
        issues.add("NN_LOCATION_MISSING", f"location must be a file name, got {location!r}",
                   file=file, path=f"{where}.location")
        location = None
    fmt = entry.get("format")
    if not isinstance(fmt, str) or not fmt:
        issues.add("NN_FORMAT_MISSING", f"format must be a string (e.g. YAML), got {fmt!r}",
                   file=file, path=f"{where}.format")
        fmt = None
    if "pre_initialization" in entry:
        pre, key = entry["pre_initialization"], "pre_initialization"
    elif "static" in entry:
        pre, key = entry["static"], "static"
        issues.add("EXT_LEGACY_SPELLING", "static is an older spelling of "
                   "pre_initialization", file=file, path=f"{where}.static")
    else:
        pre, key = None, "pre_initialization"
    if not isinstance(pre, bool):
        issues.add("NN_PRE_INITIALIZATION_MISSING", f"{key} must be true or false, got "
                   f"{pre!r}", file=file, path=f"{where}.{key}")
        pre = None
    return NetworkEntry(net_id, location, fmt, pre, where)


def has_extension_version(ext: dict[str, Any]) -> bool:
    """Whether the extension section states its ``version`` (a non-empty string or
    number)."""
    version = ext.get("version")
    return isinstance(version, (str, int, float)) and not isinstance(version, bool) \
        and bool(str(version).strip())
