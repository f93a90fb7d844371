"""Dropout layers -> Dropout (an identity at inference; the ratio kept for the importer)."""

from __future__ import annotations

from typing import Any

from .exporter import _Exporter
from .registry import layer


@layer("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")
def _dropout(ex: _Exporter, lay: Any, ins: list[Any]) -> str:
    return ex.op("Dropout", [ins[0], ex.const(float(lay.config["p"]), name="ratio")])
