"""Exceptions raised by petab-sciml.

Every error names *where* the problem is (file, entry) and *what* was expected, so a
user can fix the input without reading a traceback.
"""

from __future__ import annotations


class PetabSciMLError(Exception):
    """Base class of all errors raised for bad input.

    ``file`` is the path of the offending file (or ``None`` for in-memory objects),
    ``entry`` the layer, node, dataset or row inside it.  ``code`` is the validator's
    issue code for this error where it is more specific than the validator's default
    for the file (``LIMIT_ELEMENTS``, ``FILE_NOT_REGULAR``, ...); None otherwise.
    """

    code: str | None = None

    def __init__(self, message: str, *, file: object | None = None, entry: str | None = None,
                 code: str | None = None):
        self.message = message
        self.file = None if file is None else str(file)
        self.entry = entry
        if code is not None:
            self.code = code
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.entry:
            where.append(self.entry)
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class NetworkError(PetabSciMLError):
    """A network description (IR, YAML, ONNX, ...) is malformed."""


class ArrayFileError(PetabSciMLError):
    """A PEtab SciML HDF5 array file has a wrong layout, flag or shape."""


class LimitError(PetabSciMLError):
    """An input exceeds a budget of :mod:`petab_sciml.limits`; ``limit`` names the budget
    (raise it with ``--limit NAME=VALUE``) and ``code`` is its issue code."""

    def __init__(self, message: str, *, code: str, limit: str | None = None,
                 file: object | None = None, entry: str | None = None):
        super().__init__(message, file=file, entry=entry, code=code)
        self.limit = limit


class InputFileError(PetabSciMLError):
    """An input file cannot be read safely: missing, not a regular file (a device, a
    FIFO, a folder), or unreadable."""


class OutputError(PetabSciMLError):
    """An output path is refused before anything is written: it is (or resolves to) an
    input, it exists and overwriting was not allowed, it is a special file or a folder
    where a file is expected (or the reverse), or its folder does not exist."""


class UntrustedCodeError(PetabSciMLError):
    """Loading the file would run code from it (TorchScript, Python files) and trust was
    not given (``trust_code=True`` in the API, ``--trust-code`` on the command line)."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra."""

    def __init__(self, package: str, extra: str):
        super().__init__(
            f"{package} is required for this feature: pip install 'petab-sciml-toolkit[{extra}]'"
        )


def require(module: str, extra: str):
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on environment
        raise MissingExtraError(module, extra) from exc
