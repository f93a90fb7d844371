"""Training starts in PyTorch: each start a native ``TorchProblem`` trained by a
``torch.optim`` optimizer (``petab_sciml.fit`` drives it; a fit's starts run in worker
processes).

Each step: ``zero_grad``, ``loss = module()`` (training mode: the dropout column with
the start's own ``torch.Generator``), ``backward``, ``step``, ``project_``. A start
whose loss is not finite ends there with the values of the step before (``stopped_at``).
Checkpoints (one ``.pt`` per start: module and optimizer state dicts, generator state,
step, loss trace) are written every ``checkpoint_every`` steps, when stopped and at the
end.
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import torch

from petab_sciml.fit.task import (
    FitTask,
    Hooks,
    StartResult,
    checkpoint_path,
    dropout_seed,
    load_cached,
)

_MODULES: dict[tuple, Any] = {}


def optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    table = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD,
             "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
    if name not in table:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(table)}")
    return table[name](params, lr=lr)


def _module(task: FitTask):
    """One native module per worker and problem (its compiled solves are reused)."""
    key = (task.problem, tuple(sorted(task.options.items())))
    if key not in _MODULES:
        problem = load_cached(task.problem, "torch", task.trust_code)
        _MODULES[key] = problem.model(**task.options)
    return _MODULES[key]


def train_starts(task: FitTask, hooks: Hooks | None = None) -> list[StartResult]:
    hooks = hooks or Hooks()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [_train_one(task, i, hooks) for i in range(len(task.starts))]
    finally:
        torch.set_num_threads(threads)


def _train_one(task: FitTask, i: int, hooks: Hooks) -> StartResult:
    module = _module(task)
    plan = module.plan
    start = task.starts[i]
    _load_vector(module, task.w0[i])
    module.train()
    module.generator = torch.Generator().manual_seed(dropout_seed(task.seed, start))
    opt = optimizer(task.optimizer, [p for p in module.parameters() if p.requires_grad],
                    task.lr)
    trace: list[float] = []
    done = stopped_at = 0
    params = [p for p in module.parameters() if p.requires_grad]
    previous = [p.detach().clone() for p in params]
    path = checkpoint_path(task, start, ".pt")
    if task.resume and path is not None and path.is_file():
        saved = torch.load(path, weights_only=False)
        module.load_state_dict(saved["module"])
        opt.load_state_dict(saved["optimizer"])
        module.generator.set_state(saved["generator"])
        done, trace = int(saved["step"]), list(saved["trace"])
        stopped_at = int(saved["stopped_at"])
        for q, v in zip(previous, saved["previous"]):
            q.copy_(v)
    t0 = time.perf_counter()
    interrupted = False
    try:
        for k in range(done, task.steps if not stopped_at else done):
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
            module.project_()
            hooks.report([start], done, np.array([trace[-1]]))
            if task.checkpoint_every and done % task.checkpoint_every == 0:
                _save(path, module, opt, done, trace, stopped_at, previous)
    except KeyboardInterrupt:
        _save(path, module, opt, done, trace, stopped_at, previous)
        raise
    _save(path, module, opt, done, trace, stopped_at, previous)
    seconds = time.perf_counter() - t0
    module.eval()
    with torch.no_grad():
        out = module.evaluate()
    state = {f"{k}.{name}": np.asarray(v.detach().cpu().numpy() if torch.is_tensor(v) else v)
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


def _save(path, module, opt, done: int, trace: list[float], stopped_at: int,
          previous: list[torch.Tensor]) -> None:
    if path is None:
        return
    from petab_sciml.safe_write import write_bytes

    buffer = io.BytesIO()
    torch.save({"module": module.state_dict(), "optimizer": opt.state_dict(),
                "generator": module.generator.get_state(), "step": done,
                "trace": trace, "stopped_at": stopped_at, "previous": previous}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, buffer.getvalue(), overwrite=True)
