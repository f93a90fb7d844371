"""Linear and Bilinear layers (Gemm, or MatMul / Einsum plus Add), and matmul."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .exporter import _Exporter
from .registry import function, layer


@layer("Linear")
def _linear(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    """Gemm for 2-D inputs, else MatMul with the transposed weight (plus Add)."""
    c, lid = lay.config, lay.id
    w = ex.init(lid, "weight")
    x = ins[0]
    if ex.rank(x) == 2:
        args = [x, w] + ([ex.init(lid, "bias")] if c["bias"] else [])
        return ex.op("Gemm", args, transB=1)
    y = ex.op("MatMul", [x, ex.op("Transpose", [w], perm=[1, 0])])
    return ex.op("Add", [y, ex.init(lid, "bias")]) if c["bias"] else y


@layer("Bilinear")
def _bilinear(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    y = ex.op("Einsum", [ins[0], ex.init(lay.id, "weight"), ins[1]],
              equation="...i,oij,...j->...o")
    return ex.op("Add", [y, ex.init(lay.id, "bias")]) if lay.config["bias"] else y


@function("matmul")
def _matmul(ex: _Exporter, fn: str, b: Mapping[str, Any]) -> str:
    return ex.op("MatMul", [ex.input(b), ex.operand(b["other"])])
