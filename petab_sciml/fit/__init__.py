"""Multi-start training of a PEtab SciML problem: ``fit`` and ``petab-sciml fit``.

    result = fit("problem.yaml", backend="jax", starts=4, steps=1000, lr=1e-2, out="fit/")
    result.best.value, result.best.w, result.files["waterfall"]

Starts (:mod:`.starts`) are trained by the backend's optimizer on its native model
(optax in JAX, torch.optim in PyTorch).  In JAX a task's starts are one vmapped, jitted
computation; in PyTorch each start is a task.  Tasks run in this process (one start, or
``in_process=True``) or on Dask distributed (:mod:`.engine`).  Into ``out`` go
``results.h5`` (:mod:`.results`), the best start as a complete PEtab SciML problem
(``best/``), PNG plots (:mod:`.plots`), ``fit.json`` (the settings) and the checkpoints
that ``resume=True`` continues from.  Ctrl-C, SIGTERM and SIGHUP stop every start with a
checkpoint (:mod:`.signals`).  See ``docs/fit.md``.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.errors import PetabSciMLError
from petab_sciml.fit.results import FitResult, parameter_layout, summary_table
from petab_sciml.fit.task import OPTIMIZERS, SCHEDULES, FitTask

__all__ = ["FitError", "FitResult", "fit", "learned_terms"]


class FitError(PetabSciMLError):
    """A fit cannot start (bad settings, an output folder in the way, nothing to resume)."""


SETTINGS = ("backend", "optimizer", "lr", "seed", "starts", "batch", "options",
            "start_from_nominal", "schedule", "lr_decay", "patience", "min_delta")
"""Settings a resumed fit must share with the interrupted one (``steps`` may grow)."""

LATER_SETTINGS = {"start_from_nominal": False, "schedule": "constant", "lr_decay": None,
                  "patience": 0, "min_delta": 0.0}
"""Settings added after the first fits were recorded, with the value a record without
them means."""


PLAIN_PROGRESS_EVERY_S = 10.0
"""Without a terminal, a start's progress line is printed at least this often (seconds),
and at every tenth of its steps."""


def fit(problem: Any, *, backend: str | None = None, optimizer: str = "adam",
        lr: float = 1e-2, steps: int = 1000, starts: int = 4, seed: int = 0,
        out: str | os.PathLike | None = None, client: Any = None,
        scheduler: str | None = None, in_process: bool = False, batch: int | None = None,
        n_workers: int | None = None, resume: bool = False, force: bool = False,
        checkpoint_every: int = 50, plots: bool = True, progress: bool = True,
        trust_code: bool = False, console: Any = None,
        progress_every_s: float = PLAIN_PROGRESS_EVERY_S, start_from_nominal: bool = False,
        schedule: str = "constant", lr_decay: float | None = None, patience: int = 0,
        min_delta: float = 0.0, limits: dict[str, int] | None = None,
        start_vectors: Any = None, **options: Any) -> FitResult:
    """Train ``starts`` starts of ``problem`` (a path or a loaded problem) for ``steps``
    steps each and return the :class:`FitResult`.

    ``backend``: ``jax`` (default: the loaded problem's, else jax) or ``torch``;
    ``optimizer``: one of :data:`~petab_sciml.fit.task.OPTIMIZERS`, learning rate ``lr``;
    ``batch``: starts per task (JAX: per vmapped computation; default all of them);
    ``client`` / ``scheduler`` / ``n_workers``: where tasks run (see :mod:`.engine`);
    ``out``: the output folder (refused if it holds another fit, unless ``force``);
    ``resume``: continue the fit in ``out`` from its checkpoints, with the same settings;
    ``schedule``: the learning-rate schedule over the steps (one of
    :data:`~petab_sciml.fit.task.SCHEDULES`; ``exponential`` multiplies the rate by
    ``lr_decay`` each step); ``patience`` > 0: a start stops once its loss has not
    fallen below its best by more than ``min_delta`` for that many steps
    (:func:`~petab_sciml.fit.task.plateaued`); ``start_from_nominal``: start 0 begins
    at the problem's nominal values (parameter table and array files) instead of a draw;
    ``progress``: show every start's loss (a live table on a terminal; elsewhere a
    plain line per start every ``progress_every_s`` seconds and every tenth of the
    steps); ``limits``: budgets on what input files may cost
    (:func:`petab_sciml.limits.use_limits`, ``{"max_elements": 10**9}``), for every load
    of the problem, in workers too; ``start_vectors``: the starts' parameter vectors
    (``(starts, plan.n_w)``, ``plan.pack`` layout) instead of drawn ones (a training
    strategy's stages, :mod:`.strategy`); ``options``: the backend's simulation options.
    """
    from petab_sciml.limits import use_limits
    from petab_sciml.problem import load_problem

    if optimizer not in OPTIMIZERS:
        raise FitError(f"unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    if starts < 1 or steps < 0 or not lr > 0:
        raise FitError("starts must be >= 1, steps >= 0 and lr > 0")
    if schedule not in SCHEDULES:
        raise FitError(f"unknown schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if (schedule == "exponential") != (lr_decay is not None):
        raise FitError("lr_decay (--lr-decay) goes with the exponential schedule, and only "
                       "with it")
    if lr_decay is not None and not 0 < lr_decay <= 1:
        raise FitError(f"lr_decay must be in (0, 1], got {lr_decay}")
    if patience < 0 or not min_delta >= 0:
        raise FitError("patience must be >= 0 and min_delta >= 0")
    path = Path(getattr(problem, "path", problem))
    limits = dict(limits or {})
    if isinstance(problem, (str, os.PathLike)):
        backend = backend or "jax"
        with use_limits(**limits):
            problem = load_problem(path, backend=backend, trust_code=trust_code)
    backend = backend or problem.backend_name
    if backend != problem.backend_name:
        with use_limits(**limits):
            problem = load_problem(path, backend=backend, trust_code=trust_code)
    plan = problem.plan
    batch = batch or (starts if backend == "jax" else 1)
    settings = {"problem": str(path.resolve()), "backend": backend, "optimizer": optimizer,
                "lr": lr, "steps": steps, "seed": seed, "starts": starts, "batch": batch,
                "options": json.dumps(options, sort_keys=True),
                "start_from_nominal": start_from_nominal, "schedule": schedule,
                "lr_decay": lr_decay, "patience": patience, "min_delta": min_delta}
    out = Path(out) if out is not None else None
    checkpoints = _prepare_out(out, settings, resume, force)

    from rich.console import Console

    from petab_sciml.fit.starts import draw_starts

    console = console or Console(stderr=True)
    simulator = _simulator(problem, options)
    try:
        if start_vectors is not None:
            vectors = _given_starts(start_vectors, starts, plan.n_w)
        else:
            vectors = draw_starts(problem, seed, starts,
                                  lambda w: simulator.evaluate(w, grad=False).value,
                                  report=lambda text: console.print(text) if progress
                                  else None, nominal_first=start_from_nominal)
    except ValueError as exc:
        raise FitError(str(exc)) from None
    run_id = uuid.uuid4().hex[:12]
    tasks = [FitTask(str(path), backend, list(range(a, min(a + batch, starts))),
                     vectors[a: a + batch], seed, optimizer, lr, steps, dict(options),
                     str(checkpoints) if checkpoints else None, checkpoint_every, resume,
                     trust_code, run_id, schedule=schedule,
                     lr_decay=1.0 if lr_decay is None else lr_decay, patience=patience,
                     min_delta=min_delta, limits=limits)
             for a in range(0, starts, batch)]

    _check_resume(backend, tasks)
    _write_record(out, settings)
    display = _Progress(starts, steps, console, enabled=progress, every_s=progress_every_s)
    local = in_process or starts == 1
    t0 = time.perf_counter()
    from petab_sciml.fit.signals import stop_signals_interrupt

    with stop_signals_interrupt(), display:
        if local:
            from petab_sciml.fit.engine import run_in_process

            results = run_in_process(tasks, display.update)
        else:
            from petab_sciml.fit.engine import connect, run_on_dask

            dask_client, cluster = connect(client, scheduler, n_workers)
            try:
                results = run_on_dask(tasks, dask_client, display.update)
            finally:
                if cluster is not None:
                    dask_client.close()
                    cluster.close()
    settings["seconds"] = time.perf_counter() - t0
    result = FitResult(sorted(results, key=lambda r: r.start), settings, plan.mech_ids, out,
                       layout=parameter_layout(plan))
    if out is not None:
        _write_outputs(problem, simulator, result, out, plots)
    return result


def _given_starts(vectors: Any, starts: int, n_w: int) -> list[np.ndarray]:
    out = [np.array(v, dtype=np.float64) for v in vectors]
    if len(out) != starts or any(v.shape != (n_w,) for v in out):
        raise ValueError(f"start_vectors: expected {starts} vectors of {n_w} values")
    return out


def _simulator(problem: Any, options: dict[str, Any]) -> Any:
    """The problem's objective with the fit's simulation options (start checks, plots)."""
    if problem.backend_name == "jax":
        options = {"cache": False, **options}
    return problem.simulator(**options)


def _prepare_out(out: Path | None, settings: dict, resume: bool, force: bool) -> Path | None:
    if out is None:
        if resume:
            raise FitError("resume needs the output folder of the interrupted fit")
        return None
    from petab_sciml.fit.artifacts import START_OVER, check_fit_folder, read_fit_record

    record = out / "fit.json"
    if resume:
        if out.is_dir():
            check_fit_folder(out, force=False)
        if not os.path.lexists(record):
            raise FitError(f"nothing to resume: {record} does not exist", file=record)
        saved = {**LATER_SETTINGS, **read_fit_record(record)}   # older records lack some
        diff = [k for k in SETTINGS if saved.get(k) != settings[k]]
        if diff:
            raise FitError("resume with the settings of the interrupted fit; these differ: "
                           + ", ".join(f"{k} ({_shown(saved.get(k))} there, "
                                       f"{_shown(settings[k])} now)" for k in diff)
                           + f"; {START_OVER}", file=record)
    elif out.exists() and any(out.iterdir()) and not force:
        raise FitError(f"{out} is not empty; pass --force (force=True) to replace its fit, "
                       "or --resume to continue it", file=out)
    elif out.is_dir():
        check_fit_folder(out, force=True)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        import shutil

        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return out / "checkpoints"


def _write_record(out: Path | None, settings: dict) -> None:
    """``fit.json``: the settings (written once a resumed fit's checkpoints passed)."""
    if out is not None:
        from petab_sciml.safe_write import write_text

        write_text(out / "fit.json", json.dumps(settings, indent=2) + "\n", overwrite=True)


def _shown(value: Any) -> str:
    """``repr(value)``, cut short (a value read from a file may be long)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_resume(backend: str, tasks: list[FitTask]) -> None:
    """Every checkpoint resumed tasks continue from, checked before any task trains."""
    from petab_sciml.plugins import get_backend

    check = getattr(get_backend(backend), "check_resume", None)
    for task in tasks if check is not None else ():
        if task.resume:
            check(task)


def _write_outputs(problem: Any, simulator: Any, result: FitResult, out: Path,
                   plots: bool) -> None:
    from petab_sciml.fit import plots as figures

    plan = problem.plan
    result.files["results"] = result.save(out / "results.h5")
    best = result.best
    values = plan.unpack(best.w)
    result.files["best"] = problem.save(values, out / "best", force=True)
    if plots:
        import matplotlib.pyplot as plt

        plot_dir = out / "plots"
        for name, draw in (("waterfall", figures.waterfall), ("loss", figures.loss_curves)):
            path = plot_dir / f"{name}.png"
            plt.close(draw(result, path))
            result.files[name] = path
        evaluation = simulator.evaluate(best.w, grad=False)
        dense = _dense_simulation(problem, simulator, best.w)
        for name, fig in figures.fits(plan, evaluation, plot_dir, dense=dense,
                                      units=model_units(problem)).items():
            result.files[name] = plot_dir / f"{name}.png"
            plt.close(fig)
        for name, fig in figures.learned_terms(learned_terms(problem, simulator, best.w),
                                               plot_dir).items():
            result.files[name] = plot_dir / f"{name}.png"
            plt.close(fig)


def model_units(problem: Any) -> tuple[str | None, dict[str, str]]:
    """``(time unit, {observable id: unit})`` where the problem's SBML model declares
    them (:mod:`petab_sciml.sbml_units`)."""
    from petab_sciml.sbml_units import declared_units, observable_units

    config = problem.data.config
    entry = next(iter(config.model_files.values()))
    time, units = declared_units(config.resolve(entry["location"]))
    return time, observable_units(problem.plan, units)


def learned_terms(problem: Any, simulator: Any, w: np.ndarray) -> list[dict[str, Any]]:
    """What each network inside the model learned, for plots: every network evaluated
    in the ODE or the observables whose inputs are all formulas (a network with an input
    from an array file is left out), over the range its inputs take along the dense
    simulation of ``w``.

    Per network: ``id``, ``inputs`` (the input formulas, all arguments in order),
    ``seen`` (the inputs along the trajectories, ``(times, k)``), ``axes`` (k grids over
    their ranges), ``points`` (the points the network is evaluated at, ``(n, k)``),
    ``outputs`` (``{output id: values}``) and ``kind``:

    - ``"line"`` (k = 1): ``points`` the grid, outputs of shape ``(len(axes[0]),)``;
    - ``"map"`` (k = 2): the grid's points, the first axis fastest, outputs of shape
      ``(len(axes[1]), len(axes[0]))``;
    - ``"sweeps"`` (k >= 3): one sweep per input along its axis, the other inputs at
      their median along the trajectories; ``points`` the sweeps one after another,
      outputs of shape ``(k, len(axes[i]))``, row ``i`` the sweep of input ``i``.

    A warning says why when they cannot be computed."""
    import warnings

    from petab_sciml.simulation.dense import dense_plan
    from petab_sciml.simulation.objective import Simulator
    from petab_sciml.simulation.plan import SimulationError

    plan = problem.plan
    nets = [n for n in plan.networks if (n.in_rhs or n.in_observables) and n.inputs
            and all(i.kind == "elements" for i in n.inputs)]
    if not nets:
        return []
    extra = {f"__input_{n.id}_{k}": str(e) for n in nets for k, e in enumerate(n.input_exprs)}
    try:
        grid_plan = dense_plan(problem.data, plan, observables=extra)
        ev = Simulator(grid_plan, problem.backend_name,
                       **simulator.options).evaluate(w, grad=False)
    except SimulationError as exc:
        warnings.warn(f"fit plots: no learned-term plot ({exc})", stacklevel=2)
        return []
    if not ev.ok:
        warnings.warn(f"fit plots: no learned-term plot ({ev.reason})", stacklevel=2)
        return []
    m, values, backend = grid_plan.measurements, plan.unpack(w)["nets"], problem.backend
    terms = []
    for n in nets:
        k = len(n.input_exprs)
        seen = np.stack([ev.simulations[m.observable == grid_plan.observable_ids.index(
            f"__input_{n.id}_{i}")] for i in range(k)], axis=1)
        kind, axes, points = _term_grid(seen)
        model = backend.set_parameters(backend.build(n.network, dtype="float64"),
                                       values[n.id])
        args = [points[:, i.start:i.start + i.size].reshape(-1, *i.shape)
                for i in sorted(n.inputs, key=lambda i: i.arg)]
        outs = [np.asarray(o) for o in backend.forward_each(model, args)]
        shape = {"line": (axes[0].size,), "map": (axes[-1].size, axes[0].size),
                 "sweeps": (k, axes[0].size)}[kind]
        outputs = {oid: _output_values(outs[arg], index).reshape(shape)
                   for oid, (arg, index) in zip(n.output_ids, n.output_index)}
        terms.append({"id": n.id, "kind": kind, "inputs": [str(e) for e in n.input_exprs],
                      "seen": seen, "axes": axes, "points": points, "outputs": outputs})
    return terms


def _output_values(out: np.ndarray, index: Any) -> np.ndarray:
    """One output element per point from a batched output ``(points, ...)``: the element
    at ``index`` (None: the argument's first element)."""
    flat = out.reshape(out.shape[0], -1)
    if index is None:
        return flat[:, 0]
    return out[(slice(None), *(int(i) for i in np.ravel(index)))].reshape(out.shape[0])


def _term_grid(seen: np.ndarray) -> tuple[str, list[np.ndarray], np.ndarray]:
    """``(kind, axes, points)`` of :func:`learned_terms` for the inputs ``seen``."""
    k = seen.shape[1]
    if k == 1:
        axes = [np.linspace(seen[:, 0].min(), seen[:, 0].max(), 200)]
        return "line", axes, axes[0][:, None]
    if k == 2:
        axes = [np.linspace(seen[:, i].min(), seen[:, i].max(), 80) for i in range(2)]
        return "map", axes, np.stack([g.ravel() for g in np.meshgrid(*axes)], axis=1)
    axes = [np.linspace(seen[:, i].min(), seen[:, i].max(), 100) for i in range(k)]
    points = np.repeat(np.median(seen, axis=0)[None, :], k * 100, axis=0)
    for i in range(k):
        points[i * 100:(i + 1) * 100, i] = axes[i]
    return "sweeps", axes, points


def _dense_simulation(problem: Any, simulator: Any, w: np.ndarray) -> tuple[Any, Any] | None:
    """``(plan, evaluation)`` of ``w`` on a dense time grid for the fit plots, or None
    with a warning saying why the plots show the measurement times only."""
    import warnings

    from petab_sciml.simulation.dense import dense_plan
    from petab_sciml.simulation.objective import Simulator
    from petab_sciml.simulation.plan import SimulationError

    try:
        plan = dense_plan(problem.data, problem.plan)
        evaluation = Simulator(plan, problem.backend_name,
                               **simulator.options).evaluate(w, grad=False)
    except SimulationError as exc:
        warnings.warn(f"fit plots: no dense simulation ({exc}); the simulation is drawn "
                      "at the measurement times", stacklevel=2)
        return None
    if not evaluation.ok:
        warnings.warn(f"fit plots: the dense simulation failed ({evaluation.reason}); the "
                      "simulation is drawn at the measurement times", stacklevel=2)
        return None
    return plan, evaluation


class _Progress:
    """Every start's loss, steps per second and time left: a live rich table on a
    terminal; elsewhere (a log file, CI, a notebook) one plain line per start every
    :data:`PLAIN_PROGRESS_EVERY_S` seconds and at every tenth of the steps.  The loss
    shown is the training loss before each step; the summary's objective is evaluated
    at the final values (eval mode), and the last line says so."""

    def __init__(self, starts: int, steps: int, console: Any, enabled: bool = True,
                 every_s: float = PLAIN_PROGRESS_EVERY_S):
        self.steps, self.console, self.enabled = steps, console, enabled and steps > 0
        self.every_s = every_s
        self.state = {k: {"step": 0, "loss": math.nan, "t0": None, "t": None, "s0": 0,
                          "printed_t": None, "printed_tenth": 0}
                      for k in range(starts)}
        self.live = None
        self.plain = self.enabled and not getattr(console, "is_terminal", False)

    def __enter__(self):
        if self.enabled and not self.plain:
            from rich.live import Live

            self.live = Live(self._table(), console=self.console, refresh_per_second=4,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self._table())
            self.live.__exit__(*exc)
        if self.enabled:
            self.console.print("loss: the training loss before each step; the objective "
                               "below is evaluated at the final values (eval mode)\n",
                               soft_wrap=True)

    def update(self, starts: list[int], step: int, losses: np.ndarray) -> None:
        now = time.perf_counter()
        for k, loss in zip(starts, np.asarray(losses).reshape(-1)):
            s = self.state[k]
            if s["t0"] is None:
                s["t0"], s["s0"], s["printed_t"] = now, step, now
            s.update(step=step, loss=float(loss), t=now)
            if self.plain:
                self._print_line(k, s, now)
        if self.live is not None:
            self.live.update(self._table())

    def _print_line(self, k: int, s: dict, now: float) -> None:
        tenth = (10 * s["step"]) // self.steps
        if tenth <= s["printed_tenth"] and now - s["printed_t"] < self.every_s:
            return
        s["printed_t"], s["printed_tenth"] = now, max(tenth, s["printed_tenth"])
        rate, left = self._pace(s)
        pace = f", {rate} steps/s, {left} left" if rate else ""
        self.console.print(f"start {k}: step {s['step']}/{self.steps}, loss "
                           f"{s['loss']:.6g}{pace}", highlight=False, soft_wrap=True)

    def _pace(self, s: dict) -> tuple[str, str]:
        if s["t0"] is not None and s["t"] > s["t0"] and s["step"] > s["s0"]:
            r = (s["step"] - s["s0"]) / (s["t"] - s["t0"])
            return f"{r:.1f}", f"{(self.steps - s['step']) / r:.0f} s"
        return "", ""

    def _table(self):
        from rich.table import Table

        table = Table(title="petab-sciml fit")
        for name in ("start", "step", "loss", "steps/s", "time left"):
            table.add_column(name, justify="right")
        for k, s in self.state.items():
            rate, left = self._pace(s)
            table.add_row(str(k), f"{s['step']}/{self.steps}", f"{s['loss']:.6g}", rate, left)
        return table


def print_summary(result: FitResult, problem: Any, console: Any = None) -> None:
    summary_table(result, problem.plan, console)
