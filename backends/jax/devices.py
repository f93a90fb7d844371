"""Batched experiments spread over several JAX devices.

XLA on a CPU runs one batched solve on one core: its products of a few hundred rows
are too small to split over threads.  Given several devices (on a CPU: one per core,
:func:`use_cpu_cores_by_default`), the executor splits a batch of experiments into
equal shares, one per device, with ``jax.shard_map``: every device solves its share
as one batched solve (``vmap``), with its own loops and no exchange between devices
until the solves end; the gradient's sums over the shares are added at the end
(``benchmarks/bench_five_state.py``, ``bench_experiments.py``; ``--cores 1``: one
device).

Every experiment is solved with the same numbers as in one batch (its solve does not
depend on the other rows of its batch); the objective and gradient change only by the
order of their sums over experiments.

JAX gives a CPU one device unless told otherwise before its first computation.  So
the JAX backend, when it is first used and JAX has not computed anything yet, gives
JAX one CPU device per core (:func:`use_cpu_cores_by_default`), as it switches on
float64: a process-wide JAX setting, chosen because the split halves the cost of large
batches on a 2-core machine and changes nothing else (arrays and computations stay on
the first device unless placed elsewhere; ``jax.devices()`` lists one CPU device per
core).  Set by the user, it is left alone: ``JAX_NUM_CPU_DEVICES=1`` in the
environment, ``jax.config.update("jax_num_cpu_devices", n)`` or :func:`use_cpu_cores`
``(n)`` before using the backend, or ``--xla_force_host_platform_device_count`` in
``XLA_FLAGS``.  A process whose JAX has already computed keeps its devices.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

MIN_EXPERIMENTS_PER_DEVICE = 8
"""A batch is split only when every device gets at least this many experiments: the
split costs a fixed synchronisation per call, which smaller shares do not repay."""

_LOCK = threading.RLock()


def use_cpu_cores(n: int | None = None) -> int:
    """Give JAX one CPU device per core (``n``, default: the cores this process may
    run on), so that batched experiments are spread over them.  The backend does this
    itself (:func:`use_cpu_cores_by_default`); call it to choose ``n`` (``1``: no
    split), before JAX's first computation (JAX fixes its devices then).  Returns the
    number of devices.

    Raises ``RuntimeError`` (naming the fix) when JAX has already started."""
    import jax

    if n is None:
        n = available_cores()
    if n < 1:
        raise ValueError(f"use_cpu_cores: n must be at least 1, got {n}")
    try:
        jax.config.update("jax_num_cpu_devices", int(n))
    except RuntimeError as err:
        raise RuntimeError(
            "use_cpu_cores() must run before JAX's first computation (JAX has already "
            f"started with {jax.local_device_count()} device(s)); call it right after "
            "importing petab_sciml, before loading or simulating a problem") from err
    return int(n)


_DEFAULT_CHECKED = False


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def use_cpu_cores_by_default() -> int | None:
    """Give JAX one CPU device per available core unless the user chose its CPU device
    count or JAX has already computed; checked once per process, called by the JAX
    backend before its first computation.  Returns the number of CPU devices set, or
    None when JAX's setting was left as it was (see the module docstring)."""
    global _DEFAULT_CHECKED
    with _LOCK:
        if _DEFAULT_CHECKED:
            return None
        _DEFAULT_CHECKED = True
        import jax

        if getattr(jax.config, "jax_num_cpu_devices", None) != -1:
            return None     # the user's choice (or a JAX without that option)
        if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
            return None
        n = available_cores()
        if n < 2:
            return None
        try:
            jax.config.update("jax_num_cpu_devices", n)
        except RuntimeError:
            return None     # JAX has already computed: its devices are fixed
        return n


def experiment_devices(requested: int | None) -> list[Any]:
    """The devices batched experiments are spread over: ``requested`` (``JaxOptions.
    devices``) first local devices of JAX's default backend, None: all of them.
    One device means no split; so does a JAX without ``jax.shard_map`` (with a
    warning)."""
    import jax

    devices = jax.local_devices()
    if requested is not None:
        if requested < 1 or requested > len(devices):
            raise ValueError(f"JaxOptions.devices={requested}: JAX has {len(devices)} "
                             f"local device(s) (use_cpu_cores() gives it one per core)")
        devices = devices[:requested]
    if len(devices) > 1 and not callable(getattr(jax, "shard_map", None)):
        import warnings

        warnings.warn(f"JAX {jax.__version__} has no jax.shard_map: batches of experiments "
                      f"are not split over its {len(devices)} devices (newer JAX releases have it)",
                      RuntimeWarning, stacklevel=3)
        return devices[:1]
    return list(devices)


def shares(n_devices: int, n_experiments: int) -> int:
    """Into how many shares a batch of ``n_experiments`` is split (1: not split)."""
    if n_devices > 1 and n_experiments >= MIN_EXPERIMENTS_PER_DEVICE * n_devices:
        return n_devices
    return 1


def sharded_map(fn: Callable[..., Any], args: tuple, n: int, devices: list[Any]) -> Any:
    """``jax.vmap(fn)(*args)`` (leading axis ``n``) with the batch split into one share
    per device.  A batch that does not divide evenly is padded with copies of its last
    experiment, whose results are dropped (they reach nothing, so no gradient)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec

    k = len(devices)
    padded = -(-n // k) * k
    if padded != n:
        args = jax.tree_util.tree_map(
            lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], padded - n, axis=0)]), args)
    mesh = Mesh(devices, ("experiments",))
    split = PartitionSpec("experiments")
    # check_vma=False: the replication checker types the two branches of equinox's
    # error checks (eqxi.error_if inside diffrax) differently and rejects them ("cond
    # branches must have equal output types"); every output here is per share anyway.
    local = jax.shard_map(lambda a: jax.vmap(fn)(*a), mesh=mesh, in_specs=(split,),
                          out_specs=split, check_vma=False)
    out = local(args)
    if padded != n:
        out = jax.tree_util.tree_map(lambda a: a[:n], out)
    return out


@contextlib.contextmanager
def closure_conversion_inside_shard_map() -> Iterator[None]:
    """While our objective is traced: equinox's closure conversion (diffrax's solve
    loops) compares the arguments a converted function is called with against its
    example arguments *including their sharding*; inside ``shard_map`` the two carry
    different mesh annotations for the same shapes and dtypes, and the check fails
    (equinox 0.13: "Closure-converted function called with different dynamic
    arguments").  Within this block the comparison is made on shapes and dtypes only,
    as it was before equinox added sharding to it.  Re-entrant; restored on exit."""
    import equinox._ad as ad

    strip = getattr(ad, "_strip_weak_dtype", None)
    if strip is None:   # an equinox without that check: nothing to relax
        yield
        return
    import jax

    def shapes_and_dtypes(tree: Any) -> Any:
        return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)

    with _LOCK:
        ad._strip_weak_dtype = shapes_and_dtypes
        try:
            yield
        finally:
            ad._strip_weak_dtype = strip
