"""The mapping-table grammar for network entities, and its check against the IR.

One parser for every ``modelEntityId`` that refers to a network::

    net.parameters                         the whole network
    net.parameters[layer]                  one layer's arrays
    net.parameters[layer].array            one array
    net.parameters[layer].array[i0, i1]    elements (k <= ndim indices select a block)
    net.inputs[k]  net.inputs[k][i0, ...]  input argument k (or its elements)
    net.outputs[k] net.outputs[k][i0, ...] output argument k (or its elements)

``net.inputs`` / ``net.outputs`` without an argument index mean argument 0 of a network
with a single input/output.  Indices are zero-based (PyTorch order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from petab_sciml.network import Network

_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_HEAD = re.compile(rf"^\s*({_ID})\s*\.\s*(parameters|inputs|outputs)\b(.*)$", re.S)
_PARAM_REST = re.compile(
    rf"^\[\s*({_ID})\s*\](?:\s*\.\s*({_ID})(?:\s*\[([^\[\]]*)\])?)?\s*$")
_IO_REST = re.compile(r"^\[\s*([^\[\]]*?)\s*\](?:\s*\[([^\[\]]*)\])?\s*$")
KINDS = ("parameters", "inputs", "outputs")
LEVELS = ("network", "layer", "array", "element")


class EntityError(Exception):
    """A mapping entry that is wrong; ``code`` is the validation rule code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class EntityRef:
    """A parsed network ``modelEntityId``."""

    text: str
    net: str
    kind: str
    layer: str | None = None
    array: str | None = None
    arg: int | None = None
    index: tuple[int, ...] | None = None

    @property
    def level(self) -> int:
        """Specificity of a parameter reference: 0 network, 1 layer, 2 array, 3 element."""
        if self.layer is None:
            return 0
        if self.array is None:
            return 1
        return 2 if self.index is None else 3

    @property
    def level_name(self) -> str:
        return LEVELS[self.level]

    def canonical(self) -> str:
        if self.kind == "parameters":
            out = f"{self.net}.parameters"
            if self.layer is not None:
                out += f"[{self.layer}]"
            if self.array is not None:
                out += f".{self.array}"
        else:
            out = f"{self.net}.{self.kind}"
            if self.arg is not None:
                out += f"[{self.arg}]"
        if self.index is not None:
            out += "[" + ", ".join(map(str, self.index)) + "]"
        return out


def _parse_index(text: str, what: str, full: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not re.fullmatch(r"-?\d+", p) for p in parts):
        raise EntityError("MAPPING_SYNTAX", f"{full!r}: {what} must be comma-separated "
                          f"integers [i0, i1, ...], got [{text}]")
    return tuple(int(p) for p in parts)


def parse_entity(text: str, networks: set[str] | None = None) -> EntityRef | None:
    """Parse ``text``; None if it does not refer to a network.

    With ``networks`` given, an ``x.parameters|inputs|outputs`` head whose ``x`` is not
    among them raises ``MAPPING_UNKNOWN_NETWORK``; a network id followed by anything
    but the grammar raises ``MAPPING_SYNTAX``.
    """
    full = text.strip()
    head = _HEAD.match(full)
    if head is None:
        first = re.match(rf"^\s*({_ID})\s*(?:[.\[]|$)", full)
        if networks is not None and first and first.group(1) in networks:
            if full == first.group(1):
                raise EntityError("MAPPING_SYNTAX", f"{full!r}: a network id alone is not an "
                                  "entity; use net.parameters, net.inputs[k] or "
                                  "net.outputs[k]")
            raise EntityError("MAPPING_SYNTAX", f"{full!r}: expected "
                              f"{first.group(1)}.parameters[...], .inputs[...] or "
                              ".outputs[...]")
        return None
    net, kind, rest = head.group(1), head.group(2), head.group(3).strip()
    if networks is not None and net not in networks:
        raise EntityError("MAPPING_UNKNOWN_NETWORK", f"{full!r}: network {net!r} is not in "
                          f"the problem (networks: {', '.join(sorted(networks)) or 'none'})")
    if kind == "parameters":
        if not rest:
            return EntityRef(full, net, kind)
        m = _PARAM_REST.match(rest)
        if m is None:
            raise EntityError("MAPPING_SYNTAX", f"{full!r}: expected "
                              f"{net}.parameters[layerId].arrayId[i0, ...] (do not break the "
                              "hierarchy)")
        index = _parse_index(m.group(3), "parameter index", full) if m.group(3) is not None \
            else None
        return EntityRef(full, net, kind, layer=m.group(1), array=m.group(2), index=index)
    if not rest:
        return EntityRef(full, net, kind)
    m = _IO_REST.match(rest)
    if m is None or not re.fullmatch(r"\d+", m.group(1)):
        raise EntityError("MAPPING_SYNTAX", f"{full!r}: expected {net}.{kind}[k] or "
                          f"{net}.{kind}[k][i0, ...] with k a non-negative integer")
    index = _parse_index(m.group(2), f"{kind[:-1]} index", full) if m.group(2) is not None \
        else None
    return EntityRef(full, net, kind, arg=int(m.group(1)), index=index)


def check_entity(ref: EntityRef, network: Network) -> EntityRef:
    """Check ``ref`` against the IR; raise :class:`EntityError` naming the rule.

    Returns ``ref`` with ``arg`` filled in for ``net.inputs``/``net.outputs`` of a
    single-input/output network.
    """
    if ref.kind == "parameters":
        arrays = network.parameter_arrays()
        if ref.layer is None:
            return ref
        if ref.layer not in arrays:
            if ref.layer in network.layers:
                raise EntityError("MAPPING_UNKNOWN_LAYER", f"{ref.text!r}: layer "
                                  f"{ref.layer!r} ({network.layers[ref.layer].type}) has no "
                                  f"parameters; layers with parameters: "
                                  f"{', '.join(arrays) or 'none'}")
            raise EntityError("MAPPING_UNKNOWN_LAYER", f"{ref.text!r}: network {ref.net!r} "
                              f"has no layer {ref.layer!r}; layers with parameters: "
                              f"{', '.join(arrays) or 'none'}")
        if ref.array is None:
            return ref
        infos = arrays[ref.layer]
        if ref.array not in infos:
            raise EntityError("MAPPING_UNKNOWN_ARRAY", f"{ref.text!r}: layer {ref.layer!r} "
                              f"has no array {ref.array!r}; arrays: {', '.join(infos)}")
        if ref.index is not None:
            shape = tuple(infos[ref.array].shape)
            _check_index(ref, shape, "MAPPING_INDEX_OUT_OF_RANGE",
                         f"array {ref.layer}.{ref.array}")
        return ref
    count = len(network.inputs) if ref.kind == "inputs" else network.n_outputs
    code = "MAPPING_INPUT_ARG_OUT_OF_RANGE" if ref.kind == "inputs" \
        else "MAPPING_OUTPUT_ARG_OUT_OF_RANGE"
    if ref.arg is None:
        if count != 1:
            raise EntityError("MAPPING_SYNTAX", f"{ref.text!r}: network {ref.net!r} has "
                              f"{count} {ref.kind}; name one as {ref.net}.{ref.kind}[k]")
        return EntityRef(ref.text, ref.net, ref.kind, arg=0, index=ref.index)
    if ref.arg >= count:
        raise EntityError(code, f"{ref.text!r}: {ref.kind[:-1]} argument index {ref.arg} out "
                          f"of range; network {ref.net!r} has {count} {ref.kind} "
                          f"(0..{count - 1})")
    if ref.index is not None and any(i < 0 for i in ref.index):
        raise EntityError("MAPPING_SYNTAX", f"{ref.text!r}: negative indices are not allowed")
    return ref


def _check_index(ref: EntityRef, shape: tuple[int, ...], code: str, what: str) -> None:
    index = ref.index or ()
    if len(index) > len(shape):
        raise EntityError(code, f"{ref.text!r}: {len(index)} indices for {what} of shape "
                          f"{shape} ({len(shape)} dimensions)")
    for axis, (i, n) in enumerate(zip(index, shape)):
        if not 0 <= i < n:
            raise EntityError(code, f"{ref.text!r}: index {i} out of range for axis {axis} "
                              f"of {what} with shape {shape} (valid 0..{n - 1})")
