"""Runge-Kutta stage sums whose rounding does not depend on the batch.

diffrax forms every Runge-Kutta stage input, the step's solution, its error estimate
and the dense output as ``tensordot(weights, stages)`` (``diffrax._solver.base.
vector_tree_dot``).  XLA on CPU sums that contraction in one order for one experiment
and in another under ``jax.vmap`` over experiments, so a batched solve and the same
experiment solved alone differ in the last bits; where the right-hand side has kinks
(a ReLU network: suite case 038) those bits flip the step controller's accept / reject
decisions and the two paths end apart by up to the solver's tolerance.

:func:`diffeqsolve` is ``diffrax.diffeqsolve`` with those sums written as a fixed chain
of elementwise multiply-adds (:func:`ordered_tree_dot`), which XLA compiles the same way
for every batch size: with :func:`petab_sciml.backends.jax.ops.ordered_linear` for
small networks, case 038 batched and unbatched agree bit for bit.  The replacement is
made only while our solves are traced (diffrax is not changed for anyone else) and
under a lock, as tracing may run in several threads.  Arithmetic cost is the same
(one multiply-add per stage and element); the solver's results change only by rounding.

Covered: the explicit solvers this backend offers whose dense output goes through the
same function (``dopri8``, ``tsit5``).  ``dopri5``'s dense output (diffrax's
``FourthOrderPolynomialInterpolation``) calls ``tensordot`` directly and is not.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from petab_sciml.backends.jax.ops import tangent_sum

_MODULES = ("diffrax._solver.runge_kutta", "diffrax._solver.dopri8", "diffrax._solver.tsit5")
_LOCK = threading.RLock()


def ordered_tree_dot(a: Any, b: Any) -> Any:
    """``diffrax``'s ``vector_tree_dot(a, b)``: ``sum_j a[j] * leaf[j]`` for every leaf
    of ``b`` (``a`` of shape ``(n,)``, each leaf ``(n, ...)``), summed for ``j = 0, 1,
    ...`` in that order with elementwise operations only."""
    return jax.tree_util.tree_map(lambda leaf: _ordered_dot(a, leaf), b)


@jax.custom_jvp
def _ordered_dot(a: jax.Array, leaf: jax.Array) -> jax.Array:
    """The sum of one leaf: values summed in a fixed order; tangents (derivatives, never
    fed back into step-size decisions) as one broadcast product and sum over the stage
    axis.  The chain of slices alone would transpose, in reverse mode, into one padded
    copy of the whole stage buffer per stage."""
    total = a[0] * leaf[0]
    for j in range(1, leaf.shape[0]):
        total = total + a[j] * leaf[j]
    return total


def _weighted_sum(weights: jax.Array, values: jax.Array) -> jax.Array:
    return jnp.sum(jnp.reshape(weights, weights.shape + (1,) * (values.ndim - 1)) * values,
                   axis=0)


def _ordered_dot_jvp(primals, tangents):
    a, leaf = primals
    da, dleaf = tangents
    out = _ordered_dot(a, leaf)
    parts = []
    if not isinstance(dleaf, SymbolicZero):
        parts.append(_weighted_sum(a, dleaf))
    if not isinstance(da, SymbolicZero):
        parts.append(_weighted_sum(da, leaf))
    return out, tangent_sum(out, parts)


_ordered_dot.defjvp(_ordered_dot_jvp, symbolic_zeros=True)


def _modules() -> list[Any]:
    import importlib

    found = []
    for name in _MODULES:
        module = importlib.import_module(name)
        if not callable(getattr(module, "vector_tree_dot", None)):
            raise ImportError(f"{name} has no vector_tree_dot: this diffrax version is not "
                              f"supported by petab_sciml.backends.jax.stage_sums")
        found.append(module)
    return found


@contextlib.contextmanager
def ordered_stage_sums() -> Iterator[None]:
    """Within this block, diffrax solves *traced* use :func:`ordered_tree_dot` for their
    stage sums (re-entrant; restored on exit)."""
    with _LOCK:
        modules = _modules()
        saved = [m.vector_tree_dot for m in modules]
        try:
            for m in modules:
                m.vector_tree_dot = ordered_tree_dot
            yield
        finally:
            for m, original in zip(modules, saved):
                m.vector_tree_dot = original


def diffeqsolve(*args: Any, **kwargs: Any) -> Any:
    """``diffrax.diffeqsolve(*args, **kwargs)`` with :func:`ordered_stage_sums`."""
    import diffrax

    with ordered_stage_sums():
        return diffrax.diffeqsolve(*args, **kwargs)
