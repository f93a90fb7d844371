"""NNEF graph -> network IR: the lifter behind :func:`petab_sciml.formats.nnef.read`.

Each NNEF operation has one handler, registered with :func:`.registry.handles` in the
module of its family, that turns it into layers (where a pattern matches: ``linear`` ->
``Linear``, ``conv`` -> ``ConvNd`` ...) or catalogue functions, with variables claimed
as layer arrays or kept as free parameters:

====================  ==========================================================
``lifter.py``         the walk over the operations, values, naming, layers, result
``registry.py``       NNEF operation -> handler
``values.py``         external, variable, constant, copy, cast
``patterns.py``       relu, abs, sign, erf (and the patterns they start)
``arithmetic.py``     unary maths, add ... max, rcp, sqr, rsqrt, comparisons, select
``activations.py``    elu, leaky_relu, selu, softmax, clamp, prelu
``linear.py``         linear, matmul
``conv.py``           conv, deconv
``pooling.py``        max_pool, avg_pool
``normalization.py``  batch_normalization, mean_variance_normalization
``reshape.py``        reshape, squeeze, unsqueeze, transpose
``indexing.py``       concat, stack, slice, pad
``reduce.py``         mean/sum/max/min_reduce
====================  ==========================================================
"""

from __future__ import annotations

from . import (  # noqa: F401 - importing a family module registers its handlers
    activations,
    arithmetic,
    conv,
    indexing,
    linear,
    normalization,
    patterns,
    pooling,
    reduce,
    reshape,
    values,
)
from .lifter import lift_graph

__all__ = ["lift_graph"]
