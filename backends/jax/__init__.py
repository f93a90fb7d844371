"""The JAX backend (equinox), registered as ``petab_sciml.backends.jax:BACKEND``.

Importing this package is cheap: JAX and equinox are imported on first use, and a
missing installation gives a one-line error naming the ``jax`` extra.

Public names (loaded lazily):

* ``BACKEND`` — the :class:`~petab_sciml.backend_api.Backend` object (numpy in/out),
* ``build_model(network, dtype=, seed=, arrays=)`` — the network as a ``JaxModel``
  (an ``equinox.Module``),
* ``make_forward(network_or_model, train=False, dtype=)`` — ``(fn, params)``, a pure
  forward function of ``(params, inputs)`` to jit once or call inside jitted code,
* ``use_cpu_cores(n=None)`` — one JAX CPU device per core (``n``), so that batches of
  experiments are split over the cores; the backend does this itself when it is first
  used before JAX has computed (``devices.use_cpu_cores_by_default``), unless the
  user set JAX's CPU device count (``JAX_NUM_CPU_DEVICES=1``: no split),
* ``JaxModel``, ``JaxNet``, ``JaxBackend``.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "JaxBackend": "backend", "JaxNet": "backend",
    "JaxModel": "model", "build_model": "model", "make_forward": "model",
    "convert_arrays": "model", "use_cpu_cores": "devices",
}


def _load(submodule: str) -> Any:
    from petab_sciml.errors import require

    require("jax", "jax")
    require("equinox", "jax")
    import importlib

    # before anything here computes: one JAX CPU device per core (devices.py)
    importlib.import_module(f"{__name__}.devices").use_cpu_cores_by_default()
    return importlib.import_module(f"{__name__}.{submodule}")


class _LazyBackend:
    """Stands in for the backend object until a method is used (keeps imports cheap)."""

    name = "jax"

    def __getattr__(self, attr: str) -> Any:
        return getattr(_load("backend").BACKEND, attr)

    def __repr__(self) -> str:
        return "<petab_sciml JAX backend>"


BACKEND = _LazyBackend()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(_load(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BACKEND", *_LAZY]
