"""petab-sciml: PEtab SciML networks and problems in PyTorch and JAX.

The top-level names are imported lazily so that ``import petab_sciml`` stays cheap and
needs neither torch nor jax.  The names that libpetab-python imports from the official
``petab_sciml`` package (``NNModel``, ``ArrayDataStandard``, ``Layers``, ...) come from
:mod:`petab_sciml.official_api`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_problem", "validate_problem"]

OFFICIAL_DISTRIBUTION = "petab-sciml"
"""The PyPI distribution of the official package, whose import name is also petab_sciml."""


def _warn_if_official_distribution_installed() -> None:
    """Both distributions write the package ``petab_sciml``: in one environment one of them
    is broken.  Say so once, in one line.  (Looks for the official distribution's
    ``petab_sciml-<version>.dist-info`` on ``sys.path``; importlib.metadata would cost
    more than the rest of this import.)"""
    import os
    import sys

    for entry in sys.path:
        try:
            names = [e.name for e in os.scandir(entry or ".") if e.name.startswith("petab_sciml-")
                     and e.name.endswith((".dist-info", ".egg-info"))]
        except OSError:
            continue
        if names:
            import warnings

            version = names[0][len("petab_sciml-"):].rsplit(".", 1)[0]
            warnings.warn(f"the official '{OFFICIAL_DISTRIBUTION}' distribution ({version}) is "
                          "installed in this environment and shares the import name "
                          "petab_sciml with petab-sciml-toolkit; install them in separate "
                          "environments (see README)", UserWarning, stacklevel=2)
            return


_warn_if_official_distribution_installed()

_OFFICIAL_NAMES = frozenset({
    "ALL_CONDITION_IDS", "ARRAY", "NN_ENTITY_PATTERN", "NN_PARAMETER_PATTERN",
    "ActivationFunctions", "ArrayData", "ArrayDataStandard", "Input", "Layer", "Layers",
    "NNModel", "NNModelStandard", "Node", "Op", "TensorOps",
})


def __getattr__(name: str) -> Any:
    if name in __all__:
        from petab_sciml import problem

        return getattr(problem, name)
    if name in _OFFICIAL_NAMES:
        import importlib

        official_api = importlib.import_module("petab_sciml.official_api")
        return getattr(official_api, name)
    raise AttributeError(f"module 'petab_sciml' has no attribute {name!r}")
