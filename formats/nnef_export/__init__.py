"""Network IR -> NNEF text: the writer behind :func:`petab_sciml.formats.nnef.write`.

Shapes of every value are computed by running the network in PyTorch once (NNEF inputs
have fixed shapes); each IR node becomes one or more NNEF operations, written by the
writer registered for its layer type or function (:mod:`.registry`) in the module of
its family:

===================  ==========================================================
``writer.py``        the walk over the network, emit helpers, the graph text
``registry.py``      layer type / function -> writer
``shapes.py``        value shapes (a PyTorch run), default shapes and parameters
``fragments.py``     fragments declared for operations NNEF lacks (erf, MVN)
``linear.py``        Linear, Bilinear, matmul
``conv.py``          Conv1d/2d/3d, ConvTranspose1d/2d/3d
``pooling.py``       MaxPool, AvgPool, LPPool, adaptive pools, functional pools
``normalization.py`` BatchNorm, InstanceNorm, LayerNorm, LocalResponseNorm
``recurrent.py``     LSTM, GRU, RNN (unrolled)
``dropout.py``       Dropout layers (dropped)
``activations.py``   relu, gelu, softplus, softmax, clamp, ..., PReLU
``arithmetic.py``    add, sub, mul, div, pow, comparisons, where, rounding, unary maths
``reshape.py``       Flatten, flatten, reshape, permute, transpose, squeeze, ...
``indexing.py``      getitem, cat, stack, chunk, flip, pad
``reduce.py``        sum, mean, amax, amin, prod, cumsum
===================  ==========================================================
"""

from __future__ import annotations

from . import (  # noqa: F401 - importing a family module registers its writers
    activations,
    arithmetic,
    conv,
    dropout,
    indexing,
    linear,
    normalization,
    pooling,
    recurrent,
    reduce,
    reshape,
)
from .shapes import default_input_shapes, default_parameters, node_shapes
from .writer import _Writer as Writer

__all__ = ["Writer", "default_input_shapes", "default_parameters", "node_shapes"]
