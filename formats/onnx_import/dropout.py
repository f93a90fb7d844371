"""Dropout -> a Dropout layer (an identity at inference)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .importer import META_LAYER_TYPE, _Importer
from .registry import handles
from .values import _f32


@handles("Dropout")
def _dropout(im: _Importer, node: Any, ins: list) -> None:
    if im.used(node, 1):
        raise im.error(node, "the mask output of Dropout is not supported")
    if im.opset < 12:
        p = float(im.attrs(node).get("ratio", 0.5))
    else:
        ratio = im.static(node, 1, "ratio", np.array(0.5))
        p = float(np.asarray(ratio).reshape(()))
    layer_type = im._meta(node).get(META_LAYER_TYPE, "Dropout")
    if layer_type not in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        layer_type = "Dropout"
    ref = im.add_layer(node, layer_type, {"p": _f32(p)}, {}, [im.tensor(ins[0], node)])
    im.bind(node, 0, ref)
