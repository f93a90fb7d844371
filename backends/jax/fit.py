"""Training starts in JAX: the task's starts as one batch of native models, trained by an
optax optimizer in one jitted, vmapped step (``petab_sciml.fit`` drives it).

Each step: objective and gradient of every start (``loss``; training mode with a PRNG
key per start and step when the problem has a dropout column), the optimizer's update,
then the projection onto the bounds (``project``). Starts are independent: vmapping does
not mix them. A start whose loss is not finite ends there with the values of the step
before (``stopped_at``); it stays in the batch without updates. Checkpoints (one
``.npz`` per start: the model's leaves, the optimizer state's leaves, the step, the loss
trace; :mod:`.checkpoint`) are written every ``checkpoint_every`` steps, when stopped and
at the end, and checked before a resumed task trains.

The step and the final evaluation are kept in the JAX export cache
(:meth:`~petab_sciml.backends.jax.cache.ExportCache.wrap_function`, unless
``PETAB_SCIML_CACHE=0``): a resumed fit, a second fit of the same problem and every Dask
worker load them instead of tracing the differentiated, vmapped solve again.  Stored
computations take arrays only, so the models and optimizer states cross as their array
leaves (:func:`_on_leaves`); their structure and static fields stay in this process.
"""

from __future__ import annotations

import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.fit.task import (
    FitTask,
    Hooks,
    StartResult,
    dropout_seed,
    load_cached,
    plateaued,
)

from .checkpoint import restore, save
from .problem import from_vector, loss, parameters, project, stack

_STEPS: dict[tuple, Any] = {}


def optimizer(name: str, lr: float, schedule: str = "constant", steps: int = 1,
              lr_decay: float = 1.0):
    """The optax optimizer ``name`` with learning rate ``lr`` under ``schedule``
    (``petab_sciml.fit.task.SCHEDULES``: the rate of step ``k`` is a function of the
    optimizer state's step count, so a restored state continues the schedule)."""
    import optax

    table = {"adam": optax.adam, "adamw": optax.adamw, "sgd": optax.sgd,
             "rmsprop": lambda lr: optax.rmsprop(lr, decay=0.99, eps=1e-8),
             "adagrad": lambda lr: optax.adagrad(lr, eps=1e-10)}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(table)}")
    # the default float (float64 in fits): optax would compute the exponential's power
    # of its int32 step count in float32 (rates 1e-7 off torch.optim's)
    real = jnp.result_type(float)
    rates = {"constant": lambda: lr,
             "cosine": lambda: optax.cosine_decay_schedule(jnp.asarray(lr, real),
                                                           decay_steps=max(steps, 1)),
             "exponential": lambda: optax.exponential_decay(
                 jnp.asarray(lr, real), transition_steps=1,
                 decay_rate=jnp.asarray(lr_decay, real))}
    if schedule not in rates:
        raise ValueError(f"unknown schedule {schedule!r}; known: {', '.join(rates)}")
    return table[name](rates[schedule]())


def _compiled(task: FitTask, spec: Any, train: bool):
    """The jitted, vmapped step and final evaluation (once per worker and setting)."""
    key = (id(spec), task.optimizer, task.lr, task.schedule, task.lr_decay, task.steps, train)
    found = _STEPS.get(key)
    if found is None:
        opt = optimizer(task.optimizer, task.lr, task.schedule, task.steps, task.lr_decay)

        def one(model, previous, state, active, rng, k):
            rng_k = jax.random.fold_in(rng, k) if train else None
            (value, _), grads = eqx.filter_value_and_grad(loss, has_aux=True)(
                model, key=rng_k, train=train)
            updates, new_state = opt.update(grads, state, model)
            new = project(eqx.apply_updates(model, updates))
            # A start whose loss is not finite ends: it keeps the values of the step
            # before (``previous``) and takes no more updates.
            ok = active & jnp.isfinite(value)
            model_out = _where(ok, new, previous)
            previous_out = _where(ok, model, previous)
            state_out = _where(ok, new_state, state)
            return model_out, previous_out, state_out, ok, value

        step = eqx.filter_vmap(one, in_axes=(0, 0, 0, 0, 0, None))
        # each start's final value alone (lax.map, not vmap): the objective the saved
        # problem gives, bit for bit; a vmap solves the starts as one system, equal to
        # it only within the solver's tolerance (simulation.py, batches of starts)
        final = lambda batch: jax.lax.map(loss, batch)  # noqa: E731
        init = eqx.filter_jit(eqx.filter_vmap(
            lambda m: opt.init(eqx.filter(m, eqx.is_inexact_array))))
        cache = _export_cache()
        if cache is None:
            step, final = eqx.filter_jit(step), eqx.filter_jit(final)
        else:
            # everything the step closes over besides the problem's files
            parts = [spec.plan.fingerprint, repr(spec.executor.options),
                     repr(sorted(task.options.items())),
                     repr((task.optimizer, task.lr, task.schedule, task.lr_decay,
                           task.steps if task.schedule == "cosine" else None, train))]
            step = _on_leaves(cache, [*parts, "fit step"], step, n_trees=3, same_out=True)
            final = _on_leaves(cache, [*parts, "fit final"], final, n_trees=1,
                               same_out=False)
        found = _STEPS[key] = (step, final, init)
    return found


def _export_cache() -> Any:
    """The JAX export cache, or None when it is switched off (``PETAB_SCIML_CACHE=0``)."""
    from .cache import ExportCache, cache_enabled

    return ExportCache() if cache_enabled() else None


def _on_leaves(cache: Any, parts: list[str], fn: Any, n_trees: int, same_out: bool) -> Any:
    """``fn(*trees, *arrays)`` compiled on the array leaves of its first ``n_trees``
    arguments (models, optimizer states) and kept by the export cache under ``parts``.
    With ``same_out``, ``fn`` returns ``(*trees, *arrays)`` with trees of the structure
    it was given (rebuilt here with their static fields); otherwise arrays in built-in
    containers, returned as they are."""
    compiled: dict[Any, Any] = {}

    def call(*args):
        dynamic, static = eqx.partition(args[:n_trees], eqx.is_array)
        leaves, tree = jax.tree_util.tree_flatten(dynamic)
        flat = compiled.get(tree)
        if flat is None:
            def on_leaves(leaves, *arrays):
                trees = eqx.combine(jax.tree_util.tree_unflatten(tree, leaves), static)
                out = fn(*trees, *arrays)
                if not same_out:
                    return out
                out_leaves, out_tree = jax.tree_util.tree_flatten(
                    eqx.filter(tuple(out[:n_trees]), eqx.is_array))
                if out_tree != tree:   # a programming error, not a cache fault
                    raise TypeError(f"the fit step changed its models' structure: "
                                    f"{out_tree} from {tree}")
                return out_leaves, *out[n_trees:]

            flat = compiled[tree] = cache.wrap_function(parts, jax.jit(on_leaves))
        out = flat(leaves, *args[n_trees:])
        if not same_out:
            return out
        trees = eqx.combine(jax.tree_util.tree_unflatten(tree, out[0]), static)
        return (*trees, *out[1:])

    return call


def _where(ok, a, b):
    """``a`` where ``ok`` else ``b``, leaf by leaf over the arrays of two like pytrees."""
    arrays_a = eqx.filter(a, eqx.is_array)
    arrays_b = eqx.filter(b, eqx.is_array)
    chosen = jax.tree_util.tree_map(lambda x, y: jnp.where(ok, x, y), arrays_a, arrays_b)
    return eqx.combine(chosen, eqx.filter(a, eqx.is_array, inverse=True))


def _initial(task: FitTask) -> tuple:
    """(spec, compiled functions, start state) of ``task``: its starts at their start
    vectors, or restored from their checkpoints when resuming."""
    problem = load_cached(task.problem, "jax", task.trust_code, task.limits)
    base = problem.model(**task.options)
    spec = base.spec
    train = any(spec.dropout.values())
    compiled = _compiled(task, spec, train)
    batch = stack([from_vector(spec, w) for w in task.w0])
    states = compiled[2](batch)
    previous = batch
    n = len(task.starts)
    active = jnp.ones(n, bool)
    traces: list[list[float]] = [[] for _ in task.starts]
    stopped = np.zeros(n, np.int64)
    carry = (batch, previous, states, active, 0, traces, stopped)
    if task.resume:
        carry = restore(task, spec.plan.fingerprint, batch, previous, states, active,
                        traces, stopped)
    return spec, compiled, carry


def check_resume(task: FitTask) -> None:
    """Check the checkpoints a resumed ``task`` would continue from, so that a bad one
    stops the fit before any start trains; raises
    :class:`~petab_sciml.fit.artifacts.ArtifactError`."""
    if task.resume:
        _initial(task)


def train_starts(task: FitTask, hooks: Hooks | None = None) -> list[StartResult]:
    hooks = hooks or Hooks()
    spec, (step, final, _), carry = _initial(task)
    fingerprint = spec.plan.fingerprint
    batch, previous, states, active, done, traces, stopped = carry
    rngs = jnp.stack([jax.random.PRNGKey(dropout_seed(task.seed, k)) for k in task.starts])
    t0 = time.perf_counter()
    interrupted = False
    carry = (batch, previous, states, active, done, traces, stopped)
    try:
        for k in range(done, task.steps):
            if not np.asarray(active).any():
                break
            if hooks.should_stop():
                interrupted = True
                break
            was_active = np.asarray(active)
            batch, previous, states, active, values = step(
                batch, previous, states, active, rngs, jnp.asarray(k, jnp.int32))
            values, now_active = np.asarray(values), np.asarray(active)
            for i, v in enumerate(values):
                if was_active[i]:
                    traces[i].append(float(v))
                    if not now_active[i]:
                        stopped[i] = k + 1
            ended = [i for i in np.flatnonzero(now_active)
                     if plateaued(traces[i], task.patience, task.min_delta)]
            if ended:   # no more updates for these starts (they keep their values)
                active = active.at[np.asarray(ended)].set(False)
            done = k + 1
            carry = (batch, previous, states, active, done, traces, stopped)
            hooks.report(task.starts, done, values)
            if task.checkpoint_every and done % task.checkpoint_every == 0:
                save(task, fingerprint, *carry)
    except KeyboardInterrupt:
        save(task, fingerprint, *carry)
        raise
    save(task, fingerprint, *carry)
    seconds = time.perf_counter() - t0
    values, aux = final(batch)
    active = np.asarray(active)
    out = []
    for i, start in enumerate(task.starts):
        model = jax.tree_util.tree_map(lambda x, i=i: x[i], batch)
        state = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
        out.append(StartResult(
            start, np.asarray(traces[i], np.float64), float(values[i]),
            spec.plan.pack(parameters(model)), np.asarray(model.mech, np.float64),
            _named_leaves(state), bool(aux["ok"][i]),
            int(stopped[i]) or (done if active[i] else len(traces[i])), seconds,
            interrupted, int(stopped[i])))
    return out


def _named_leaves(tree: Any) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}
