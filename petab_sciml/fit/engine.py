"""Running a fit's tasks: in this process, or on Dask distributed.

* One start, or ``in_process=True``: the tasks run here, one after the other; Dask is
  not imported.
* Otherwise on a Dask cluster: the client given, the scheduler at ``scheduler``
  (``tcp://host:8786``), or an embedded ``LocalCluster`` of worker processes.  Each task
  is one Dask task; workers report progress as Dask events (``log_event`` on the topic
  ``petab_sciml.fit.<run id>``) and stop at a Dask ``Event`` (set on Ctrl-C), writing
  their checkpoints first.  We write no scheduler of our own.

Tasks are the same wherever they run (``FitTask``), and each start's computation does
not depend on its task's other starts, so a fit gives the same per-start results in
this process and on any cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from petab_sciml.fit.task import FitTask, Hooks, StartResult

Progress = Callable[[list[int], int, np.ndarray], None]


def worker_thread_env() -> dict[str, str]:
    """Environment of the embedded LocalCluster's workers: one thread each (OpenMP,
    MKL, XLA's intra-op threads and one JAX device; PyTorch starts run with one intra-op
    thread anyway), so that workers times threads never exceeds the cores (one worker
    per core, at most 4): each start is small, and workers that each took every core
    would only wait for each other.  The user's own ``XLA_FLAGS`` are kept (ours
    appended)."""
    flags = os.environ.get("XLA_FLAGS", "")
    ours = ["--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1"]
    if "xla_force_host_platform_device_count" not in flags:
        ours.append("--xla_force_host_platform_device_count=1")
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
            "XLA_FLAGS": " ".join([flags, *ours]).strip()}


def run_task(task: FitTask, hooks: Hooks | None = None) -> list[StartResult]:
    """Run ``task`` with its backend's runner (``Backend.train_starts``)."""
    from petab_sciml.plugins import get_backend

    return get_backend(task.backend).train_starts(task, hooks)


def run_in_process(tasks: list[FitTask], progress: Progress) -> list[StartResult]:
    out: list[StartResult] = []
    for task in tasks:
        out.extend(run_task(task, Hooks(report=progress)))
    return out


def _worker_task(task: FitTask) -> list[StartResult]:
    """What a Dask worker runs: the task, reporting progress as events."""
    from distributed import Event, get_worker

    worker = get_worker()
    topic = f"petab_sciml.fit.{task.run_id}"
    stop = Event(f"{topic}.stop")
    last = [0.0]

    def report(starts, step, losses):
        now = time.monotonic()
        if now - last[0] >= 0.2 or step == task.steps:
            last[0] = now
            worker.log_event(topic, {"starts": list(starts), "step": int(step),
                                     "losses": [float(v) for v in losses]})

    return run_task(task, Hooks(report=report, stop=stop.is_set, stop_every_s=1.0))


def connect(client: Any = None, scheduler: str | None = None, n_workers: int | None = None
            ) -> tuple[Any, Any]:
    """``(client, cluster)``: the given client, one connected to ``scheduler``, or one of
    an embedded ``LocalCluster`` (``cluster`` is then to be closed by the caller)."""
    from petab_sciml.errors import require

    require("distributed", "fit")
    from distributed import Client, LocalCluster

    if client is not None:
        return client, None
    if scheduler:
        return Client(scheduler, timeout="20s"), None
    from petab_sciml.fit.signals import children_ignore_stop_signals

    n = n_workers or max(1, min(os.cpu_count() or 1, 4))
    with children_ignore_stop_signals():
        # the fit's process stops the workers on SIGTERM / SIGHUP (they checkpoint)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=40,
                               env=worker_thread_env())
    return Client(cluster), cluster


def run_on_dask(tasks: list[FitTask], client: Any, progress: Progress,
                stop_timeout_s: float = 120.0) -> list[StartResult]:
    """Submit every task; on Ctrl-C (or SIGTERM / SIGHUP, :mod:`.signals`) ask the
    workers to stop (they checkpoint), then re-raise the ``KeyboardInterrupt``."""
    from distributed import Event, wait

    run_id = tasks[0].run_id
    topic = f"petab_sciml.fit.{run_id}"
    stop = Event(f"{topic}.stop", client=client)

    def handler(event):
        _, msg = event
        progress(msg["starts"], msg["step"], np.asarray(msg["losses"]))

    client.subscribe_topic(topic, handler)
    futures = [client.submit(_worker_task, task, pure=False, key=f"{topic}-{i}")
               for i, task in enumerate(tasks)]
    try:
        wait(futures)
        results = client.gather(futures)
    except KeyboardInterrupt:
        stop.set()
        try:
            wait(futures, timeout=stop_timeout_s)
        except Exception:  # noqa: BLE001 - a worker that cannot stop in time
            pass
        raise
    finally:
        client.unsubscribe_topic(topic)
    return [r for chunk in results for r in chunk]
