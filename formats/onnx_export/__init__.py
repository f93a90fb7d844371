"""Network IR -> ONNX model (opset 17 or newer).

Initializers are the parameter arrays under their IR names ``layer.array`` (PyTorch
layout; transposes happen in the graph, so the arrays are stored exactly as PyTorch
stores them).  Every ONNX node emitted for a layer carries the metadata
``pkg.petab_sciml.layer`` / ``pkg.petab_sciml.layer_type`` so that an import gives the
same layer ids and types back.  Ops that need the input rank or sizes (unbatched
convolutions, ``transpose``, adaptive pools whose output does not divide the input) ask
ONNX shape inference on the graph built so far, which knows them when the graph inputs
have shapes (``input_shapes``).

Every layer type and catalogue function has one exporter, registered with
:func:`.registry.layer` / :func:`.registry.function` in the module of its family:

===================  ==========================================================
``exporter.py``      the walk over the network, emit helpers, shape inference
``registry.py``      layer type / function -> exporter, and the opset each needs
``linear.py``        Linear, Bilinear, matmul
``conv.py``          Conv1d/2d/3d, ConvTranspose1d/2d/3d
``pooling.py``       MaxPool, AvgPool, LPPool, adaptive pools, functional pools
``normalization.py`` BatchNorm, InstanceNorm, LayerNorm, LocalResponseNorm
``recurrent.py``     LSTM, GRU, RNN
``dropout.py``       Dropout layers
``activations.py``   relu, gelu, softplus, softmax, clamp, ..., PReLU
``arithmetic.py``    add, sub, mul, div, pow, comparisons, where, rounding, unary maths
``reshape.py``       Flatten, flatten, reshape, permute, transpose, squeeze, ...
``indexing.py``      getitem, cat, stack, chunk, flip, pad
``reduce.py``        sum, mean, amax, amin, prod, cumsum
===================  ==========================================================
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from petab_sciml.network import Network

from . import (  # noqa: F401 - importing a family module registers its exporters
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
from .exporter import NETWORK_ID_KEY, export, required_opset
from .registry import MIN_EXPORT_OPSET


def default_parameters(network: Network) -> dict[str, dict[str, np.ndarray]]:
    """PyTorch's default initialisation of ``network`` (torch backend, seed 0)."""
    from petab_sciml.backends.torch import BACKEND

    return BACKEND.get_parameters(BACKEND.build(network, seed=0))


def export_model(network: Network, params: Mapping[str, Mapping[str, Any]] | None = None, *,
                 input_shapes: Mapping[str, Sequence[Any]] | None = None,
                 opset: int | None = None, dtype: str = "float32") -> Any:
    """The ONNX ``ModelProto`` of ``network`` (see :func:`petab_sciml.formats.onnx.write`)."""
    if params is None:
        warnings.warn(f"network {network.id!r}: no parameters given; the ONNX initializers "
                      "hold PyTorch's default initialisation (seed 0)", UserWarning,
                      stacklevel=3)
        params = default_parameters(network)
    needed = required_opset(network)
    if opset is None:
        opset = needed
    if opset < MIN_EXPORT_OPSET:
        raise ValueError(f"opset must be {MIN_EXPORT_OPSET} or newer, got {opset}")
    return export(network, params, input_shapes, int(opset), dtype)


__all__ = ["export_model", "default_parameters", "MIN_EXPORT_OPSET", "NETWORK_ID_KEY"]
