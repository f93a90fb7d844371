"""The values that flow through the ONNX lifter, and what an import returns.

An ONNX value is, while converting, one of four kinds: a runtime tensor (:class:`_T`, an
IR node), a constant known at import (:class:`_C`, numpy), a parameter (:class:`_P`, an
initializer, materialised as a ``get_attr`` node only when a generic function needs it)
or a lazy value (:class:`_Lazy`: a transposed or reshaped parameter, a comparison, a sign)
that some consumers recognise and the others materialise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from petab_sciml.network import Network


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class NameEntry:
    """Where one ONNX initializer went: ``group.array`` of the IR.

    ``kind`` is ``layer`` (an array of a lifted layer), ``free`` (a free parameter) or
    ``buffer`` (a non-trainable array: running statistics, constants).  ``transform``
    says how the value was changed on the way (``transposed``, ``scaled by alpha=2``,
    ``reshaped``), ``via`` the alias it was reached through (an Identity output, or the
    parameter an exporter folded it from).
    """

    onnx_name: str
    group: str
    array: str
    kind: str
    transform: str = ""
    via: str = ""

    @property
    def target(self) -> str:
        return f"{self.group}.{self.array}"


@dataclass
class OnnxImport:
    """The result of importing an ONNX model."""

    network: Network
    parameters: dict[str, dict[str, np.ndarray]]
    """``{group: {array: ndarray}}`` in PyTorch layout: layers' arrays and free parameters."""
    names: list[NameEntry]
    """ONNX initializer -> IR array map, in import order."""
    warnings: list[str]
    opset: int
    producer: str = ""
    dtype: str = "float32"
    """``float64`` when the model computes in double precision (its inputs are DOUBLE)."""

    def name_map(self) -> dict[str, list[str]]:
        """``{onnx initializer name: ["group.array", ...]}``."""
        out: dict[str, list[str]] = {}
        for e in self.names:
            out.setdefault(e.onnx_name, []).append(e.target)
        return out

    def format_names(self) -> str:
        """The initializer map as an aligned text table."""
        rows = [("ONNX initializer", "IR array", "kind", "note")]
        for e in self.names:
            note = "; ".join(x for x in (e.transform, f"via {e.via}" if e.via else "") if x)
            rows.append((e.onnx_name, e.target, e.kind, note))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = []
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        return "\n".join(line.rstrip() for line in lines)


# ----------------------------------------------------------------------------- values
@dataclass(frozen=True)
class _T:
    """A runtime tensor: the IR node ``ref``; ``shape`` is static where known (None dims
    are dynamic), None if even the rank is unknown."""

    ref: str
    shape: tuple | None = None
    onnx: str = ""
    """The ONNX value it is (where bound from a node's output): where shape inference
    found no static shape, running the graph up to it can."""


@dataclass(frozen=True, eq=False)
class _C:
    """A constant known at import."""

    value: np.ndarray
    name: str = "const"


@dataclass(frozen=True)
class _P:
    """An initializer used as a parameter, reached through value name ``alias``."""

    init: str
    alias: str


@dataclass(frozen=True, eq=False)
class _Lazy:
    """A value some consumers recognise (the others materialise it): ``transpose`` (args:
    parameter, perm), ``reshape`` (args: parameter, shape; only made for a PRelu slope),
    ``compare`` (args: op type, a, b; a bool tensor), ``float`` (args: a comparison cast
    to float), ``sign`` (args: a)."""

    kind: str
    args: tuple
    node: Any


def _sanitize(name: str, prefix: str = "v") -> str:
    """A valid PEtab id from an arbitrary name (``/layer1/Conv`` -> ``layer1_Conv``)."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", str(name)).strip("_")
    out = re.sub(r"__+", "_", out)
    if not out:
        return prefix
    if out[0].isdigit():
        out = f"{prefix}{out}" if prefix.endswith("_") else f"{prefix}_{out}"
    return out


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (ONNX float attributes
    are float32: 1e-5 arrives as 9.99999974738e-06)."""
    x = float(x)
    if not math.isfinite(x):
        return x
    return float(np.format_float_positional(np.float32(x), unique=True, trim="0"))


def _compact(value: Any) -> Any:
    """A list of equal ints as one int (``[3, 3]`` -> 3), as PyTorch modules print them."""
    if isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and v == value[0] for v in value):
        return value[0]
    return value


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)
