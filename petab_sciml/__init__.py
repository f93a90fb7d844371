"""petab-sciml: PEtab SciML networks and problems in PyTorch and JAX.

The top-level names are imported lazily so that ``import petab_sciml`` stays cheap and
needs neither torch nor jax.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_problem", "validate_problem"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from petab_sciml import problem

        return getattr(problem, name)
    raise AttributeError(f"module 'petab_sciml' has no attribute {name!r}")
