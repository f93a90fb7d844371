"""The network backends a test compares: PyTorch, and JAX where it is installed."""

from __future__ import annotations


def network_backends() -> list:
    """``[torch backend, jax backend]`` (JAX left out where it cannot be imported)."""
    from petab_sciml.backends.torch import BACKEND as TORCH

    try:
        from petab_sciml.backends.jax import BACKEND
    except Exception:  # pragma: no cover - JAX missing
        return [TORCH]
    return [TORCH, BACKEND]
