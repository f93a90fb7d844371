"""ONNX model -> network IR: layers where a pattern matches, catalogue functions elsewhere.

Every ONNX node is converted in graph order by the converter registered for its op type
(:mod:`.registry`).  Patterns with a PyTorch layer behind them (Gemm, MatMul + Add,
Transpose + MatMul, Conv, ConvTranspose, BatchNormalization, pools, LRN, LSTM, GRU, RNN,
Flatten, Dropout, ...) become layers of the catalogue whose arrays are the initializers
(in PyTorch layout); everything else becomes ``call_function`` nodes of catalogue
functions, with initializers as free parameters read by ``get_attr`` nodes.  Values that
do not depend on the network inputs (Constant, Shape of a static shape, Gather/Concat/...
of those) are folded at import.

One module per op family, named after what it converts:

=================  ==========================================================
``importer.py``    the walk over the graph, shapes, naming, layers, folding
``values.py``      the kinds of values converters pass around, the result
``registry.py``    op type -> converter
``activations.py`` Relu..., Elu, LeakyRelu, Selu, Gelu, Clip, Softmax, Hardmax, PRelu
``arithmetic.py``  Add, Sub, Mul, Div, Pow, Sum/Mean/Max/Min, comparisons, Where
``linear.py``      Gemm, MatMul, Transpose, Einsum (Linear layers)
``conv.py``        Conv, ConvTranspose (``computed_conv.py``: computed weights)
``deform_conv.py`` DeformConv (bilinear taps at computed offsets)
``linear_attention.py`` LinearAttention (unrolled over the sequence)
``normalization.py`` BatchNormalization, InstanceNormalization, LayerNormalization, LRN
``patches.py``     Col2Im
``pooling.py``     MaxPool, AveragePool, LpPool, global pools
``grid_sample.py`` GridSample, AffineGrid (sampling at computed coordinates)
``recurrent.py``   LSTM, GRU, RNN
``dropout.py``     Dropout
``reshape.py``     Flatten, Reshape, Squeeze, Unsqueeze, DepthToSpace, SpaceToDepth
``indexing.py``    Concat, Split, Slice, Gather, GatherND, Tile, Expand, Pad
``reduce.py``      Reduce*
``rotary.py``      RotaryEmbedding
``resize.py``      Resize, Upsample (constant interpolation matrices per axis)
``scan.py``        Scan (unrolled over the static sequence)
``scatter.py``     GatherElements, ScatterElements, ScatterND, Scatter (constant indices)
``selection.py``   OneHot, Compress, ReverseSequence, CumProd, TensorScatter
``constants.py``   Identity, Cast, Constant, ops folded on constants only
=================  ==========================================================
"""

from __future__ import annotations

from typing import Any

from . import (  # noqa: F401 - importing a family module registers its converters
    activations,
    arithmetic,
    constants,
    conv,
    deform_conv,
    dropout,
    grid_sample,
    indexing,
    linear,
    linear_attention,
    normalization,
    patches,
    pooling,
    recurrent,
    reduce,
    reshape,
    resize,
    rotary,
    scan,
    scatter,
    selection,
)
from .importer import META_LAYER, META_LAYER_TYPE, MIN_OPSET, _Importer
from .registry import HANDLERS
from .values import NameEntry, OnnxImport, _sanitize

SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(HANDLERS))
"""ONNX op types the importer knows (some only on constants or inside patterns)."""


def import_model(model: Any, *, source: str | None = None, network_id: str | None = None
                 ) -> OnnxImport:
    """Import an ``onnx.ModelProto``; see :func:`petab_sciml.formats.onnx.import_onnx`."""
    return _Importer(model, source=source, network_id=network_id).run()


__all__ = ["NameEntry", "OnnxImport", "SUPPORTED_OPS", "import_model", "META_LAYER",
           "META_LAYER_TYPE", "MIN_OPSET", "_sanitize"]
