"""The base of the layer modules: ``forward`` gives ``(output, buffer updates)``.

A layer module holds its parameter arrays as fields named like the PyTorch ``state_dict``
entries (``weight``, ``bias``, ``running_mean``, ...; ``None`` where the layer has no such
array) and its resolved catalogue arguments as static fields.  ``forward(*xs, train, key)``
returns ``(y, updates)``, where ``updates`` maps buffer names to their new values (BatchNorm
running statistics in training mode) — state is returned, never mutated.  Calling the
module returns ``y`` only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax

Array = jax.Array


class LayerModule(eqx.Module):
    """Base class: ``forward`` gives ``(output, buffer updates)``; ``__call__`` the output."""

    array_names: ClassVar[tuple[str, ...]] = ()
    stochastic: ClassVar[bool] = False

    def forward(self, *xs: Array, train: bool = False, key: Array | None = None
                ) -> tuple[Array, dict[str, Array]]:
        return self.apply(*xs), {}

    def apply(self, *xs: Array) -> Array:  # pragma: no cover - overridden
        raise NotImplementedError

    def __call__(self, *xs: Array, train: bool = False, key: Array | None = None) -> Array:
        return self.forward(*xs, train=train, key=key)[0]

    def arrays(self) -> dict[str, Array]:
        """The arrays this layer has (PyTorch ``state_dict`` names)."""
        return {n: getattr(self, n) for n in self.array_names if getattr(self, n) is not None}

    def array(self, name: str) -> Array:
        """One array by its PyTorch name."""
        return getattr(self, name)

    def with_arrays(self, arrays: Mapping[str, Array]) -> LayerModule:
        """A copy with the given arrays replaced (a trace-time operation under jit)."""
        return dataclasses.replace(self, **arrays) if arrays else self


def static_field(**kw: Any) -> Any:
    """A static (non-array) field of a layer module: a resolved catalogue argument."""
    return eqx.field(static=True, **kw)


def layer_family(layer_type: str) -> tuple[str, int | None]:
    """``("Conv", 2)`` for ``Conv2d``; ``(type, None)`` for types without a dimension."""
    if layer_type[-2:] in ("1d", "2d", "3d"):
        return layer_type[:-2], int(layer_type[-2])
    return layer_type, None
