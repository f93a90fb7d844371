"""Reading an NNEF model folder (``graph.nnef``, ``graph.quant``, one ``.dat`` file per
variable) within the rules of :mod:`petab_sciml.safe_read`.

``nnef.load_graph`` opens the files itself: a FIFO named ``graph.nnef`` or ``x.dat``
would hang it, a variable label such as ``../../secret`` reads a file outside the model
folder, and a ``.dat`` header's shape is allocated before the data is read.  Here every
file is checked first (a regular file within the size budget, inside the folder and,
under ``--confine``, inside the confined folder), variable files are read through
:func:`~petab_sciml.safe_read.read_bytes` and parsed from memory, so a header can claim
no more data than the file holds.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from petab_sciml.errors import InputFileError, NetworkError

GRAPH_FILE = "graph.nnef"
QUANT_FILE = "graph.quant"


class _Unseekable(io.RawIOBase):
    """The bytes of a variable file, seen by ``nnef.read_tensor`` as a stream: it then
    reads what the header asks for, never more than there is."""

    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


def load_folder_graph(nnef: Any, folder: Path) -> Any:
    """The graph of the NNEF model folder ``folder`` with its variables' data, as
    ``nnef.load_graph(folder)`` gives it.  Raises :class:`NetworkError` naming the file
    for a special file, a file over budget, a variable file outside the folder, or a
    ``.dat`` file whose data disagrees with its header or the graph."""
    from petab_sciml.safe_read import check_regular_file, read_bytes

    graph_file, quant_file = folder / GRAPH_FILE, folder / QUANT_FILE
    try:
        check_regular_file(graph_file, what="an NNEF graph")
        has_quant = os.path.lexists(quant_file)
        if has_quant:
            check_regular_file(quant_file, what="an NNEF quantization file")
    except InputFileError as exc:
        raise NetworkError(exc.message, file=exc.file, code=exc.code) from None
    graph = nnef.parse_file(str(graph_file), str(quant_file) if has_quant else None)
    for operation in graph.operations:
        if operation.name != "variable":
            continue
        label = operation.attribs["label"]
        path = folder / f"{label.lstrip('/')}.dat"   # where nnef.load_graph looks
        # the label as written may not leave the folder (a symlink in it is followed
        # as before, unless reads are confined)
        if not Path(os.path.normpath(path)).is_relative_to(os.path.normpath(folder)):
            raise NetworkError(f"variable {label!r}: its data file {str(path)!r} lies "
                               "outside the model folder", file=folder)
        try:
            data = read_bytes(path, what="an NNEF variable file")
        except InputFileError as exc:
            raise NetworkError(exc.message, file=exc.file, entry=f"variable {label!r}",
                               code=exc.code) from None
        tensor_data = nnef.read_tensor(_Unseekable(data))
        shape = list(operation.attribs["shape"])
        if list(tensor_data.shape) != shape:
            raise NetworkError(f"shape {list(tensor_data.shape)} in the variable file does "
                               f"not match shape {shape} defined in the graph", file=path,
                               entry=f"variable {label!r}")
        name = operation.outputs["output"]
        tensor = graph.tensors[name]
        graph.tensors[name] = nnef.Tensor(tensor.name, tensor.dtype, shape, tensor_data,
                                          tensor.quantization)
    return graph
