"""Dropout -> a Dropout layer (an identity at inference), or the identity itself for
another tool's inference-mode Dropout (no ``training_mode`` input, or a constant false)."""

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
    recorded = im._meta(node).get(META_LAYER_TYPE)
    computed_ratio = (im.opset >= 12 and len(node.input) > 1 and bool(node.input[1])
                      and im.array(ins[1]) is None)
    if im.opset < 12:
        p = float(im.attrs(node).get("ratio", 0.5))
    elif not computed_ratio:
        ratio = im.static(node, 1, "ratio", np.array(0.5))
        p = float(np.asarray(ratio).reshape(()))
    if recorded is None:
        # before opset 12 an ONNX Dropout has no training mode (runtimes run inference)
        training = (im.static(node, 2, "training_mode", np.array(False))
                    if im.opset >= 12 else np.array(False))
        if not bool(np.asarray(training).reshape(())):
            # what the model computes everywhere: no layer that would drop in training
            im.alias(node, 0, ins[0])
            return
    if computed_ratio:  # a layer's p is a number: only the inference-mode identity is left
        raise im.error(node, "ratio (input 1) must be known at import (a constant or "
                       "initializer) for a Dropout that drops in training, but it is "
                       "computed from the network inputs")
    layer_type = recorded or "Dropout"
    if layer_type not in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        layer_type = "Dropout"
    ref = im.add_layer(node, layer_type, {"p": _f32(p)}, {}, [im.tensor(ins[0], node)])
    im.bind(node, 0, ref)
