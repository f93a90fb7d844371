"""JAX implementations of the catalogue functions, with PyTorch semantics.

Each implementation is called with the node's bound arguments (catalogue parameter names,
defaults already filled in by the IR, node references replaced by arrays).  Arguments the
catalogue marks as ignored (``inplace``, ``_stacklevel``, ``dtype``) arrive in ``**_``.

:data:`FUNCTIONS` maps every implemented function to its implementation; one module per
family registers them (:func:`.function_registry.implements`): :mod:`.activations`,
:mod:`.arithmetic` (element-wise maths, comparisons, reductions) and
:mod:`.shape_functions` (shapes, indexing, padding).  Functional pools
(``F.max_pool2d``...) run the layer of the same maths (:mod:`.pooling`,
:mod:`.normalization`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from petab_sciml.catalogue import POOL_FUNCTIONS

from . import (  # noqa: F401 - importing a family module registers its functions
    activations,
    arithmetic,
    shape_functions,
)
from .function_registry import FUNCTIONS
from .layer_base import layer_family
from .normalization import NORM_FAMILIES, make_norm
from .pooling import make_pool

__all__ = ["FUNCTIONS"]


def _layer_function(name: str) -> Callable[..., Any]:
    """A functional pool (``F.max_pool2d``...) runs the layer of the same maths."""
    family, n = layer_family(POOL_FUNCTIONS[name])

    def apply(input, **config):
        if family in NORM_FAMILIES:
            return make_norm(family, n, config, {}).apply(input)
        return make_pool(family, n, config).apply(input)

    return apply


for _name in POOL_FUNCTIONS:
    FUNCTIONS[_name] = _layer_function(_name)
