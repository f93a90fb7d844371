"""Building the IR of a network lifted from another framework's graph (the NNEF and
TorchScript readers).

A lifter emits IR nodes as dicts (``name``, ``op``, ``target``, ``args``, ``kwargs``)
with unique names, and passes the tensors it has made around as :class:`Tensor`.
:class:`GraphBuilder` is what both lifters do the same way; :func:`drop_unused` is the
clean-up before :meth:`petab_sciml.network.Network.build`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from petab_sciml.catalogue import REQUIRED
from petab_sciml.errors import NetworkError
from petab_sciml.network import FreeParameter, unique_node_name

TENSOR_KINDS = ("tensor", "tensor|number", "tensors")
"""Catalogue parameter kinds that take tensors (written positionally)."""


@dataclass(frozen=True)
class Tensor:
    """A tensor: the value of the IR node ``name``."""

    name: str


class GraphBuilder:
    """Emitting IR nodes.  A lifter using it has ``nodes`` (the node dicts so far),
    ``taken`` (the node names in use) and :meth:`error`; it overrides :meth:`ir_value`
    to write (or refuse) values of kinds of its own."""

    nodes: list[dict[str, Any]]
    taken: set[str]

    def error(self, message: str) -> NetworkError:  # pragma: no cover - overridden
        raise NotImplementedError

    def fresh(self, base: str) -> str:
        """A node name not yet taken, made from ``base``."""
        return unique_node_name(base, self.taken)

    def ir(self, value: Any) -> Any:
        """``value`` as written in a node's args: tensors by node name, containers
        element-wise, plain Python values as they are."""
        if isinstance(value, Tensor):
            return value.name
        if isinstance(value, (list, tuple)):
            return [self.ir(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.ir(v) for k, v in value.items()}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return self.ir_value(value)

    def ir_value(self, value: Any) -> Any:
        """The IR form of a value of a kind :meth:`ir` does not know (an error here)."""
        raise self.error(f"unsupported value {value!r}")

    def emit(self, op: str, target: str, args: list[Any], kwargs: dict[str, Any] | None = None,
             base: str | None = None) -> Tensor:
        """Append a node (named after ``base``, else ``target``); returns its value."""
        name = self.fresh(base or target)
        self.nodes.append({"name": name, "op": op, "target": target,
                           "args": [self.ir(a) for a in args],
                           "kwargs": {k: self.ir(v) for k, v in (kwargs or {}).items()}})
        return Tensor(name)


def call_arguments(spec: Any, values: Mapping[str, Any],
                   keyword: Callable[[Any, Any], bool]) -> tuple[list[Any], dict[str, Any]]:
    """The args and kwargs of a ``call_function`` node of the catalogue function
    ``spec`` with ``values`` by parameter name: tensor and required parameters
    positional, up to the last one given (defaults fill the gaps); the later parameters
    given as keywords where ``keyword(param, value)`` says so."""
    last = max((i for i, p in enumerate(spec.params)
                if p.name in values and (p.kind in TENSOR_KINDS or p.default is REQUIRED)),
               default=-1)
    args, kwargs = [], {}
    for i, p in enumerate(spec.params):
        if i <= last:
            args.append(values.get(p.name, p.default))
        elif p.name in values and keyword(p, values[p.name]):
            kwargs[p.name] = values[p.name]
    return args, kwargs


def drop_unused(nodes: list[dict[str, Any]], free: Mapping[str, FreeParameter],
                params: Mapping[str, Mapping[str, np.ndarray]]
                ) -> tuple[list[dict[str, Any]], list[FreeParameter],
                           dict[str, dict[str, np.ndarray]]]:
    """The nodes without function and get_attr nodes whose values nothing uses, the
    free parameters still read, and ``params`` without the values of the others."""
    nodes = prune(nodes)
    used = {n["target"] for n in nodes if n["op"] == "get_attr"}
    kept = [p for pid, p in free.items() if pid in used]
    out = {g: dict(arrays) for g, arrays in params.items()}
    for pid in set(free) - used:
        group, array = pid.split(".", 1)
        out.get(group, {}).pop(array, None)
    return nodes, kept, {g: arrays for g, arrays in out.items() if arrays}


def prune(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop function and get_attr nodes whose values nothing uses (placeholders, layer
    calls and the output are kept)."""
    live = reachable(nodes, ("output", "placeholder", "call_module"), _node_strings)
    return [n for n in nodes if n["name"] in live]


def reachable(nodes: list[dict[str, Any]], roots: Collection[str],
              refs: Callable[[dict[str, Any]], Iterable[str]]) -> set[str]:
    """Names of the nodes whose op is in ``roots`` and of every node they read,
    transitively; ``refs(node)`` lists the names a node reads (others are ignored)."""
    by_name = {n["name"]: n for n in nodes}
    live: set[str] = set()
    stack = [n["name"] for n in nodes if n["op"] in roots]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        stack.extend(r for r in refs(by_name[name]) if r in by_name)
    return live


def _node_strings(node: dict[str, Any]) -> list[str]:
    """Every string in a node's args and kwargs (the node names it may read)."""
    out: list[str] = []
    _strings(node.get("args", []), out)
    _strings(node.get("kwargs", {}), out)
    return out


def _strings(value: Any, out: list[str]) -> None:
    """Append every string in ``value`` (nested lists and dicts) to ``out``."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)
