"""What the two exporters (IR -> ONNX, IR -> NNEF) share besides their registries
(:mod:`petab_sciml.formats.op_registry`): functional pools seen as layers, the arguments
an activation layer applies, convolution padding, and which functions only move
elements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from petab_sciml.catalogue import LAYERS, POOL_FUNCTIONS, as_tuple
from petab_sciml.network import Ref

ELEMENT_MOVING_FUNCTIONS = frozenset({
    "flatten", "reshape", "permute", "transpose", "squeeze", "unsqueeze", "contiguous",
    "getitem", "cat", "stack", "flip"})
"""Functions that move elements without computing: a bool operand gives a bool result
(as in PyTorch), so both exporters keep comparisons' types through them."""


class PoolLayer:
    """A functional pool's bound arguments seen as the layer of the same maths (``id`` is
    the function name; there are no arrays)."""

    def __init__(self, function: str, bound: Mapping[str, Any]):
        self.type = POOL_FUNCTIONS[function]
        self.spec = LAYERS[self.type]
        self.id = function
        self.config = {k: v for k, v in bound.items() if k != "input"}


def activation_bound(layer: Any, x: Ref) -> dict[str, Any]:
    """The bound arguments of the catalogue function an activation layer applies to ``x``
    (its constructor arguments but the ignored ones, such as ``inplace``)."""
    ignored = {a.name for a in layer.spec.args if a.ignored}
    return {"input": x, **{k: v for k, v in layer.config.items() if k not in ignored}}


def conv_padding(config: Mapping[str, Any], n: int) -> list[tuple[int, int]]:
    """``(before, after)`` zero padding per spatial axis of a ``ConvNd`` (``valid``,
    ``same``: the extra element after, as PyTorch; or the explicit sizes)."""
    padding = config["padding"]
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        kernel, dilation = as_tuple(config["kernel_size"], n), as_tuple(config["dilation"], n)
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in as_tuple(padding, n)]


__all__ = ["ELEMENT_MOVING_FUNCTIONS", "PoolLayer", "activation_bound", "conv_padding"]
