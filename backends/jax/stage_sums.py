"""Runge-Kutta stage sums whose rounding does not depend on the batch.

diffrax forms every Runge-Kutta stage input, the step's solution, its error estimate
and the dense output as ``tensordot(weights, stages)`` (``diffrax._solver.base.
vector_tree_dot``).  XLA on CPU sums that contraction in one order for one experiment
and in another under ``jax.vmap`` over experiments, so a batched solve and the same
experiment solved alone differ in the last bits; where the right-hand side has kinks
(a ReLU network: suite case 038) those bits flip the step controller's accept / reject
decisions and the two paths end 5e-9 apart at ``rtol = 1e-8``.

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
import functools
import threading
from collections.abc import Iterator
from typing import Any

_MODULES = ("diffrax._solver.runge_kutta", "diffrax._solver.dopri8", "diffrax._solver.tsit5")
_LOCK = threading.RLock()


def ordered_tree_dot(a: Any, b: Any) -> Any:
    """``diffrax``'s ``vector_tree_dot(a, b)``: ``sum_j a[j] * leaf[j]`` for every leaf
    of ``b`` (``a`` of shape ``(n,)``, each leaf ``(n, ...)``), summed for ``j = 0, 1,
    ...`` in that order with elementwise operations only."""
    import jax

    return jax.tree_util.tree_map(lambda leaf: _ordered_dot()(a, leaf), b)


@functools.cache
def _ordered_dot():
    """The sum of one leaf, as a ``jax.custom_jvp``: the values summed in a fixed order,
    the tangents (the derivatives, never fed back into step-size decisions) as one
    broadcast product and sum over the stage axis.  The chain of slices alone would
    transpose, in reverse mode, into one padded copy of the whole stage buffer per stage
    and sum (the Lotka-Volterra table at 1,000 experiments: 1.6x slower)."""
    import jax
    import jax.numpy as jnp
    from jax.custom_derivatives import SymbolicZero

    @jax.custom_jvp
    def dot(a, leaf):
        total = a[0] * leaf[0]
        for j in range(1, leaf.shape[0]):
            total = total + a[j] * leaf[j]
        return total

    def tangent(weights, values):
        return jnp.sum(jnp.reshape(weights, weights.shape + (1,) * (values.ndim - 1))
                       * values, axis=0)

    def dot_jvp(primals, tangents):
        a, leaf = primals
        da, dleaf = tangents
        out = dot(a, leaf)
        parts = []
        if not isinstance(dleaf, SymbolicZero):
            parts.append(tangent(a, dleaf))
        if not isinstance(da, SymbolicZero):
            parts.append(tangent(da, leaf))
        if not parts:
            return out, jnp.zeros_like(out)
        return out, parts[0] if len(parts) == 1 else parts[0] + parts[1]

    dot.defjvp(dot_jvp, symbolic_zeros=True)
    return dot


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
