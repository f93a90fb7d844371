"""Col2Im: blocks summed back into an image, by a constant 0/1 matrix.

Input ``(N, C * prod(block_shape), L)`` holds, for each of the ``L`` block positions (the
sliding positions of ``block_shape`` over the padded image, with ``strides`` and
``dilations``), the block's elements; every element adds to one image pixel, or falls in
the padding and is dropped.  With ``image_shape`` and ``block_shape`` constant the map
is a ``(K * L, prod(image_shape))`` matrix, applied by one ``matmul``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from petab_sciml import limits

from .importer import _Importer
from .registry import handles
from .values import _C


@handles("Col2Im")
def _col2im(im: _Importer, node: Any, ins: list) -> None:
    image = [int(v) for v in np.asarray(im.static(node, 1, "image_shape")).reshape(-1)]
    block = [int(v) for v in np.asarray(im.static(node, 2, "block_shape")).reshape(-1)]
    n = len(image)
    if len(block) != n or n == 0:
        raise im.error(node, f"image_shape {image} and block_shape {block} must have the same "
                       "length")
    at = im.attrs(node)
    strides = [int(v) for v in at.get("strides", [1] * n)]
    dilations = [int(v) for v in at.get("dilations", [1] * n)]
    pads = [int(v) for v in at.get("pads", [0] * 2 * n)]
    shape = im.static_shape(ins[0])
    if shape is None or len(shape) != 3:
        raise im.error(node, "Col2Im needs the static shape (N, C * prod(block), L) of its "
                       "input")
    blocks = [(image[i] + pads[i] + pads[n + i] - dilations[i] * (block[i] - 1) - 1)
              // strides[i] + 1 for i in range(n)]
    k, positions = math.prod(block), math.prod(blocks)
    if shape[1] % k or shape[2] != positions:
        raise im.error(node, f"input {list(shape)} does not hold {positions} blocks of "
                       f"{block}")
    pixels = math.prod(image)
    limits.check("max_folded_elements", f"node {node.name or node.op_type!r}: the Col2Im "
                 "matrix", k * positions * pixels)
    matrix = np.zeros((k * positions, pixels))
    for e, offset in enumerate(itertools.product(*(range(b) for b in block))):
        for p, where in enumerate(itertools.product(*(range(b) for b in blocks))):
            pixel = [where[i] * strides[i] - pads[i] + offset[i] * dilations[i]
                     for i in range(n)]
            if all(0 <= pixel[i] < image[i] for i in range(n)):
                matrix[e * positions + p, np.ravel_multi_index(pixel, image)] = 1.0
    channels = shape[1] // k
    x = im.emit("reshape", [im.tensor(ins[0], node)], {"shape": [shape[0], channels,
                                                                 k * positions]})
    y = im.emit("matmul", [x, im.tensor(_C(matrix, "col2im"), node)])
    out = [shape[0], channels, *image]
    im.bind(node, 0, im.emit("reshape", [y], {"shape": out}, name=im.out_name(node)), out)
