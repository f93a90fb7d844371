"""Training starts in JAX: the task's starts as one batch of native models, trained by an
optax optimizer in one jitted, vmapped step (``petab_sciml.fit`` drives it).

Each step: objective and gradient of every start (``loss``; training mode with a PRNG
key per start and step when the problem has a dropout column), the optimizer's update,
then the projection onto the bounds (``project``).  Starts are independent: vmapping
does not mix them.  Checkpoints (one ``.npz`` per start: the model's leaves, the
optimizer state's leaves, the step, the loss trace) are written every
``checkpoint_every`` steps, when stopped and at the end.
"""

from __future__ import annotations

import io
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
    checkpoint_path,
    dropout_seed,
    load_cached,
)

from .problem import from_vector, loss, parameters, project, stack

_STEPS: dict[tuple, Any] = {}


def optimizer(name: str, lr: float):
    import optax

    table = {"adam": optax.adam, "adamw": optax.adamw, "sgd": optax.sgd,
             "rmsprop": lambda lr: optax.rmsprop(lr, decay=0.99, eps=1e-8),
             "adagrad": lambda lr: optax.adagrad(lr, eps=1e-10)}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(table)}")
    return table[name](lr)


def _compiled(task: FitTask, spec: Any, train: bool):
    """The jitted, vmapped step and final evaluation (once per worker and setting)."""
    key = (id(spec), task.optimizer, task.lr, train)
    found = _STEPS.get(key)
    if found is None:
        opt = optimizer(task.optimizer, task.lr)

        def one(model, state, rng, k):
            rng_k = jax.random.fold_in(rng, k) if train else None
            (value, _), grads = eqx.filter_value_and_grad(loss, has_aux=True)(
                model, key=rng_k, train=train)
            updates, state = opt.update(grads, state, model)
            return project(eqx.apply_updates(model, updates)), state, value

        step = eqx.filter_jit(eqx.filter_vmap(one, in_axes=(0, 0, 0, None)))
        final = eqx.filter_jit(eqx.filter_vmap(lambda m: loss(m)))
        init = eqx.filter_jit(eqx.filter_vmap(
            lambda m: opt.init(eqx.filter(m, eqx.is_inexact_array))))
        found = _STEPS[key] = (step, final, init)
    return found


def train_starts(task: FitTask, hooks: Hooks | None = None) -> list[StartResult]:
    hooks = hooks or Hooks()
    problem = load_cached(task.problem, "jax", task.trust_code)
    base = problem.model(**task.options)
    spec = base.spec
    train = any(spec.dropout.values())
    step, final, init = _compiled(task, spec, train)
    batch = stack([from_vector(spec, w) for w in task.w0])
    states = init(batch)
    rngs = jnp.stack([jax.random.PRNGKey(dropout_seed(task.seed, k)) for k in task.starts])
    traces = [[] for _ in task.starts]
    done = 0
    if task.resume:
        batch, states, done, traces = _restore(task, batch, states, traces)
    t0 = time.perf_counter()
    interrupted = False
    try:
        for k in range(done, task.steps):
            if hooks.should_stop():
                interrupted = True
                break
            batch, states, values = step(batch, states, rngs, k)
            values = np.asarray(values)
            for i, v in enumerate(values):
                traces[i].append(float(v))
            done = k + 1
            hooks.report(task.starts, done, values)
            if task.checkpoint_every and done % task.checkpoint_every == 0:
                _save(task, batch, states, done, traces)
    except KeyboardInterrupt:
        _save(task, batch, states, done, traces)
        raise
    _save(task, batch, states, done, traces)
    seconds = time.perf_counter() - t0
    values, aux = final(batch)
    out = []
    for i, start in enumerate(task.starts):
        model = jax.tree_util.tree_map(lambda x, i=i: x[i], batch)
        state = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
        out.append(StartResult(
            start, np.asarray(traces[i], np.float64), float(values[i]),
            spec.plan.pack(parameters(model)), np.asarray(model.mech, np.float64),
            _named_leaves(state), bool(aux["ok"][i]), done, seconds, interrupted))
    return out


def _named_leaves(tree: Any) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def _save(task: FitTask, batch, states, done: int, traces) -> None:
    from petab_sciml.safe_write import write_bytes

    for i, start in enumerate(task.starts):
        path = checkpoint_path(task, start, ".npz")
        if path is None:
            return
        pick = lambda x, i=i: np.asarray(x[i])  # noqa: E731
        arrays = {f"m{j}": pick(x) for j, x in enumerate(
            jax.tree_util.tree_leaves(eqx.filter(batch, eqx.is_array)))}
        arrays |= {f"s{j}": pick(x) for j, x in enumerate(jax.tree_util.tree_leaves(states))}
        arrays["step"] = np.asarray(done)
        arrays["trace"] = np.asarray(traces[i], np.float64)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, buffer.getvalue(), overwrite=True)


def _restore(task: FitTask, batch, states, traces):
    """Starts from their checkpoints: every start of a task must be at the same step."""
    loaded = []
    for start in task.starts:
        path = checkpoint_path(task, start, ".npz")
        if path is None or not path.is_file():
            return batch, states, 0, traces
        with np.load(path) as z:
            loaded.append({k: z[k] for k in z.files})
    steps = {int(d["step"]) for d in loaded}
    if len(steps) != 1:
        raise ValueError(f"starts {task.starts} were checkpointed at different steps "
                         f"{sorted(steps)}: resume them in separate tasks")
    arrays, treedef = jax.tree_util.tree_flatten(eqx.filter(batch, eqx.is_array))
    model_leaves = [jnp.stack([d[f"m{j}"] for d in loaded]) for j in range(len(arrays))]
    filtered = jax.tree_util.tree_unflatten(treedef, model_leaves)
    batch = eqx.combine(filtered, eqx.filter(batch, eqx.is_array, inverse=True))
    s_leaves, s_def = jax.tree_util.tree_flatten(states)
    states = jax.tree_util.tree_unflatten(
        s_def, [jnp.stack([d[f"s{j}"] for d in loaded]) for j in range(len(s_leaves))])
    traces = [list(d["trace"]) for d in loaded]
    return batch, states, steps.pop(), traces
