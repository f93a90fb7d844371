"""JAX checkpoints of a fit: one ``.npz`` per start, read back as untrusted input (a fit
folder may come from someone else; ``docs/security.md``).

A checkpoint holds the start's model leaves (``m0``, ``m1``, ...), those of the step
before (``p0``, ...), the optimizer state's leaves (``s0``, ...), ``step``, ``active``,
``stopped``, ``trace`` and ``identity`` (:func:`~petab_sciml.fit.artifacts.checkpoint_identity`
as JSON text).

Reading a task's checkpoints (:func:`restore`) checks every one before any is used: a
regular file of the folder no larger than the model's state can be, an archive of
stored arrays read without pickle (:func:`~petab_sciml.fit.archive.read_npz`), the
identity record equal to the resumed fit's, exactly the expected arrays with this
model's shapes and dtypes, and a step, trace and ``stopped`` that agree.  Every failure
is an :class:`~petab_sciml.fit.artifacts.ArtifactError` naming the file, the array and
how to start over.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from petab_sciml.fit.artifacts import (
    ArtifactError,
    check_identity,
    checkpoint_budget,
    checkpoint_identity,
    read_checkpoint_bytes,
    refused,
)
from petab_sciml.fit.task import FitTask, checkpoint_path


def model_leaves(model: Any) -> list:
    """The array leaves of a (batch of) model(s), in the order checkpoints store them."""
    return jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))


def save(task: FitTask, fingerprint: str, batch, previous, states, active, done: int,
         traces, stopped) -> None:
    """Write each start's checkpoint of ``task`` atomically (interrupts held back until
    they are written)."""
    from petab_sciml.fit.signals import signals_deferred

    with signals_deferred():
        _save(task, fingerprint, batch, previous, states, active, done, traces, stopped)


def _save(task, fingerprint, batch, previous, states, active, done, traces, stopped):
    from petab_sciml.safe_write import write_bytes

    for i, start in enumerate(task.starts):
        path = checkpoint_path(task, start, ".npz")
        if path is None:
            return
        pick = lambda x, i=i: np.asarray(x[i])  # noqa: E731
        arrays = {f"m{j}": pick(x) for j, x in enumerate(model_leaves(batch))}
        arrays |= {f"p{j}": pick(x) for j, x in enumerate(model_leaves(previous))}
        arrays |= {f"s{j}": pick(x) for j, x in enumerate(jax.tree_util.tree_leaves(states))}
        arrays["step"] = np.asarray(done)
        arrays["active"] = pick(active)
        arrays["stopped"] = np.asarray(stopped[i])
        arrays["trace"] = np.asarray(traces[i], np.float64)
        arrays["identity"] = np.asarray(json.dumps(
            checkpoint_identity(task, start, fingerprint), sort_keys=True))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, buffer.getvalue(), overwrite=True)


def _layout(batch, states) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Name -> (shape, dtype) of the arrays of one start's checkpoint (a batch's leaves
    without their leading start axis)."""
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for prefix, leaves in (("m", model_leaves(batch)), ("p", model_leaves(batch)),
                           ("s", jax.tree_util.tree_leaves(states))):
        for j, leaf in enumerate(leaves):
            out[f"{prefix}{j}"] = (tuple(leaf.shape[1:]), np.dtype(leaf.dtype))
    return out


def read_start(path: Path, identity: dict[str, Any],
               layout: dict[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    """The checked arrays of one start's checkpoint."""
    from petab_sciml.fit.archive import read_npz

    n_values = sum(math.prod(shape) for shape, _ in layout.values())
    data = read_checkpoint_bytes(path, checkpoint_budget(n_values, len(layout) + 8))
    arrays = read_npz(data, path)
    expected = set(layout) | {"step", "active", "stopped", "trace", "identity"}
    if set(arrays) != expected:
        missing = sorted(expected - set(arrays))[:5]
        extra = sorted(set(arrays) - expected)[:5]
        raise refused(path, f"holds other arrays than a checkpoint of this model (missing: "
                      f"{missing}, unknown: {extra}); another problem or optimizer?")
    text = arrays["identity"]
    if text.dtype.kind != "U" or text.shape != ():
        raise refused(path, "expected the identity record as text", entry="identity")
    try:
        saved = json.loads(str(text[()]))
    except (ValueError, RecursionError):
        raise refused(path, "the identity record is not valid JSON", entry="identity") \
            from None
    check_identity(saved, identity, path)
    for name, (shape, dtype) in layout.items():
        if arrays[name].shape != shape or arrays[name].dtype != dtype:
            raise refused(path, f"array of shape {arrays[name].shape} and dtype "
                          f"{arrays[name].dtype}; this model needs shape {shape} and dtype "
                          f"{dtype} (another problem or network?)", entry=name)
    _check_progress(arrays, path)
    return arrays


def _read_checked(path: Path, identity: dict[str, Any],
                  layout: dict[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
    """:func:`read_start`, with anything a crafted file makes a check raise refused."""
    try:
        return read_start(path, identity, layout)
    except ArtifactError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a crafted value makes a check raise
        raise refused(path, f"is not a checkpoint of this model ({type(exc).__name__} while "
                      "checking it)") from None


def _check_progress(arrays: dict[str, np.ndarray], path: Path) -> None:
    for name, kind in (("step", "iu"), ("stopped", "iu"), ("active", "b")):
        if arrays[name].shape != () or arrays[name].dtype.kind not in kind:
            raise refused(path, f"expected a scalar of kind {kind!r}, found shape "
                          f"{arrays[name].shape} and dtype {arrays[name].dtype}", entry=name)
    step, stopped = int(arrays["step"]), int(arrays["stopped"])
    if step < 0 or not 0 <= stopped <= step:
        raise refused(path, f"step {step} and stopped {stopped} disagree", entry="stopped")
    trace = arrays["trace"]
    if trace.dtype != np.float64 or trace.shape != ((stopped or step),):
        raise refused(path, f"expected {stopped or step} loss values (float64), found shape "
                      f"{trace.shape} and dtype {trace.dtype}", entry="trace")


def _restack(model, loaded: list[dict], prefix: str):
    arrays, treedef = jax.tree_util.tree_flatten(eqx.filter(model, eqx.is_array))
    leaves = [jnp.stack([d[f"{prefix}{j}"] for d in loaded]) for j in range(len(arrays))]
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves),
                       eqx.filter(model, eqx.is_array, inverse=True))


def restore(task: FitTask, fingerprint: str, batch, previous, states, active, traces,
            stopped):
    """Starts from their checkpoints (every start of a task must be at the same step);
    the state as given when a start has none."""
    paths = [checkpoint_path(task, start, ".npz") for start in task.starts]
    if any(path is None or not os.path.lexists(path) for path in paths):
        return batch, previous, states, active, 0, traces, stopped
    layout = _layout(batch, states)
    loaded = [_read_checked(path, checkpoint_identity(task, start, fingerprint), layout)
              for path, start in zip(paths, task.starts)]
    steps = {int(d["step"]) for d in loaded}
    if len(steps) != 1:
        raise refused(paths[0], f"starts {task.starts} were checkpointed at different steps "
                      f"{sorted(steps)}; resume them in separate tasks (--batch)")
    batch = _restack(batch, loaded, "m")
    previous = _restack(previous, loaded, "p")
    s_leaves, s_def = jax.tree_util.tree_flatten(states)
    states = jax.tree_util.tree_unflatten(
        s_def, [jnp.stack([d[f"s{j}"] for d in loaded]) for j in range(len(s_leaves))])
    active = jnp.asarray([bool(d["active"]) for d in loaded])
    stopped = np.asarray([int(d["stopped"]) for d in loaded], np.int64)
    traces = [list(d["trace"]) for d in loaded]
    return batch, previous, states, active, steps.pop(), traces, stopped
