"""The JAX implementation of :class:`petab_sciml.backend_api.Backend` (numpy at the edges).

The backend's model object is a :class:`JaxNet`: the current parameter and buffer arrays
plus jitted pure functions compiled once per input shape (``jax.jit`` of functions of
``(params, buffers, inputs[, key])``), so loading new parameter values never retraces.
Like a PyTorch module, a training-mode ``forward``/``gradients`` call stores the updated
running statistics in the ``JaxNet``; the underlying functions stay pure.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.network import Network

from .model import JaxModel, Nested, build_model, check_dtype, convert_arrays


def _sum_outputs(outputs) -> jax.Array:
    return sum(jnp.sum(o) for o in outputs)


def rounded_product(product):
    """``product`` itself, kept out of XLA's fused multiply-add contraction.

    XLA's CPU code contracts ``a * b + c`` into one fused multiply-add (rounded once),
    and whether it does depends on the program: for one state alone some elements are
    contracted, under ``vmap`` others, and no XLA option turns it off.  A
    select the compiler cannot see through, ``where(p != p, nan, p)`` (the same value,
    NaN included), makes the product a rounded value of its own in every program, so
    compiled formulas give the same bits alone and in a batch."""
    return jnp.where(product != product, jnp.nan, product)


class _Compiled:
    """The jitted functions of one (network, dtype): shared by every JaxNet built from the
    same Network object, so rebuilding a model never recompiles."""

    def __init__(self, model: JaxModel):
        skeleton = model.skeleton()
        self.skeleton = skeleton

        def eval_fn(params, buffers, inputs):
            return skeleton.apply(params, buffers, inputs, train=False)[0]

        def train_fn(params, buffers, inputs, key):
            return skeleton.apply(params, buffers, inputs, train=True, key=key)

        def eval_loss(params, buffers, inputs):
            return _sum_outputs(eval_fn(params, buffers, inputs))

        def train_loss(params, buffers, inputs, key):
            outputs, new_buffers = train_fn(params, buffers, inputs, key)
            return _sum_outputs(outputs), new_buffers

        def mean_chunk(params, buffers, inputs, key, count):
            """Sums of each output over the first ``count`` (<= _MEAN_CHUNK) of a chunk of
            vmapped training-mode passes (a fixed chunk size: one compilation)."""
            keys = jax.random.split(key, _MEAN_CHUNK)
            outs = jax.vmap(lambda k: train_fn(params, buffers, inputs, k)[0])(keys)
            used = jnp.arange(_MEAN_CHUNK) < count
            return tuple(jnp.sum(jnp.where(used.reshape((-1,) + (1,) * (o.ndim - 1)), o, 0),
                                 axis=0) for o in outs)

        self.eval_fn = jax.jit(eval_fn)
        self.train_fn = jax.jit(train_fn)
        self.mean_chunk = jax.jit(mean_chunk)
        self.eval_grad = jax.jit(jax.grad(eval_loss))
        self.train_grad = jax.jit(jax.grad(train_loss, has_aux=True))


_MEAN_CHUNK = 4096
"""Training-mode passes evaluated together (vmapped) by ``mean_forward``."""

_COMPILED: OrderedDict[tuple[int, str], _Compiled] = OrderedDict()
_CACHE_SIZE = 64


def _compiled(model: JaxModel) -> _Compiled:
    """Least-recently-used cache keyed by network identity (an entry keeps its network
    alive, so an id is never reused while cached)."""
    key = (id(model.network), model.dtype)
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = _Compiled(model)
        while len(_COMPILED) > _CACHE_SIZE:
            _COMPILED.popitem(last=False)
    else:
        _COMPILED.move_to_end(key)
    return found


class JaxNet:
    """A network with its current arrays and its jitted forward/gradient functions.

    ``eval_fn(params, buffers, inputs) -> outputs``, ``train_fn(params, buffers, inputs,
    key) -> (outputs, new_buffers)`` and their gradients ``eval_grad``/``train_grad`` are
    ``jax.jit`` functions compiled once per input shape.
    """

    def __init__(self, model: JaxModel):
        self.network: Network = model.network
        self.dtype: str = model.dtype
        self.params: Nested = model.parameters()
        self.buffers: Nested = model.buffers()
        compiled = _compiled(model)
        self._skeleton = compiled.skeleton
        self.eval_fn = compiled.eval_fn
        self.train_fn = compiled.train_fn
        self.eval_grad = compiled.eval_grad
        self.train_grad = compiled.train_grad
        self.mean_chunk = compiled.mean_chunk

    @property
    def module(self) -> JaxModel:
        """The equinox module with the current arrays."""
        return self._skeleton.with_arrays(self.params, self.buffers)

    def __repr__(self) -> str:
        return f"JaxNet({self.network.id!r}, dtype={self.dtype})"


def _inputs(net: JaxNet, inputs: Sequence[Any]) -> tuple[jax.Array, ...]:
    if isinstance(inputs, np.ndarray) or hasattr(inputs, "__array__"):
        inputs = (inputs,)
    inputs = tuple(inputs)
    if len(inputs) != len(net.network.inputs):
        raise ValueError(f"network {net.network.id!r} takes {len(net.network.inputs)} "
                         f"input(s) ({', '.join(net.network.inputs)}), got {len(inputs)}")
    return tuple(jnp.asarray(np.asarray(x, dtype=net.dtype)) for x in inputs)


_FIXED_KEY: list[jax.Array] = []


def _key(net: JaxNet, seed: int | None) -> jax.Array:
    """The dropout key of a training-mode call: from ``seed``, else fresh entropy; a
    network without dropout gets a fixed key (unused, and no per-call key creation)."""
    if not net.network.stochastic:
        if not _FIXED_KEY:
            _FIXED_KEY.append(jax.random.PRNGKey(0))
        return _FIXED_KEY[0]
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 2**31 - 1))
    return jax.random.PRNGKey(seed)


def _numpy(nested: Nested, network: Network) -> dict[str, dict[str, np.ndarray]]:
    spec = network.parameter_arrays()
    out: dict[str, dict[str, np.ndarray]] = {}
    for group, arrays in nested.items():
        out[group] = {}
        for name, arr in arrays.items():
            fixed = spec[group][name].dtype
            value = np.asarray(arr)
            out[group][name] = value.astype(fixed) if fixed else value
    return out


class JaxBackend:
    """``petab_sciml.backend_api.Backend`` for JAX/equinox."""

    name = "jax"

    def executor(self, plan: Any, *, cache: bool | None = None,
                 cache_dir: str | None = None, **options: Any) -> Any:
        """The objective of a simulation plan in JAX (:class:`~.simulation.JaxExecutor`).

        ``cache`` (default: on unless ``PETAB_SCIML_CACHE=0``) keeps the traced objective
        across processes in ``cache_dir`` (:mod:`~petab_sciml.backends.jax.cache`).
        Without ``solver``, a failed explicit solve is retried with an implicit solver
        (:mod:`petab_sciml.simulation.stiff_fallback`)."""
        from dataclasses import replace

        from petab_sciml.simulation.stiff_fallback import (
            IMPLICIT_SOLVER,
            StiffFallbackExecutor,
        )

        from .cache import ExportCache, cache_enabled
        from .simulation import JaxExecutor, JaxOptions

        use_cache = cache_enabled() if cache is None else bool(cache)
        export_cache = ExportCache(cache_dir) if use_cache else None
        if "solver" in options:
            return JaxExecutor(plan, JaxOptions(**options), export_cache)
        opts = JaxOptions(**options)
        explicit = JaxExecutor(plan, opts, export_cache)
        return StiffFallbackExecutor(
            plan, "jax", explicit, lambda: JaxExecutor(
                plan, replace(opts, solver=IMPLICIT_SOLVER), export_cache), opts.solver)

    def problem_model(self, problem: Any, params: Any = None, **options: Any) -> Any:
        """The whole problem as an ``equinox.Module`` (:mod:`.problem`)."""
        from .problem import problem_model

        return problem_model(problem, params, **options)

    def train_starts(self, task: Any, hooks: Any = None) -> list[Any]:
        """Train a fit task's starts (:mod:`petab_sciml.fit`; ``fit.py`` here)."""
        from .fit import train_starts

        return train_starts(task, hooks)

    def check_resume(self, task: Any) -> None:
        """Check the checkpoints a resumed fit task continues from, before any trains."""
        from .fit import check_resume

        check_resume(task)

    def parameters_of(self, model: Any) -> dict[str, Any]:
        """``{"mech": linear values, "nets": ...}`` (numpy) of a native problem model."""
        from .problem import parameters

        return parameters(model)

    def term_sum_ops(self) -> Any:
        """Array operations of :mod:`petab_sciml.simulation.term_sums`."""
        from .term_sums import JaxTermSumOps

        return JaxTermSumOps()

    def expression_namespace(self) -> dict[str, Any]:
        """Array functions for compiled PEtab formulas
        (:func:`petab_sciml.expressions.compile_expressions`)."""
        return {
            "_m": jnp, "_asarray": jnp.asarray, "_where": jnp.where,
            "_minimum": jnp.minimum, "_maximum": jnp.maximum, "_and": jnp.logical_and,
            "_or": jnp.logical_or, "_xor": jnp.logical_xor, "_not": jnp.logical_not,
            "_stack": lambda xs: jnp.stack(xs, axis=-1),
            "_empty": lambda z: jnp.zeros(z.shape + (0,), z.dtype),
            "_rounded": rounded_product,
        }

    def build(self, network: Network, *, dtype: str = "float32", seed: int = 0) -> JaxNet:
        return JaxNet(build_model(network, dtype=check_dtype(dtype), seed=seed))

    def set_parameters(self, model: JaxNet, params: Mapping[str, Mapping[str, Any]], *,
                       strict: bool = True) -> JaxNet:
        arrays = convert_arrays(model._skeleton, params, strict=strict)
        spec = model.network.parameter_arrays()
        for group, given in arrays.items():
            for name, value in given.items():
                target = model.params if spec[group][name].trainable else model.buffers
                target.setdefault(group, {})[name] = value
        return model

    def freeze(self, model: JaxNet, trainable: Mapping[str, Mapping[str, Any]]) -> JaxNet:
        """Nothing to mark: JAX differentiates what it is asked to (the simulation's
        ``free_index`` and ``problem.trainable(net)`` say what is estimated)."""
        return model

    def get_parameters(self, model: JaxNet) -> dict[str, dict[str, np.ndarray]]:
        merged: Nested = {}
        for group, arrays in model.network.parameter_arrays().items():
            merged[group] = {}
            for name, info in arrays.items():
                source = model.params if info.trainable else model.buffers
                merged[group][name] = source[group][name]
        return _numpy(merged, model.network)

    def forward(self, model: JaxNet, inputs: Sequence[np.ndarray], *, train: bool = False,
                seed: int | None = None) -> tuple[np.ndarray, ...]:
        xs = _inputs(model, inputs)
        if not train:
            outputs = model.eval_fn(model.params, model.buffers, xs)
        else:
            outputs, model.buffers = model.train_fn(model.params, model.buffers, xs,
                                                    _key(model, seed))
        return tuple(np.asarray(o) for o in outputs)

    def forward_each(self, model: JaxNet, inputs: Sequence[np.ndarray]
                     ) -> tuple[np.ndarray, ...]:
        xs = _inputs(model, inputs)
        outputs = jax.vmap(lambda *x: tuple(model.eval_fn(model.params, model.buffers, x))
                           )(*xs)
        return tuple(np.asarray(o) for o in outputs)

    def mean_forward(self, model: JaxNet, inputs: Sequence[np.ndarray], *, passes: int,
                     seed: int = 0) -> tuple[np.ndarray, ...]:
        """Mean of each output over ``passes`` training-mode passes with distinct dropout
        keys (vmapped in chunks, accumulated in float64).  Running statistics are left
        unchanged."""
        if passes < 1:
            raise ValueError(f"passes must be at least 1, got {passes}")
        xs = _inputs(model, inputs)
        key = jax.random.PRNGKey(seed)
        totals: list[np.ndarray] | None = None
        for c, start in enumerate(range(0, passes, _MEAN_CHUNK)):
            count = min(_MEAN_CHUNK, passes - start)
            sums = model.mean_chunk(model.params, model.buffers, xs,
                                    jax.random.fold_in(key, c), count)
            sums = [np.asarray(s, np.float64) for s in sums]
            totals = sums if totals is None else [t + s for t, s in zip(totals, sums)]
        assert totals is not None
        return tuple(t / passes for t in totals)

    def gradients(self, model: JaxNet, inputs: Sequence[np.ndarray], *, train: bool = False,
                  seed: int | None = None) -> dict[str, dict[str, np.ndarray]]:
        xs = _inputs(model, inputs)
        if not train:
            grads = model.eval_grad(model.params, model.buffers, xs)
        else:
            grads, model.buffers = model.train_grad(model.params, model.buffers, xs,
                                                    _key(model, seed))
        return _numpy(grads, model.network)

    def vjp(self, model: JaxNet, inputs: Sequence[np.ndarray], cotangents: Sequence[np.ndarray],
            *, train: bool = False, seed: int | None = None
            ) -> tuple[dict[str, dict[str, np.ndarray]], tuple[np.ndarray, ...]]:
        xs = _inputs(model, inputs)
        cts = tuple(jnp.asarray(np.asarray(c, dtype=model.dtype)) for c in cotangents)
        key = _key(model, seed) if train else None

        product = _vjp_function(model.eval_fn, model.train_fn, train, model.network.id)
        grads, input_grads = product(model.params, xs, model.buffers, cts, key)
        return _numpy(grads, model.network), tuple(np.asarray(g) for g in input_grads)


@functools.lru_cache(maxsize=32)
def _vjp_function(eval_fn: Any, train_fn: Any, train: bool, network_id: str) -> Any:
    """``(params, xs, buffers, cotangents, key) -> (d params, d xs)`` of the pairing of
    the outputs with the cotangents, compiled as one function (differentiated eagerly,
    every operation of the backward pass would compile on its own), once per network
    build and mode."""

    def pairing(params, xs, buffers, cts, key):
        if train:
            outputs = train_fn(params, buffers, xs, key)[0]
        else:
            outputs = eval_fn(params, buffers, xs)
        outputs = jax.tree_util.tree_leaves(outputs)
        if len(outputs) != len(cts):
            raise ValueError(f"network {network_id!r} gives {len(outputs)} "
                             f"output(s), got {len(cts)} cotangent(s)")
        return sum(jnp.sum(o * c) for o, c in zip(outputs, cts, strict=True))

    return jax.jit(jax.grad(pairing, argnums=(0, 1)))


BACKEND = JaxBackend()
