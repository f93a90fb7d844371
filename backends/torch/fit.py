"""Training starts in PyTorch: each start a native ``TorchProblem`` trained by a
``torch.optim`` optimizer (``petab_sciml.fit`` drives it; a fit's starts run in worker
processes).

Each step: ``zero_grad``, ``loss = module()`` (training mode: the dropout column with
the start's own ``torch.Generator``), ``backward``, ``step``, ``project_``. A start
whose loss is not finite ends there with the values of the step before (``stopped_at``).
Checkpoints (one ``.pt`` per start: module and optimizer state dicts, generator state,
step, loss trace; :mod:`.checkpoint`) are written every ``checkpoint_every`` steps, when
stopped and at the end; a resumed task checks every start's checkpoint before it trains
any (:func:`check_resume`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch

from petab_sciml.fit.artifacts import checkpoint_identity
from petab_sciml.fit.task import (
    FitTask,
    Hooks,
    StartResult,
    checkpoint_path,
    dropout_seed,
    load_cached,
    plateaued,
)

from .checkpoint import load_checkpoint, save_checkpoint

_MODULES: dict[tuple, Any] = {}


def optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    table = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
             "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(table)}")
    return table[name](params, lr=lr)


def scheduler(opt: torch.optim.Optimizer, schedule: str, steps: int, lr_decay: float):
    """The ``torch.optim.lr_scheduler`` of ``schedule``
    (``petab_sciml.fit.task.SCHEDULES``; None for a constant rate), stepped after each
    optimizer step."""
    from torch.optim import lr_scheduler

    if schedule == "constant":
        return None
    if schedule == "cosine":
        return lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    if schedule == "exponential":
        return lr_scheduler.ExponentialLR(opt, gamma=lr_decay)
    raise ValueError(f"unknown schedule {schedule!r}")


def _continue_schedule(sched: Any, opt: torch.optim.Optimizer, done: int) -> None:
    """A scheduler made afresh continues at step ``done``: the optimizer's restored
    learning rates are the schedule's at ``done`` (the checkpoint keeps them)."""
    if sched is not None:
        sched.last_epoch = done
        sched._last_lr = [group["lr"] for group in opt.param_groups]


def _module(task: FitTask):
    """One native module per worker and problem (its compiled solves are reused)."""
    key = (task.problem, tuple(sorted(task.options.items())))
    if key not in _MODULES:
        problem = load_cached(task.problem, "torch", task.trust_code, task.limits)
        _MODULES[key] = problem.model(**task.options)
    return _MODULES[key]


def train_starts(task: FitTask, hooks: Hooks | None = None) -> list[StartResult]:
    hooks = hooks or Hooks()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        check_resume(task)
        return [_train_one(task, i, hooks) for i in range(len(task.starts))]
    finally:
        torch.set_num_threads(threads)


def check_resume(task: FitTask) -> None:
    """Check every checkpoint a resumed ``task`` would continue from (restoring each
    into a scratch optimizer), so that a bad one stops the fit before any start
    trains; raises :class:`~petab_sciml.fit.artifacts.ArtifactError`."""
    if not task.resume:
        return
    for i in range(len(task.starts)):
        _start_state(task, i)


def _start_state(task: FitTask, i: int) -> tuple:
    """(module, optimizer, learning-rate scheduler (or None), trainable parameters,
    their previous values, step, trace, stopped_at) of start ``i`` of ``task``: at its
    start vector, or restored from its checkpoint when resuming."""
    module = _module(task)
    start = task.starts[i]
    _load_vector(module, task.w0[i])
    module.train()
    module.generator = torch.Generator().manual_seed(dropout_seed(task.seed, start))
    params = [p for p in module.parameters() if p.requires_grad]
    opt = optimizer(task.optimizer, params, task.lr)
    sched = scheduler(opt, task.schedule, task.steps, task.lr_decay)
    previous = [p.detach().clone() for p in params]
    path = checkpoint_path(task, start, ".pt")
    if task.resume and path is not None and os.path.lexists(path):
        identity = checkpoint_identity(task, start, module.plan.fingerprint)
        restored = load_checkpoint(path, identity, module, opt, previous)
        _continue_schedule(sched, opt, restored.step)
        return (module, opt, sched, params, previous, restored.step, restored.trace,
                restored.stopped_at)
    return module, opt, sched, params, previous, 0, [], 0


def _train_one(task: FitTask, i: int, hooks: Hooks) -> StartResult:
    start = task.starts[i]
    module, opt, sched, params, previous, done, trace, stopped_at = _start_state(task, i)
    plan = module.plan
    path = checkpoint_path(task, start, ".pt")
    identity = checkpoint_identity(task, start, plan.fingerprint)
    t0 = time.perf_counter()
    interrupted = False
    try:
        for k in range(done, task.steps if not stopped_at else done):
            if plateaued(trace, task.patience, task.min_delta):
                break   # (also a start resumed after it had plateaued)
            if hooks.should_stop():
                interrupted = True
                break
            opt.zero_grad()
            value = module()
            trace.append(value.item())
            done = k + 1
            if not np.isfinite(trace[-1]):
                # the values of this step failed (the gradient is no guide): keep those
                # of the step before and end this start
                with torch.no_grad():
                    for p, q in zip(params, previous):
                        p.copy_(q)
                stopped_at = done
                hooks.report([start], done, np.array([trace[-1]]))
                break
            value.backward()
            with torch.no_grad():
                for p, q in zip(params, previous):
                    q.copy_(p)
            opt.step()
            if sched is not None:
                sched.step()
            module.project_()
            hooks.report([start], done, np.array([trace[-1]]))
            if task.checkpoint_every and done % task.checkpoint_every == 0:
                _save(path, identity, module, opt, done, trace, stopped_at, previous)
    except KeyboardInterrupt:
        _save(path, identity, module, opt, done, trace, stopped_at, previous)
        raise
    _save(path, identity, module, opt, done, trace, stopped_at, previous)
    seconds = time.perf_counter() - t0
    module.eval()
    with torch.no_grad():
        out = module.evaluate()
    # the optimizer state by parameter name (torch.optim numbers the parameters)
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    state = {f"{names[k]}.{name}": np.asarray(v.detach().cpu().numpy() if torch.is_tensor(v)
                                              else v)
             for k, entry in opt.state_dict()["state"].items() for name, v in entry.items()}
    return StartResult(start, np.asarray(trace, np.float64), float(out["value"]),
                       plan.pack(module.values()), module.mech.detach().numpy().copy(),
                       state, bool(out["ok"]), done, seconds, interrupted, stopped_at)


def _load_vector(module, w: np.ndarray) -> None:
    """Set the module's values to the linear vector ``w``."""
    from petab_sciml.simulation.scales import to_scale

    plan = module.plan
    with torch.no_grad():
        module.mech.copy_(torch.as_tensor(to_scale(w[: plan.n_mech], module.scales)))
        for net in plan.networks:
            state = module.nets[net.id].state_dict(keep_vars=True)
            for s in net.arrays:
                state[s.key].copy_(torch.as_tensor(
                    w[s.offset: s.offset + s.size].reshape(s.shape)))


def _save(path, identity, module, opt, done: int, trace: list[float], stopped_at: int,
          previous: list[torch.Tensor]) -> None:
    if path is not None:
        save_checkpoint(path, identity, module, opt, done, trace, stopped_at, previous)
