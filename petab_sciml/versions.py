"""The versions of Python and of the libraries the toolkit runs on, read from the
installed distributions' metadata (nothing is imported, so this works without torch or
jax and costs milliseconds)."""

from __future__ import annotations

import platform
from importlib import metadata

DISTRIBUTIONS = (
    "petab-sciml-toolkit", "numpy", "jax", "jaxlib", "equinox", "diffrax", "optax",
    "torch", "torchdiffeq", "python-libsbml", "sympy", "onnx", "onnxruntime", "h5py",
    "petab", "distributed", "pypesto",
)
"""The distributions reported, in this order."""


def installed_versions() -> dict[str, str | None]:
    """``{"python": "3.12.1", "jax": "0.12.0", "torch": None, ...}``: each of
    :data:`DISTRIBUTIONS` with its installed version, None where it is not installed."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions
