"""The PEtab SciML NN model YAML format (``nn_model_id``, ``inputs``, ``layers``, ``forward``).

Reading gives a validated :class:`~petab_sciml.network.Network`; writing gives back the
same data (file -> IR -> file is lossless as data).  An optional ``free_parameters``
section (our extension) carries parameter arrays that belong to no layer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml as _yaml

from petab_sciml.errors import NetworkError
from petab_sciml.network import Network
from petab_sciml.plugins import NetworkFormat

_Dumper = getattr(_yaml, "CSafeDumper", _yaml.SafeDumper)
TOP_KEYS = ("nn_model_id", "inputs", "layers", "forward", "free_parameters")


def network_from_dict(data: Any, *, source: object | None = None) -> Network:
    """Build a network from the parsed YAML mapping; errors name ``source`` and the entry."""
    file = None if source is None else str(source)
    if not isinstance(data, Mapping):
        raise NetworkError(f"expected a mapping with keys {', '.join(TOP_KEYS[:4])}, got "
                           f"{type(data).__name__}", file=file)
    unknown = [k for k in data if k not in TOP_KEYS]
    if unknown:
        raise NetworkError(f"unknown top-level key {unknown[0]!r}; expected "
                           f"{', '.join(TOP_KEYS)}", file=file, entry=str(unknown[0]))
    for key in ("nn_model_id", "layers", "forward"):
        if key not in data:
            raise NetworkError(f"missing required key {key!r}", file=file, entry=key)
    layers = data["layers"] or []
    forward = data["forward"]
    if not isinstance(layers, list):
        raise NetworkError(f"layers must be a list, got {type(layers).__name__}", file=file,
                           entry="layers")
    if not isinstance(forward, list):
        raise NetworkError(f"forward must be a list, got {type(forward).__name__}", file=file,
                           entry="forward")
    inputs_raw = data.get("inputs")
    if inputs_raw is None:
        inputs = [n.get("name") for n in forward if isinstance(n, Mapping)
                  and n.get("op") == "placeholder"]
    else:
        if not isinstance(inputs_raw, list):
            raise NetworkError("inputs must be a list of {input_id: ...} entries", file=file,
                               entry="inputs")
        inputs = []
        for i, item in enumerate(inputs_raw):
            if not isinstance(item, Mapping) or "input_id" not in item:
                raise NetworkError(f"expected a mapping with input_id, got {item!r}",
                                   file=file, entry=f"inputs[{i}]")
            inputs.append(item["input_id"])
    return Network.build(data["nn_model_id"], inputs, layers, forward,
                         data.get("free_parameters") or (), source=source)


def network_to_dict(network: Network) -> dict[str, Any]:
    """The YAML mapping of ``network`` (arguments and node fields as originally written)."""
    data: dict[str, Any] = {
        "nn_model_id": network.id,
        "inputs": [{"input_id": i} for i in network.inputs],
        "layers": [
            {"layer_id": layer.id, "layer_type": layer.type, "args": _plain(layer.args)}
            for layer in network.layers.values()
        ],
        "forward": [
            {"name": n.name, "op": n.op, "target": n.target, "args": _plain(list(n.args)),
             "kwargs": _plain(dict(n.kwargs))}
            for n in network.nodes
        ],
    }
    if network.free_parameters:
        data["free_parameters"] = [
            {"id": p.id, "shape": list(p.shape), "trainable": p.trainable}
            for p in network.free_parameters.values()
        ]
    return data


def _plain(value: Any) -> Any:
    """Tuples become lists so the safe dumper can write them."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def read(path: str | os.PathLike) -> Network:
    """Read a network YAML file (a regular file within the YAML budgets of
    :mod:`petab_sciml.limits`)."""
    from petab_sciml.errors import InputFileError
    from petab_sciml.safe_read import load_yaml, read_text

    path = Path(path)
    try:
        text = read_text(path, what="a network YAML file", limit="max_yaml_bytes")
    except InputFileError as exc:
        raise NetworkError(exc.message, file=path, code=exc.code) from None
    try:
        data = load_yaml(text, file=path)
    except _yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise NetworkError(f"invalid YAML: {problem}", file=path, entry=where) from None
    return network_from_dict(data, source=path)


def dumps(network: Network) -> str:
    """The YAML text of ``network``."""
    return _yaml.dump(network_to_dict(network), Dumper=_Dumper, sort_keys=False)


def write(network: Network, path: str | os.PathLike, *, overwrite: bool = True) -> None:
    """Write ``network`` as a PEtab SciML NN model YAML file (through
    :func:`petab_sciml.safe_write.staged_output`: atomic, never through a symlink)."""
    from petab_sciml.safe_write import write_text

    write_text(path, dumps(network), overwrite=overwrite)


FORMAT = NetworkFormat(name="yaml", extensions=(".yaml", ".yml"), read=read, write=write,
                       runs_code=False)
