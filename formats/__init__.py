"""Network file formats (installed as ``petab_sciml.formats``), one module per format.

Each format module exposes ``FORMAT``, a :class:`petab_sciml.plugins.NetworkFormat`,
registered under the ``petab_sciml.formats`` entry-point group: ``yaml``, ``onnx``,
``nnef``, ``torchscript``, ``pytorch_file`` and ``equinox_file``.  The others hold their
machinery:

=====================  ============================================================
``onnx_import/``       ONNX -> IR, one module per op family behind ``@handles``
``onnx_export/``       IR -> ONNX, one module per op family behind ``@layer`` /
                       ``@function``
``nnef_import/``       NNEF -> IR, one module per operation family behind ``@handles``
``nnef_export/``       IR -> NNEF, one module per op family behind ``@layer`` /
                       ``@function``
``op_registry.py``     the registry class of the exporters and the NNEF reader
``export_common.py``   what both exporters share (functional pools as layers, ...)
``graph_building.py``  what the NNEF and TorchScript readers share (tensor values,
                       node emission, pruning)
``torch_fx*.py``       ``torch.nn.Module`` -> IR by ``torch.fx`` tracing
``torchscript_*.py``   the TorchScript reader's graph values, aten ops and layers
``onnx_budget.py``     bounded ONNX shape inference and constant folding
=====================  ============================================================

Adding an op to a format is one function in the family module of that direction.
"""
