"""Convert networks between formats (YAML, ONNX, ... any registered format).

Formats are found through :mod:`petab_sciml.plugins` (by extension or by name), so new
formats plug in without changes here.  Conventions for formats that carry weights
(ONNX; the PyTorch formats):

* their module defines ``read_with_parameters(path, **options) -> (network, params)``
  next to ``read`` (``params`` is ``{group: {array: ndarray}}`` in PyTorch layout);
* their ``write`` accepts ``params=`` (and may accept ``input_shapes=``).

Parameters travel as PEtab SciML array files: ``params_out`` receives the weights read
from the source, ``params_in`` supplies (or overrides) weights for a destination that
carries them.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from petab_sciml.errors import PetabSciMLError
from petab_sciml.plugins import NetworkFormat, format_for_path

__all__ = ["ConvertResult", "convert", "carries_parameters", "reader_with_parameters"]


@dataclass
class ConvertResult:
    """What :func:`convert` did."""

    network: Any
    parameters: dict[str, dict[str, Any]] | None
    src_format: str
    dst_format: str
    params_written: Path | None = None
    warnings: list[str] = field(default_factory=list)


def reader_with_parameters(fmt: NetworkFormat) -> Callable[..., Any] | None:
    """The format's ``read_with_parameters`` (a field of the format, or a function of the
    same name in the module that defines its ``read``), or None."""
    fn = getattr(fmt, "read_with_parameters", None)
    if callable(fn):
        return fn
    module = sys.modules.get(getattr(fmt.read, "__module__", ""), None)
    fn = getattr(module, "read_with_parameters", None) if module is not None else None
    return fn if callable(fn) else None


def _accepts(fn: Callable[..., Any] | None, name: str) -> bool:
    if fn is None:
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def carries_parameters(fmt: NetworkFormat) -> tuple[bool, bool]:
    """(reading gives weights, writing stores weights) for ``fmt``."""
    return reader_with_parameters(fmt) is not None, _accepts(fmt.write, "params")


def writes_folder(fmt: NetworkFormat, path: str | os.PathLike) -> bool:
    """Whether ``fmt`` writes ``path`` as a folder (NNEF without an archive extension):
    the format module's ``output_is_folder(path)``, else False."""
    module = sys.modules.get(getattr(fmt.write, "__module__", ""), None)
    fn = getattr(module, "output_is_folder", None) if module is not None else None
    return bool(fn(path)) if callable(fn) else False


def _warn_narrowed(params: Mapping[str, Mapping[str, Any]] | None, dst: Path) -> None:
    """Warn when float64 parameters change by being written as float32, naming the
    largest change."""
    import numpy as np

    worst, where = 0.0, ""
    for group, arrays in (params or {}).items():
        for name, value in arrays.items():
            a = np.asarray(value)
            if a.dtype != np.float64 or a.size == 0:
                continue
            change = float(np.max(np.abs(a.astype(np.float32).astype(np.float64) - a)))
            if change > worst:
                worst, where = change, f"{group}.{name}"
    if worst > 0:
        warnings.warn(f"{dst.name}: float64 parameters written as float32 (largest change "
                      f"{worst:.3g}, in {where}); pass dtype='float64' (--dtype float64) to "
                      "keep them (onnxruntime lacks float64 kernels for some ops, e.g. "
                      "Softplus)", stacklevel=3)


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    src_format: str | None = None,
    dst_format: str | None = None,
    params_out: str | os.PathLike | None = None,
    params_in: str | os.PathLike | None = None,
    trust_code: bool = False,
    net_id: str | None = None,
    input_shapes: Mapping[str, Sequence[int | str | None]] | None = None,
    portable: bool = False,
    force: bool = False,
    confine: bool = False,
    dtype: str | None = None,
) -> ConvertResult:
    """Convert the network file ``src`` to ``dst``.

    Formats come from the extensions unless ``src_format``/``dst_format`` name them.
    ``params_in`` is a PEtab SciML array file whose parameters (for ``net_id``, default
    the network's id) replace those read from ``src``; ``params_out`` receives the
    parameters as a PEtab SciML array file.  ``trust_code`` is needed to read formats
    whose loading runs code from the file.  ``input_shapes`` goes to writers that accept
    it (ONNX: fixes the graph input shapes).  Warnings from reading and writing are
    collected in the result (and not shown); a YAML output that uses our extensions of
    the NN model YAML (constructs the official ``petab_sciml`` reader does not know) adds
    a warning naming them.  With ``portable`` the YAML output holds only the portable
    subset (:mod:`petab_sciml.portable`), or nothing is written and
    :class:`~petab_sciml.errors.NetworkError` names each node without a portable form.

    Outputs are checked before anything is read, and written through
    :mod:`petab_sciml.safe_write`: ``dst`` and ``params_out`` must not be (or resolve to)
    ``src``, ``params_in`` or each other, must not be special files or symlinks, and must
    not exist unless ``force``.  An existing ``params_out`` array file is updated: only
    ``parameters/<net_id>`` is replaced, its other groups are kept.

    ``dtype`` (``float32`` or ``float64``) is the float type of writers that take one
    (ONNX); default float32, with a warning giving the largest change when float64
    parameters are narrowed.

    With ``confine`` the inputs (``src``, every file read through it, ``params_in``)
    must lie in ``src``'s folder once symlinks are resolved; one outside is refused
    before it is opened (:mod:`petab_sciml.confine`).  Outputs are not confined.

    Raises :class:`~petab_sciml.errors.OutputError` for a refused output,
    :class:`~petab_sciml.errors.PetabSciMLError` for unreadable input, an unknown
    format, a destination that cannot be written, or ``params_out`` without parameters.
    """
    from petab_sciml.safe_write import check_output

    src, dst = Path(src), Path(dst)
    fin = format_for_path(src, src_format)
    fout = format_for_path(dst, dst_format)
    if fout.write is None:
        raise PetabSciMLError(f"the {fout.name} format is import-only; choose another "
                              "destination format", file=dst)
    check_output(dst, overwrite=force, inputs=[src, params_in, params_out],
                 folder=writes_folder(fout, dst))
    if params_out is not None:
        check_output(params_out, overwrite=force, inputs=[src, params_in, dst])
    from petab_sciml.confine import confined

    with confined(src.parent if confine else None):
        if not src.is_dir():  # a FIFO or a device would hang or never end in a format reader
            from petab_sciml.safe_read import check_regular_file

            check_regular_file(src, what=f"a {fin.name} network file", limit=None)
    options: dict[str, Any] = {}
    if fin.runs_code:
        options["trust_code"] = trust_code
    if net_id is not None:
        options["net_id"] = net_id
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read_params = reader_with_parameters(fin)
        params: dict[str, dict[str, Any]] | None = None
        with confined(src.parent if confine else None):
            if read_params is not None:
                network, params = read_params(src, **options)
            else:
                network = fin.read(src, **options)
        if params_in is not None:
            from petab_sciml.arrays import load_parameters

            with confined(src.parent if confine else None):
                loaded = load_parameters(params_in, network, strict=False)
            params = {g: dict(a) for g, a in (params or {}).items()}
            for group, arrays in loaded.items():
                params.setdefault(group, {}).update(arrays)
        if portable:
            if fout.name != "yaml":
                raise PetabSciMLError(f"--portable applies to the YAML format, not "
                                      f"{fout.name}", file=dst)
            from petab_sciml.portable import portable_network

            network = portable_network(network)
        elif fout.name == "yaml":
            from petab_sciml.portable import portability_problems

            problems = portability_problems(network)
            if problems:
                warnings.warn(f"{dst.name} uses petab-sciml extensions of the NN model YAML "
                              f"that the official petab_sciml reader does not know ("
                              f"{'; '.join(problems[:5])}{' ...' if len(problems) > 5 else ''})"
                              "; convert with --portable to get only the portable subset "
                              "or the list of what has none", stacklevel=2)
        kwargs: dict[str, Any] = {}
        if _accepts(fout.write, "params"):
            kwargs["params"] = params
        if input_shapes is not None and _accepts(fout.write, "input_shapes"):
            kwargs["input_shapes"] = dict(input_shapes)
        if _accepts(fout.write, "overwrite"):
            kwargs["overwrite"] = force
        if _accepts(fout.write, "dtype"):
            kwargs["dtype"] = dtype or "float32"
            if kwargs["dtype"] == "float32":
                _warn_narrowed(params, dst)
        elif dtype is not None:
            raise PetabSciMLError(f"the {fout.name} format takes no dtype; leave it out",
                                  file=dst)
        if params_out is not None and not params:
            raise PetabSciMLError(
                f"no parameters to write: the {fin.name} format carries no weights; pass "
                "a parameter file to read (params_in / --params-in)", file=params_out)
        fout.write(network, dst, **kwargs)
    messages = [str(w.message) for w in caught]
    written = None
    if params_out is not None:
        from petab_sciml.arrays import save_parameters

        save_parameters(params_out, network, params, overwrite=force, inputs_of=[src, dst])
        written = Path(params_out)
    if params_out is None and params and "params" not in kwargs:
        messages.append(f"the {fout.name} format stores no weights: the parameters read from "
                        f"{src.name} were not written (pass a parameter file to write them "
                        "to)")
    return ConvertResult(network, params, fin.name, fout.name, written, messages)
