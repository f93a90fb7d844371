"""NNEF (Khronos Neural Network Exchange Format) <-> network IR.

Reading (``nnef.load_graph`` on a model folder, a ``graph.nnef`` file or a ``.tgz``
archive of a folder) lifts the NNEF graph:

* ``linear`` -> ``Linear``; ``conv`` / ``deconv`` -> ``ConvNd`` / ``ConvTransposeNd``
  (bias stored as ``[1, C]``; asymmetric padding of ``deconv`` is ``output_padding``);
* ``max_pool`` / ``avg_pool`` -> ``MaxPoolNd`` / ``AvgPoolNd`` (size, stride, padding and
  dilation include the batch and channel dimensions; asymmetric padding is PyTorch's
  ``ceil_mode`` where the output sizes agree; the ``border`` decides
  ``count_include_pad``);
* ``batch_normalization`` -> ``BatchNormNd`` with the statistics as non-trainable
  buffers; ``mean_variance_normalization`` (nnef_tools' fragment) -> ``InstanceNormNd``
  (over the spatial axes) or ``BatchNormNd`` without running statistics (over the batch
  and spatial axes);
* ``prelu`` -> ``PReLU`` where alpha is a variable of one value or one per channel (axis 1),
  else ``where(x < 0, alpha * x, x)``;
* ``reshape`` (0 copies the dimension) -> ``flatten`` / ``reshape``; activations, arithmetic,
  ``sin``, ``cos``, ``sign``, ``erf``, reductions (``max_reduce`` / ``min_reduce`` ->
  ``amax`` / ``amin``; ``axes = []`` reduces nothing), ``transpose``, ``squeeze``,
  ``concat``, ``slice`` (negative strides: ``flip``, then ``getitem`` for part of an axis)
  ... -> catalogue functions; ``max`` / ``min`` -> ``maximum`` / ``minimum`` (``clamp``
  with a number); NNEF broadcasting (trailing singleton dimensions) is made explicit;
* ``gt`` / ``lt`` / ``ge`` / ``le`` / ``eq`` -> the catalogue comparisons (bool tensors);
  ``select`` -> ``where``; ``cast<scalar>`` of a logical value -> ``mul(x, 1.0)``;
  ``or`` / ``and`` of logical values -> ``add`` / ``mul`` (PyTorch's bool arithmetic);
* ``pad`` -> ``pad`` (PyTorch's order, last dimension first) with border ``constant``,
  ``reflect`` or ``replicate`` (``reflect-even`` only where no pad exceeds 1);
* the ``erf`` expansion of GELU and the ``sign * relu(abs)`` identity are recognised.

Names come, in order of preference, from a tensor-mapping JSON as written by
``nnef_tools.convert --tensor-mapping`` (source names such as ``layer1.weight`` and ONNX
scopes such as ``/layer1/Conv_output_0``), from variable labels (torch-to-nnef and our
writer keep module paths: ``layer1.weight``), else from the NNEF tensor names.

Writing gives ``graph.nnef`` plus one ``.dat`` file per array (label ``layer.array``) that
``nnef.load_graph`` reads back. Every layer and function of the catalogue is written, with
standard operations where NNEF has none (``docs/formats.md`` lists how). NNEF has no place
for what is not computation in inference mode (dropout, input ids, layer-vs-function,
constructor arguments as written): the writer also puts a ``petab_sciml.json`` beside the
graph with the IR, which the reader uses while ``graph.nnef`` is unchanged (its SHA-256 is
recorded), so IR -> NNEF -> IR is identical. Other NNEF tools ignore that file.

nnef (and torch, for default parameters and shapes when writing) are imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.errors import NetworkError, PetabSciMLError, require
from petab_sciml.formats.nnef_export import (
    Writer,
    default_input_shapes,
    default_parameters,
    node_shapes,
)
from petab_sciml.formats.nnef_import import lift_graph
from petab_sciml.network import Network
from petab_sciml.plugins import NetworkFormat

__all__ = ["read", "read_with_parameters", "write", "FORMAT", "METADATA_FILE"]

METADATA_FILE = "petab_sciml.json"
GRAPH_FILE = "graph.nnef"

_ARCHIVES = (".tgz", ".tar.gz", ".tar")


# ============================================================================= reading
@contextmanager
def _model_folder(path: Path):
    """The model folder of ``path`` (a folder, a graph.nnef file or an archive)."""
    if path.is_dir():
        yield path, True
        return
    from petab_sciml.errors import InputFileError
    from petab_sciml.safe_read import check_regular_file

    try:
        check_regular_file(path, what="an NNEF model (folder, graph.nnef or .tgz archive)")
    except InputFileError as exc:
        raise NetworkError(exc.message, file=path, code=exc.code) from None
    name = path.name.lower()
    if name.endswith(_ARCHIVES) or (name.endswith(".nnef") and _is_tarfile(path)):
        tmp = Path(tempfile.mkdtemp(prefix="petab_sciml_nnef_"))
        try:
            _extract(path, tmp)
            graphs = sorted(tmp.rglob(GRAPH_FILE))
            if not graphs:
                raise NetworkError(f"the archive holds no {GRAPH_FILE}", file=path)
            from petab_sciml.confine import confined, confinement_root

            # the members were extracted into our own folder: --confine now means it
            with confined(tmp if confinement_root() is not None else None):
                yield graphs[0].parent, True
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    yield path, False


def _is_tarfile(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except (OSError, EOFError, zlib.error):
        return False


def _extract(archive: Path, target: Path) -> None:
    """Extract regular files and folders only, never outside ``target``, each member
    within ``max_archive_member_bytes`` (all of them within 4x that)."""
    from petab_sciml import limits

    budget = limits.current().max_archive_member_bytes
    root = target.resolve()
    total = 0
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                entry = f"member {member.name!r}"
                dest = (root / member.name).resolve()
                if dest == root and member.isdir():
                    continue
                if not dest.is_relative_to(root) or dest == root:
                    raise NetworkError("archive member points outside the archive",
                                       file=archive, entry=entry)
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise limits.LimitError(
                        f"archive member is {_member_kind(member)}; only regular files and "
                        "folders are read", code="LIMIT_ARCHIVE_MEMBER", file=archive,
                        entry=entry)
                limits.check("max_archive_member_bytes", "archive member size in bytes",
                             member.size, file=archive, entry=entry)
                total += member.size
                if total > 4 * budget:
                    raise limits.exceeded("max_archive_member_bytes", "archive members' total "
                                          "size in bytes (allowed: 4x the limit)", total,
                                          file=archive, entry=entry)
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                with open(dest, "xb") as out:
                    if src is not None:
                        shutil.copyfileobj(src, out, 1 << 20)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise NetworkError(f"not a readable archive (truncated or damaged?): "
                           f"{str(exc) or type(exc).__name__}", file=archive) from None


def _member_kind(member: tarfile.TarInfo) -> str:
    if member.issym() or member.islnk():
        return f"a link to {member.linkname!r}"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return "not a regular file"


def _load_graph(nnef: Any, folder: Path, is_folder: bool, source: Path) -> Any:
    try:
        if is_folder:
            from petab_sciml.formats.nnef_variables import load_folder_graph

            return load_folder_graph(nnef, folder)
        return nnef.load_graph(str(folder))
    except (nnef.Error, OSError, ValueError) as exc:
        raise NetworkError(f"cannot read the NNEF model: {exc}", file=source) from None


def _infer_shapes(nnef: Any, graph: Any) -> dict[str, list[int]]:
    from nnef import shapes as nnef_shapes

    custom = {
        "erf": nnef_shapes.unary_shape,
        "mean_variance_normalization": lambda input, *args, **kwargs: input,
    }
    try:
        nnef.infer_shapes(graph, custom_shapes=custom)
    except Exception:  # noqa: BLE001 - shapes are a help, not a requirement: keep those known
        pass
    shapes = {name: list(t.shape) for name, t in graph.tensors.items() if t.shape is not None}
    for op in graph.operations:
        if op.name == "external":
            shapes.setdefault(str(op.outputs["output"]), list(op.attribs["shape"]))
    return shapes


def _read_metadata(folder: Path) -> dict[str, Any] | None:
    meta_file = folder / METADATA_FILE
    graph_file = folder / GRAPH_FILE
    if not (meta_file.is_file() and graph_file.is_file()):
        return None
    from petab_sciml.safe_read import read_bytes

    try:
        meta = json.loads(read_bytes(meta_file, limit="max_yaml_bytes"))
        digest = hashlib.sha256(read_bytes(graph_file)).hexdigest()
    except (PetabSciMLError, ValueError, RecursionError):
        return None
    if not isinstance(meta, dict) or meta.get("graph_sha256") != digest:
        return None  # the graph was edited after we wrote it: lift it instead
    return meta


def _load_mapping(tensor_mapping: Any, folder: Path | None) -> dict[str, str] | None:
    if isinstance(tensor_mapping, Mapping):
        return dict(tensor_mapping)
    path = Path(tensor_mapping) if tensor_mapping else None
    if path is None and folder is not None and (folder / "tensor_mapping.json").is_file():
        path = folder / "tensor_mapping.json"
    if path is None:
        return None
    from petab_sciml.safe_read import read_bytes

    try:
        data = json.loads(read_bytes(path, limit="max_yaml_bytes"))
    except PetabSciMLError as exc:
        raise NetworkError(f"cannot read the tensor mapping: {exc.message}", file=path,
                           code=exc.code) from None
    except (ValueError, RecursionError) as exc:
        raise NetworkError(f"cannot read the tensor mapping: {exc}", file=path) from None
    if not isinstance(data, Mapping):
        raise NetworkError("a tensor mapping must be a JSON object of source name -> NNEF "
                           "tensor name", file=path)
    return dict(data)


def read_with_parameters(
    path: str | os.PathLike,
    *,
    tensor_mapping: str | os.PathLike | Mapping[str, str] | None = None,
    net_id: str | None = None,
    input_ids: Sequence[str] | None = None,
    metadata: bool = True,
    trust_code: bool = False,
    values: bool = True,
) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    """``(network, {group: {array: ndarray}})`` of an NNEF model (folder, ``graph.nnef``
    or ``.tgz``).  ``tensor_mapping`` is a ``nnef_tools.convert --tensor-mapping`` JSON
    (default: ``tensor_mapping.json`` in the folder); ``metadata=False`` ignores our
    ``petab_sciml.json`` and always lifts the graph.  NNEF runs no code (``trust_code``
    is accepted and ignored).  ``values=False`` accepts variables without ``.dat`` files
    (their arrays are then zeros)."""
    nnef = require("nnef", "nnef")
    source = Path(path)
    with _model_folder(source) as (folder, is_folder):
        graph = _load_graph(nnef, folder, is_folder, source)
        meta = _read_metadata(folder) if (metadata and is_folder) else None
        mapping = _load_mapping(tensor_mapping, folder if is_folder else None)
        if meta is not None:
            return _from_metadata(meta, graph, source, net_id, input_ids)
        shapes = _infer_shapes(nnef, graph)
    return lift_graph(nnef, graph, source, shapes, mapping, net_id=net_id,
                      input_ids=input_ids, values=values)


def _from_metadata(meta: Mapping[str, Any], graph: Any, source: Path, net_id: str | None,
                   input_ids: Sequence[str] | None
                   ) -> tuple[Network, dict[str, dict[str, np.ndarray]]]:
    from petab_sciml.formats.yaml import network_from_dict

    data = dict(meta["network"])
    if net_id is not None:
        data["nn_model_id"] = net_id
    if input_ids is not None:
        data["inputs"] = [{"input_id": i} for i in input_ids]
    network = network_from_dict(data, source=source)
    by_label: dict[str, np.ndarray] = {}
    for op in graph.operations:
        if op.name == "variable":
            tensor = graph.tensors[op.outputs["output"]]
            if tensor.data is not None:
                by_label[op.attribs["label"]] = np.asarray(tensor.data)
    labels = meta.get("labels", {})
    params: dict[str, dict[str, np.ndarray]] = {}
    for group, arrays in network.parameter_arrays().items():
        for array, info in arrays.items():
            key = f"{group}.{array}"
            label = labels.get(key, key)
            if label in by_label:
                value = by_label[label]
                if value.size != info.size:
                    raise NetworkError(f"variable {label!r} has {value.size} values; the "
                                       f"network needs shape {info.shape}", file=source)
                params.setdefault(group, {})[array] = value.reshape(info.shape).astype(
                    info.dtype or value.dtype)
            elif not info.trainable:
                params.setdefault(group, {})[array] = np.zeros(info.shape, info.dtype or
                                                               np.float32)
    return network, params


def read(path: str | os.PathLike, **options: Any) -> Network:
    """The network IR of an NNEF model (see :func:`read_with_parameters`)."""
    options.setdefault("values", False)
    network, _ = read_with_parameters(path, **options)
    return network


# ============================================================================= writing


def write(network: Network, path: str | os.PathLike, *,
          params: Mapping[str, Mapping[str, Any]] | None = None,
          input_shapes: Mapping[str, Sequence[int]] | Sequence[Sequence[int]] | None = None,
          metadata: bool = True, overwrite: bool = True) -> None:
    """Write ``network`` as an NNEF model folder (or ``.tgz`` archive) at ``path``.

    ``params`` (``{group: {array: value}}``) default to PyTorch's initial values (seed 0).
    ``input_shapes`` (by input id, or in input order; NNEF inputs have fixed shapes)
    default to the smallest shapes the network accepts.  NNEF computes in inference mode:
    dropout is dropped, BatchNorm uses its running statistics.

    The whole model is written elsewhere and swapped in when complete
    (:func:`petab_sciml.safe_write.staged_output`): an interrupted write leaves an
    existing model (or archive) as it was.  An existing folder is replaced only if it
    is an NNEF model folder holding nothing but the model's own files (``graph.nnef``,
    the ``.dat`` files it names, ``graph.quant``, ``petab_sciml.json``,
    ``tensor_mapping.json``); anything else in it is reported and nothing is written.
    ``overwrite`` False refuses an existing output.
    """
    from petab_sciml.safe_write import check_output, staged_output

    nnef = require("nnef", "nnef")
    path = Path(path)
    archive = not output_is_folder(path.name)
    check_output(path, overwrite=overwrite, folder=not archive)
    if not archive and path.is_dir():
        _check_replaceable(path)
    params = {g: {a: np.asarray(v) for a, v in arrays.items()}
              for g, arrays in (params or default_parameters(network)).items()}
    if input_shapes is None:
        shapes_in = default_input_shapes(network, params)
    elif isinstance(input_shapes, Mapping):
        try:
            shapes_in = [list(input_shapes[i]) for i in network.inputs]
        except KeyError as exc:
            raise NetworkError(f"input_shapes has no shape for input {exc.args[0]!r}",
                               file=network.source) from None
    else:
        shapes_in = [list(s) for s in input_shapes]
    if len(shapes_in) != len(network.inputs):
        raise NetworkError(f"input_shapes gives {len(shapes_in)} shape(s) for "
                           f"{len(network.inputs)} input(s)", file=network.source)
    try:
        shapes = node_shapes(network, params, shapes_in)
    except NetworkError:
        raise
    except Exception as exc:
        raise NetworkError(f"the network does not run on inputs of shapes {shapes_in}: "
                           f"{type(exc).__name__}: {exc}", file=network.source) from None
    writer = Writer(network, params, shapes, shapes_in)
    text = writer.run(network.id)
    with staged_output(path, overwrite=overwrite, folder=not archive) as staged:
        folder = staged.with_name(staged.name + ".model") if archive else staged
        folder.mkdir()
        _write_folder(nnef, network, folder, text, writer, shapes_in, metadata)
        if archive:
            with tarfile.open(staged, "w:gz") as tar:
                for item in sorted(folder.iterdir()):
                    tar.add(item, arcname=item.name)


def _write_folder(nnef: Any, network: Network, folder: Path, text: str, writer: Any,
                  shapes_in: list, metadata: bool) -> None:
    (folder / GRAPH_FILE).write_bytes(text.encode("utf-8"))
    for label, data in writer.files.items():
        target = folder / f"{label}.dat"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as handle:
            nnef.write_tensor(handle, np.ascontiguousarray(data))
    if metadata:
        from petab_sciml.formats.yaml import network_to_dict

        meta = {
            "petab_sciml_nnef": 1,
            "graph_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "network": network_to_dict(network),
            "labels": {k.split("@")[0]: k.split("@")[0] for k in writer.variables},
            "input_shapes": shapes_in,
        }
        (folder / METADATA_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    try:
        nnef.load_graph(str(folder))
    except nnef.Error as exc:  # pragma: no cover - a writer bug
        raise NetworkError(f"internal: the written NNEF does not parse: {exc}",
                           file=folder) from None


def output_is_folder(path: str | os.PathLike) -> bool:
    """True unless ``path`` names an archive (``.tgz``, ``.tar.gz``): the writer then
    writes a model folder."""
    return not str(path).lower().endswith((".tgz", ".tar.gz"))


_MODEL_FILES = (GRAPH_FILE, "graph.quant", METADATA_FILE, "tensor_mapping.json")
_LABEL = re.compile(r"""\blabel\s*=\s*(['"])(.*?)\1""")


def _check_replaceable(folder: Path) -> None:
    """Refuse to replace ``folder`` unless it is empty or an NNEF model folder holding
    only the model's own files (so that replacing it loses nothing else)."""
    from petab_sciml.safe_read import read_text

    entries = [p for p in folder.rglob("*") if not p.is_dir() or p.is_symlink()]
    if not entries:
        return
    graph = folder / GRAPH_FILE
    if not graph.is_file() or graph.is_symlink():
        raise NetworkError("the folder exists and is not an NNEF model folder (no "
                           f"{GRAPH_FILE}); refusing to replace it", file=folder)
    try:
        labels = {m.group(2) for m in _LABEL.finditer(read_text(graph))}
    except PetabSciMLError as exc:
        raise NetworkError(f"cannot read the existing {GRAPH_FILE}: {exc.message}; refusing "
                           "to replace the folder", file=folder) from None
    own = set(_MODEL_FILES) | {f"{label}.dat" for label in labels}
    foreign = sorted(str(p.relative_to(folder)) for p in entries
                     if p.is_symlink() or not p.is_file()
                     or p.relative_to(folder).as_posix() not in own)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise NetworkError(f"the folder holds files that are not part of its NNEF model "
                           f"({shown}); refusing to replace it (move them, or write to "
                           "another folder)", file=folder)


FORMAT = NetworkFormat(name="nnef", extensions=(".nnef", ".tgz"), read=read, write=write,
                       runs_code=False)
