"""ONNX network format: import any ONNX model into a trainable IR, and export back.

Reading (:func:`import_onnx`) lifts node patterns to catalogue layers (Gemm / MatMul + Add
/ Transpose + MatMul -> Linear, Conv -> ConvNd, BatchNormalization -> BatchNormNd, pools,
Flatten, Dropout, ...) and imports everything else as generic catalogue functions with
the initializers as free parameters, so any supported model runs and trains.  Every
initializer becomes a named array: a layer's ``weight``/``bias``, a buffer where its role
says so (BatchNorm running statistics), or a free parameter ``group.array``.  Layer ids
come from the exporter's metadata (``pkg.torch.onnx.name_scopes``) or the initializer
names (``layer1.weight`` -> layer ``layer1``); the map from ONNX initializer to IR array
is kept (:attr:`OnnxImport.names`, :meth:`OnnxImport.format_names`).

API for a format that carries weights (used by :mod:`petab_sciml.convert`):

* ``read(path) -> Network`` (the :class:`~petab_sciml.plugins.NetworkFormat` contract),
* ``read_with_parameters(path) -> (Network, {layer: {array: ndarray}})``,
* ``write(network, path, *, params=None, input_shapes=None, opset=None, dtype="float32")``.

onnx is imported lazily: importing this module is cheap.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from petab_sciml.errors import NetworkError, require
from petab_sciml.plugins import NetworkFormat

from .onnx_export import MIN_EXPORT_OPSET as EXPORT_OPSET
from .onnx_export import NETWORK_ID_KEY
from .onnx_import import SUPPORTED_OPS, NameEntry, OnnxImport, import_model


def _load(src: Any, source: str | None) -> Any:
    onnx = require("onnx", "onnx")
    if isinstance(src, onnx.ModelProto):
        return src
    if isinstance(src, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(src))
        except Exception as exc:
            raise NetworkError(f"not an ONNX model: {exc}") from None
    from petab_sciml.errors import InputFileError
    from petab_sciml.safe_read import check_regular_file

    path = Path(src)
    try:
        check_regular_file(path, what="an ONNX model", limit=None)
    except InputFileError as exc:
        raise NetworkError(exc.message, file=path, code=exc.code) from None
    try:
        return onnx.load(str(path))
    except Exception as exc:
        raise NetworkError(f"cannot read ONNX model: {str(exc).splitlines()[0]}",
                           file=path) from None


def import_onnx(src: str | os.PathLike | bytes | Any, *, net_id: str | None = None
                ) -> OnnxImport:
    """Import an ONNX model (a path, the serialized bytes or an ``onnx.ModelProto``).

    Returns an :class:`OnnxImport` with the network, its parameters
    ``{group: {array: ndarray}}`` (PyTorch layout), the initializer name map and the
    warnings (weights fused at export, shared initializers).  ``net_id`` (the network id)
    defaults to the id the model records (``petab_sciml.network_id`` in its metadata, as
    our export writes it), else the file name, else the graph name.  Raises
    :class:`~petab_sciml.errors.NetworkError` naming the op type, node, opset and the
    supported ops for anything unsupported.
    """
    source = None if isinstance(src, (bytes, bytearray)) or not isinstance(
        src, (str, os.PathLike)) else str(src)
    model = _load(src, source)
    from .onnx_import import _sanitize

    recorded = {p.key: p.value for p in model.metadata_props}.get(NETWORK_ID_KEY)
    if net_id is None and recorded:
        net_id = _sanitize(recorded, "net_")
    if net_id is None and source is not None:
        net_id = _sanitize(Path(source).stem, "net_")
    return import_model(model, source=source, network_id=net_id)


def read(path: str | os.PathLike, *, net_id: str | None = None, **options: Any) -> Any:
    """Read an ONNX model as a network (see :func:`read_with_parameters` for the weights)."""
    return import_onnx(path, net_id=net_id).network


def read_with_parameters(path: str | os.PathLike, *, net_id: str | None = None,
                         **options: Any) -> tuple[Any, dict[str, dict[str, Any]]]:
    """Read an ONNX model: ``(network, {group: {array: ndarray}})``.

    Import warnings (weights fused at export, shared initializers) are issued as
    :class:`UserWarning`.
    """
    import warnings

    result = import_onnx(path, net_id=net_id)
    for message in result.warnings:
        warnings.warn(f"{path}: {message}", UserWarning, stacklevel=2)
    return result.network, result.parameters


def to_onnx(network: Any, params: Mapping[str, Mapping[str, Any]] | None = None, *,
            input_shapes: Mapping[str, Sequence[int | str | None]] | None = None,
            opset: int | None = None, dtype: str = "float32") -> Any:
    """Export a network as an ``onnx.ModelProto`` (see :func:`write`)."""
    from .onnx_export import export_model

    return export_model(network, params, input_shapes=input_shapes, opset=opset, dtype=dtype)


def write(network: Any, path: str | os.PathLike, *,
          params: Mapping[str, Mapping[str, Any]] | None = None,
          input_shapes: Mapping[str, Sequence[int | str | None]] | None = None,
          opset: int | None = None, dtype: str = "float32", overwrite: bool = True) -> None:
    """Write ``network`` as an ONNX model (opset 17 or newer) that passes
    ``onnx.checker.check_model(full_check=True)``.

    Initializers are the parameter arrays, named ``layer.array``.  Without ``params`` the
    arrays are PyTorch's default initialisation (torch backend, seed 0) and a warning says
    so.  ``input_shapes`` (``{input_id: dims}``, a dim may be a name or None for a
    dynamic size) fixes the graph inputs' shapes; it is needed when an op depends on the
    input rank (unbatched convolutions and pools, ``transpose``, implicit ``softmax``
    dims, adaptive pools whose output does not divide the input).  The file is written
    through :func:`petab_sciml.safe_write.staged_output` (``overwrite`` False refuses an
    existing file).
    """
    from petab_sciml.safe_write import check_output, write_bytes

    require("onnx", "onnx")
    check_output(path, overwrite=overwrite)
    model = to_onnx(network, params, input_shapes=input_shapes, opset=opset, dtype=dtype)
    write_bytes(path, model.SerializeToString(), overwrite=overwrite)


FORMAT = NetworkFormat(name="onnx", extensions=(".onnx",), read=read, write=write,
                       runs_code=False)

__all__ = ["FORMAT", "EXPORT_OPSET", "NameEntry", "OnnxImport", "SUPPORTED_OPS",
           "import_onnx", "read", "read_with_parameters", "to_onnx", "write"]
