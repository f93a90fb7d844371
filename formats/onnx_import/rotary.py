"""RotaryEmbedding (opset 23): rotary position embeddings from products and slices.

The input is ``(B, H, S, D)`` or ``(B, S, H * D)`` (with ``num_heads``); the first
``rotary_embedding_dim`` (default ``D``) features of each head rotate by the angles of
``cos_cache``/``sin_cache``, read at the constant ``position_ids`` (a product with a
constant one-hot matrix, so the caches may be computed by the network) or given per batch
and position.  The pairs are the two halves, or neighbours with ``interleaved``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from petab_sciml import limits

from .importer import _Importer
from .registry import handles
from .values import _C

_ALL = {"slice": [None, None, None]}


def _last(im: _Importer, x: str, start: int | None, stop: int | None, step: int | None = None
          ) -> str:
    return im.emit("getitem", [x], {"index": ["...", {"slice": [start, stop, step]}]})


@handles("RotaryEmbedding")
def _rotary_embedding(im: _Importer, node: Any, ins: list) -> None:
    at = im.attrs(node)
    shape = im.static_shape(ins[0])
    if shape is None or len(shape) not in (3, 4):
        raise im.error(node, "RotaryEmbedding needs the static shape of its input, of rank 3 "
                       "or 4")
    x = im.tensor(ins[0], node)
    if len(shape) == 4:
        b, heads, s, d = shape
        x = im.emit("permute", [x], {"dims": [0, 2, 1, 3]})
    else:
        heads = int(at.get("num_heads", 0))
        if heads <= 0 or shape[2] % heads:
            raise im.error(node, f"num_heads={heads} must divide the hidden size {shape[2]} "
                           "of a 3-D input")
        b, s, d = shape[0], shape[1], shape[2] // heads
        x = im.emit("reshape", [x], {"shape": [b, s, heads, d]})
    rot = int(at.get("rotary_embedding_dim", 0)) or d
    if rot % 2 or rot > d:
        raise im.error(node, f"rotary_embedding_dim={rot} must be even and at most the head "
                       f"size {d}")
    half = rot // 2
    cos, sin = im.tensor(ins[1], node), im.tensor(ins[2], node)
    positions = None
    if len(node.input) > 3 and node.input[3]:
        positions = np.asarray(im.static(node, 3, "position_ids")).astype(np.int64)
    if positions is not None:
        cache = im.static_shape(ins[1])
        if cache is None or len(cache) != 2 or cache[1] != half:
            raise im.error(node, f"the caches must be (positions, {half}) with position_ids")
        if np.any(positions < 0) or np.any(positions >= cache[0]):
            raise im.error(node, f"position_ids must lie in [0, {cache[0]})")
        limits.check("max_folded_elements", f"node {node.name or node.op_type!r}: the "
                     "one-hot matrix of position_ids", positions.size * cache[0])
        pick = np.zeros((positions.size, cache[0]))
        pick[np.arange(positions.size), positions.reshape(-1)] = 1.0
        onehot = im.tensor(_C(pick, "rotary_positions"), node)
        cos, sin = (im.emit("reshape", [im.emit("matmul", [onehot, c])],
                            {"shape": [*positions.shape, half]}) for c in (cos, sin))
    cos = im.emit("unsqueeze", [cos], {"dim": 2})
    sin = im.emit("unsqueeze", [sin], {"dim": 2})
    rotating = x if rot == d else _last(im, x, None, rot)
    if at.get("interleaved", 0):
        x1, x2 = _last(im, rotating, 0, None, 2), _last(im, rotating, 1, None, 2)
    else:
        x1, x2 = _last(im, rotating, None, half), _last(im, rotating, half, None)
    real = im.emit("sub", [im.emit("mul", [cos, x1]), im.emit("mul", [sin, x2])])
    imag = im.emit("add", [im.emit("mul", [sin, x1]), im.emit("mul", [cos, x2])])
    if at.get("interleaved", 0):
        rotated = im.emit("reshape", [im.emit("stack", [[real, imag]], {"dim": -1})],
                          {"shape": [b, s, heads, rot]})
    else:
        rotated = im.emit("cat", [[real, imag]], {"dim": -1})
    out = rotated if rot == d else im.emit("cat", [[rotated, _last(im, x, rot, None)]],
                                           {"dim": -1})
    if len(shape) == 4:
        out = im.emit("permute", [out], {"dims": [0, 2, 1, 3]}, name=im.out_name(node))
    else:
        out = im.emit("reshape", [out], {"shape": list(shape)}, name=im.out_name(node))
    im.bind(node, 0, out, shape)
