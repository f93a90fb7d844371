"""The PEtab SciML ``format: pytorch`` network: a Python file holding a ``torch.nn.Module``.

The file defines a ``torch.nn.Module`` subclass named as the network id, constructible
without arguments.  Reading imports the file, instantiates that class (under a fixed
random seed, without touching the global RNG), traces it with ``torch.fx``
(:func:`petab_sciml.formats.torch_fx.network_from_module`) and returns the IR.

Importing a Python file runs it, so reading refuses unless trust is given
(``trust_code=True`` in the API, ``--trust-code`` on the command line): see
:func:`check_trust`, which the TorchScript format shares.  Nothing is imported, opened
or executed before that check.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from petab_sciml.errors import NetworkError, UntrustedCodeError, require
from petab_sciml.network import ID_PATTERN
from petab_sciml.plugins import NetworkFormat

__all__ = ["UntrustedCodeError", "check_trust", "read", "read_with_parameters", "load_module",
           "FORMAT"]



def check_trust(path: str | os.PathLike, *, trust_code: bool, what: str) -> None:
    """Refuse to go on unless ``trust_code`` is True (checked before the file is touched).

    ``what`` says what the file is ("Python file", "TorchScript archive").
    """
    if trust_code is True:
        return
    raise UntrustedCodeError(
        f"refusing to load this {what}: loading it runs code from the file (arbitrary "
        "Python, or TorchScript and pickled objects), which can do anything your account "
        "can do. Load it only if you trust its source: pass trust_code=True in the Python "
        "API, or --trust-code on the petab-sciml command line.",
        file=path,
    )


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    stem = re.sub(r"\W", "_", path.stem)
    return f"_petab_sciml_network_{stem}_{digest}"


def _import_file(path: Path) -> Any:
    """Import ``path`` as a fresh module (runs the file)."""
    import importlib.util

    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NetworkError("cannot import this file as a Python module", file=path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, typing and torch.fx look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise NetworkError(f"importing the file failed: {type(exc).__name__}: {exc}",
                           file=path) from exc
    return module


def _module_classes(torch: Any, py_module: Any) -> dict[str, type]:
    return {
        name: obj for name, obj in vars(py_module).items()
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module)
        and obj.__module__ == py_module.__name__
    }


def load_module(path: str | os.PathLike, net_id: str | None = None, *,
                trust_code: bool = False, seed: int = 0) -> tuple[Any, str]:
    """Import the file and instantiate the class named ``net_id`` (default: the only
    ``torch.nn.Module`` subclass the file defines).  Returns ``(module, net_id)``.

    The constructor runs under ``torch.manual_seed(seed)`` inside a forked RNG, so the
    initial parameters are reproducible and the caller's random state is untouched.
    """
    path = Path(path)
    check_trust(path, trust_code=trust_code, what="Python file")
    torch = require("torch", "torch")
    if not path.is_file():
        raise NetworkError("no such file", file=path)
    py_module = _import_file(path)
    classes = _module_classes(torch, py_module)
    if net_id is None:
        if len(classes) != 1:
            found = ", ".join(sorted(classes)) or "none"
            raise NetworkError(f"cannot tell which class is the network: pass the network id "
                               f"(torch.nn.Module subclasses defined here: {found})", file=path)
        net_id = next(iter(classes))
    cls = getattr(py_module, net_id, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        found = ", ".join(sorted(classes)) or "none"
        raise NetworkError(f"the file defines no torch.nn.Module subclass named {net_id!r} "
                           f"(the network id); found: {found}", file=path, entry=net_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            instance = cls()
        except Exception as exc:
            raise NetworkError(f"{net_id}() failed (the class must be constructible without "
                               f"arguments): {type(exc).__name__}: {exc}", file=path,
                               entry=net_id) from exc
    return instance, net_id


def read_with_parameters(
    path: str | os.PathLike,
    *,
    trust_code: bool = False,
    net_id: str | None = None,
    input_ids: Sequence[str] | None = None,
    seed: int = 0,
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``(network, {layer: {array: ndarray}})``: the IR of the class ``net_id`` of the file
    and its constructor's initial arrays (under ``seed``), in IR naming."""
    from petab_sciml.formats.torch_fx import network_from_module, parameters_from_module

    path = Path(path)
    module, net_id = load_module(path, net_id, trust_code=trust_code, seed=seed)
    if not ID_PATTERN.match(net_id):
        raise NetworkError(f"network id must be a valid PEtab id, got {net_id!r}", file=path)
    try:
        network = network_from_module(module, net_id, input_ids=input_ids)
    except NetworkError as exc:
        raise NetworkError(exc.message, file=path, entry=exc.entry) from None
    params = parameters_from_module(module, network)
    return network, params


def read(path: str | os.PathLike, *, trust_code: bool = False, net_id: str | None = None,
         input_ids: Sequence[str] | None = None, **options: Any) -> Any:
    """The network IR of the class ``net_id`` (default: the only module class) of a Python
    file.  Refuses (:class:`UntrustedCodeError`) unless ``trust_code=True``."""
    network, _ = read_with_parameters(path, trust_code=trust_code, net_id=net_id,
                                      input_ids=input_ids, **options)
    return network


FORMAT = NetworkFormat(name="pytorch", extensions=(".py",), read=read, write=None,
                       runs_code=True)
