"""Dropout layers: identities in inference mode, so NNEF gets no operation for them."""

from __future__ import annotations

from .registry import layer
from .writer import LayerCall, _Ident, _Writer


@layer("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout")
def _dropout(w: _Writer, call: LayerCall) -> _Ident:
    return call.x
