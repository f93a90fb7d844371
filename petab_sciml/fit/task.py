"""What a worker runs: a fit task (plain, picklable data) and the hooks it reports to.

A task trains some starts of a fit from their start vectors (or their checkpoints) for
a number of steps.  The backends' runners (``Backend.train_starts``, in
``backends/<name>/fit.py``) take a task and :class:`Hooks` and return one
:class:`StartResult` per start.  Tasks run in the calling process or in Dask workers;
nothing in them depends on where.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.fit.signals import raise_if_stop_received

OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop", "adagrad")
"""Optimizer names; the same hyperparameters (PyTorch's defaults) in optax and torch.optim."""

SCHEDULES = ("constant", "cosine", "exponential")
"""Learning-rate schedules over a fit's steps ``k = 0, 1, ...`` (``lr`` the base rate,
``steps`` the fit's steps): ``constant``; ``cosine``, ``lr (1 + cos(pi k / steps)) / 2``
(optax's ``cosine_decay_schedule``, torch's ``CosineAnnealingLR``); ``exponential``,
``lr * lr_decay**k`` (optax's ``exponential_decay``, torch's ``ExponentialLR``)."""


def plateaued(trace: Any, patience: int, min_delta: float) -> bool:
    """Whether a start whose losses so far are ``trace`` stops: its last ``patience``
    losses (``patience`` > 0) each failed to improve, i.e. to fall below the best loss
    before them by more than ``min_delta``.  A function of the trace alone, so a
    resumed fit decides as an uninterrupted one."""
    if patience <= 0 or len(trace) <= patience:
        return False
    best = float(np.min(trace[:-patience]))
    return not any(v < best - min_delta for v in trace[-patience:])


@dataclass
class FitTask:
    problem: str
    """Path of the problem YAML."""
    backend: str
    starts: list[int]
    w0: list[np.ndarray]
    """Start vectors (linear ``w``, ``plan.pack`` layout), one per start."""
    seed: int
    optimizer: str = "adam"
    lr: float = 1e-2
    steps: int = 1000
    options: dict[str, Any] = field(default_factory=dict)
    """Simulation options of the native model."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 50
    resume: bool = False
    trust_code: bool = False
    run_id: str = ""
    schedule: str = "constant"
    """Learning-rate schedule (:data:`SCHEDULES`)."""
    lr_decay: float = 1.0
    """Factor per step of the ``exponential`` schedule."""
    patience: int = 0
    """Stop a start after this many steps without improvement (:func:`plateaued`);
    0: never."""
    min_delta: float = 0.0
    """The decrease of the loss below its best so far that counts as an improvement."""
    limits: dict[str, int] = field(default_factory=dict)
    """Budgets of :func:`petab_sciml.limits.use_limits` for loading the problem."""


@dataclass
class StartResult:
    start: int
    trace: np.ndarray
    """Loss (negative log-posterior) before each step taken."""
    value: float
    """Objective at the final values (eval mode)."""
    w: np.ndarray
    """Final linear parameter vector (``plan.pack`` layout)."""
    mech: np.ndarray
    """Final mechanistic parameters on their ``parameterScale``."""
    optimizer_state: dict[str, np.ndarray]
    """The optimizer state's arrays by name."""
    ok: bool
    steps: int
    seconds: float
    interrupted: bool = False
    stopped_at: int = 0
    """The step (1-based) whose loss was not finite (the ODE solve failed, or it
    overflowed): training of the start ended there and its values are those of the step
    before; 0 if it never happened."""
    parameters: dict[str, np.ndarray] = field(default_factory=dict)
    """The final values by name (:func:`petab_sciml.fit.results.parameter_layout`):
    filled by :class:`~petab_sciml.fit.results.FitResult`."""


@dataclass
class Hooks:
    """Callbacks of a running task: ``report(starts, step, losses)`` after each step and
    ``stop()`` (checked every few steps) to end early with a checkpoint."""

    report: Callable[[list[int], int, np.ndarray], None] = lambda s, k, v: None
    stop: Callable[[], bool] = lambda: False
    stop_every_s: float = 0.5
    _last: float = field(default=0.0, repr=False)

    def should_stop(self) -> bool:
        """Whether ``stop()`` asks to end (asked at most every ``stop_every_s``); raises
        :class:`~petab_sciml.fit.signals.FitSignalled` if a stop signal's exception was
        swallowed before it could end the fit."""
        raise_if_stop_received()
        now = time.monotonic()
        if now - self._last < self.stop_every_s:
            return False
        self._last = now
        return bool(self.stop())


def dropout_seed(seed: int, start: int) -> int:
    """Seed of start ``start``'s dropout masks (a stream apart from its start point)."""
    return int(np.random.default_rng([int(seed), int(start), 1]).integers(2**31 - 1))


def checkpoint_path(task: FitTask, start: int, suffix: str) -> Path | None:
    if task.checkpoint_dir is None:
        return None
    return Path(task.checkpoint_dir) / f"start_{start:04d}{suffix}"


_PROBLEMS: dict[tuple, Any] = {}


def load_cached(path: str, backend: str, trust_code: bool,
                limits: dict[str, int] | None = None) -> Any:
    """The loaded problem, once per worker process (``limits``: budgets of
    :func:`petab_sciml.limits.use_limits` for the load)."""
    limits = dict(limits or {})
    key = (str(Path(path).resolve()), backend, trust_code, tuple(sorted(limits.items())))
    if key not in _PROBLEMS:
        from petab_sciml.limits import use_limits
        from petab_sciml.problem import load_problem

        with use_limits(**limits):
            _PROBLEMS[key] = load_problem(path, backend=backend, trust_code=trust_code)
    return _PROBLEMS[key]
