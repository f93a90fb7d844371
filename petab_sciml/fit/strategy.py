"""Training with a strategy: the stage problems of curriculum learning, multiple shooting
or curriculum multiple shooting (:mod:`petab_sciml.training`) trained one after another,
each stage a plain :func:`petab_sciml.fit.fit` of its problem.

    result = fit_strategy("problem.yaml", "curriculum", stages=3, steps=500, out="fit/")
    result.stages[-1].original_values     # the original problem's objective per start

* Starts are drawn on the original problem (the same ``seed`` gives the same starts as a
  plain fit), then carried into stage 1.
* Between stages, every parameter carries over by id: mechanistic parameters and network
  arrays, window states included (curriculum multiple shooting keeps window i's start
  from stage to stage, so its window states keep their ids).
* A window state that is new in a stage starts at the state's value simulated with the
  start's current parameters (a probe problem that observes every state at every window
  start), or at ``initial_value`` when given.
* After each stage the original problem's objective is evaluated at every start's
  parameters and reported (a stage's own objective, with penalties and duplicated
  window-boundary data, is not comparable with it).  Into ``out`` go the stage problems
  (``problems/``), each stage's fit output (``stage{i}/``: results.h5, best/, plots) and
  ``strategy.json``, the stages with the original objective of every start.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.fit import FitError, FitResult, fit


@dataclass
class StageResult:
    """One trained stage."""

    name: str
    problem: Path
    result: FitResult
    original_values: np.ndarray
    """The original problem's objective at each start's parameters after this stage
    (start order; inf where its simulation fails)."""


@dataclass
class StrategyResult:
    strategy: str
    stages: list[StageResult] = field(default_factory=list)
    original_w: list[np.ndarray] = field(default_factory=list)
    """Each start's final parameters in the original problem's layout (``plan.pack``)."""
    out: Path | None = None

    @property
    def best_start(self) -> int:
        return int(np.argmin(self.stages[-1].original_values))

    @property
    def best_value(self) -> float:
        return float(np.min(self.stages[-1].original_values))


def carry(plan_from: Any, w_from: np.ndarray, plan_to: Any, w_to: np.ndarray) -> np.ndarray:
    """``w_to`` with every parameter that ``plan_from`` also has taken from ``w_from`` by
    id: mechanistic parameters by parameter id, network arrays by (network, layer,
    array)."""
    out = np.array(w_to, dtype=np.float64)
    index = {pid: i for i, pid in enumerate(plan_from.mech_ids)}
    for j, pid in enumerate(plan_to.mech_ids):
        if pid in index:
            out[j] = w_from[index[pid]]
    arrays = {(net.id, s.layer, s.array): s for net in plan_from.networks for s in net.arrays}
    for net in plan_to.networks:
        for s in net.arrays:
            src = arrays.get((net.id, s.layer, s.array))
            if src is not None and src.size == s.size:
                out[s.offset: s.offset + s.size] = w_from[src.offset: src.offset + src.size]
    return out


def fit_strategy(problem: str | os.PathLike, strategy: str, *, stages: int | None = None,
                 split: list[float] | None = None, penalty: float = 1.0,
                 log_penalty: bool = False, initial_value: float | None = None,
                 state_bound: float = 1e8, steps: int = 1000, stage_steps: int | None = None,
                 starts: int = 4, seed: int = 0, backend: str = "jax",
                 out: str | os.PathLike | None = None, force: bool = False,
                 progress: bool = True, console: Any = None, trust_code: bool = False,
                 **fit_options: Any) -> StrategyResult:
    """Train the problem at ``problem`` (its YAML) with ``strategy``
    (:data:`petab_sciml.training.STRATEGIES`), as the module docstring says.

    ``stages`` / ``split``, ``penalty``, ``log_penalty`` and ``state_bound``: the stage
    problems (:func:`petab_sciml.training.training_problems`); ``initial_value``: the
    start of new window states (None: simulated); ``steps``: steps of the last stage,
    ``stage_steps``: of each earlier stage (default ``steps``); ``fit_options``: the rest
    of :func:`~petab_sciml.fit.fit`'s settings (optimizer, lr, in_process, ...), the
    same for every stage.  ``resume=True`` (with the same settings and ``out``) keeps the
    stages ``strategy.json`` lists as done and continues the next one from its
    checkpoints (or from its start when it has none)."""
    from petab_sciml.problem import load_problem
    from petab_sciml.training import training_problems

    resume = bool(fit_options.pop("resume", False))
    path = Path(getattr(problem, "path", problem))
    out = Path(out) if out is not None else None
    record = {"strategy": strategy, "problem": str(path.resolve()), "stages": stages,
              "split": split, "penalty": penalty, "log_penalty": log_penalty,
              "initial_value": initial_value, "state_bound": state_bound, "steps": steps,
              "stage_steps": stage_steps, "starts": starts, "seed": seed,
              "backend": backend,
              "fit": json.loads(json.dumps(fit_options, sort_keys=True, default=str))}
    done = _resumed_stages(out, record) if resume else []
    if not resume and out is not None and out.exists() and any(out.iterdir()) \
            and not force:
        raise FitError(f"{out} is not empty; pass --force (force=True) to replace it, or "
                       "--resume to continue it", file=out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    problems = (out / "problems") if out is not None else \
        Path(tempfile.mkdtemp(prefix="petab_sciml_stages_"))
    from rich.console import Console

    console = console or Console(stderr=True)
    shooting = {"penalty": penalty, "log_penalty": log_penalty, "state_bound": state_bound,
                "initial_value": 1.0 if initial_value is None else initial_value}
    paths = training_problems(path, strategy, problems, stages=stages, split=split,
                              force=True, **shooting)
    original = load_problem(path, backend=backend, trust_code=trust_code)
    options = {k: v for k, v in fit_options.items() if k not in _FIT_ONLY}
    simulator = original.simulator(**({"cache": False} if backend == "jax" else {}),
                                   **options)
    from petab_sciml.fit.starts import draw_starts

    try:
        current = draw_starts(original, seed, starts,
                              lambda w: simulator.evaluate(w, grad=False).value,
                              nominal_first=fit_options.get("start_from_nominal", False))
    except ValueError as exc:
        raise FitError(str(exc)) from None
    plan = original.plan
    probe = _Probe(path, strategy, problems, stages, split, backend, trust_code, options) \
        if initial_value is None and strategy != "curriculum" else None
    result = StrategyResult(strategy, out=out)
    for k, stage_path in enumerate(paths, start=1):
        stage = load_problem(stage_path, backend=backend, trust_code=trust_code)
        name = f"stage{k}"
        if k <= len(done):     # finished before the fit was interrupted
            fitted = FitResult.load(out / name / "results.h5")
        else:
            vectors = [carry(plan, w, stage.plan, stage.plan.w0) for w in current]
            if probe is not None:
                vectors = [probe.fill(stage.plan, v, plan, w, start) for start, (v, w)
                           in enumerate(zip(vectors, current, strict=True))]
            again = resume and (out / name / "fit.json").is_file()
            fitted = fit(stage, backend=backend, steps=steps if k == len(paths)
                         or stage_steps is None else stage_steps, starts=starts, seed=seed,
                         start_vectors=vectors,
                         out=(out / name) if out is not None else None, force=not again,
                         resume=again, progress=progress, console=console,
                         trust_code=trust_code,
                         **{k2: v2 for k2, v2 in fit_options.items()
                            if k2 != "start_from_nominal"})
        current = [r.w for r in sorted(fitted.starts, key=lambda r: r.start)]
        plan = stage.plan
        values = np.array([simulator.evaluate(carry(plan, w, original.plan,
                                                    original.plan.w0), grad=False).value
                           for w in current])
        result.stages.append(StageResult(name, stage_path, fitted, values))
        if out is not None:
            _write_summary(out, result, record)
        if progress:
            best = int(np.argmin(values))
            console.print(f"{name}/{len(paths)} ({strategy}): objective of the original "
                          f"problem {values[best]:.6g} at start {best} (its own "
                          f"{fitted.starts[best].value:.6g})")
    result.original_w = [carry(plan, w, original.plan, original.plan.w0) for w in current]
    return result


def _resumed_stages(out: Path | None, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The stages ``out/strategy.json`` lists as done, after checking that it was
    written by a fit with the settings ``record``."""
    if out is None:
        raise FitError("resume needs the output folder of the interrupted fit")
    path = out / "strategy.json"
    if not path.is_file():
        # interrupted before its first stage ended: that stage resumes from checkpoints
        if (out / "stage1" / "fit.json").is_file():
            return []
        raise FitError(f"nothing to resume: {path} does not exist", file=path)
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FitError(f"cannot read {path.name}: {exc}", file=path) from None
    before = saved.get("settings") if isinstance(saved, dict) else None
    if before != record:
        diff = sorted(k for k in record if not isinstance(before, dict)
                      or before.get(k) != record[k])
        raise FitError("resume with the settings of the interrupted fit; these differ: "
                       + ", ".join(diff), file=path)
    return list(saved.get("stages") or [])


_FIT_ONLY = {"optimizer", "lr", "client", "scheduler", "in_process", "batch", "n_workers",
             "checkpoint_every", "plots", "progress_every_s", "start_from_nominal",
             "schedule", "lr_decay", "patience", "min_delta", "limits"}
""":func:`fit` settings that are not simulation options."""


class _Probe:
    """The original problem observing every state at every window start of every stage:
    new window states start at the values it simulates."""

    def __init__(self, path: Path, strategy: str, problems: Path, stages: int | None,
                 split: list[float] | None, backend: str, trust_code: bool,
                 options: dict[str, Any]):
        from petab_sciml.problem import load_problem
        from petab_sciml.training import merged_windows, read_source, shooting_windows
        from petab_sciml.training.shooting import window_states
        from petab_sciml.training.source import Rows, write_stage

        source = read_source(path)
        windows = shooting_windows(source.measurement_times, windows=stages, split=split)
        sets = [windows] if strategy == "multiple-shooting" else \
            [merged_windows(windows, k) for k in range(1, len(windows))]
        self.rows: dict[str, int] = {}
        keys: dict[tuple[str, float, str], int] = {}
        tables = {kind: rows.copy() for kind, rows in source.tables.items()}
        tables["measurement"] = Rows(["observableId", "experimentId", "time", "measurement"])
        for state in source.state_ids:
            tables["observable"].add(observableId=f"PROBE_{state}", observableFormula=state,
                                     noiseFormula="1.0", noiseDistribution="normal")
        for ws in (ws for s in sets for ws in window_states(source, s)):
            key = (ws.experiment, ws.t0, ws.state)
            if key not in keys:
                keys[key] = len(keys)
                tables["measurement"].add(observableId=f"PROBE_{ws.state}",
                                          experimentId=ws.experiment, time=repr(ws.t0),
                                          measurement="0.0")
            self.rows[ws.parameter] = keys[key]
        probe_path = write_stage(source, tables, problems / "probe")
        self.problem = load_problem(probe_path, backend=backend, trust_code=trust_code)
        self.simulator = self.problem.simulator(
            **({"cache": False} if backend == "jax" else {}), **options)

    def fill(self, plan: Any, w: np.ndarray, plan_from: Any, w_from: np.ndarray,
             start: int) -> np.ndarray:
        """``w`` (of ``plan``) with its window states that ``plan_from`` lacks simulated
        at ``w_from``."""
        new = [j for j, pid in enumerate(plan.mech_ids)
               if pid in self.rows and pid not in set(plan_from.mech_ids)]
        if not new:
            return w
        ev = self.simulator.evaluate(carry(plan_from, w_from, self.problem.plan,
                                           self.problem.plan.w0), grad=False)
        if not ev.ok:
            raise FitError(f"start {start}: simulating the window initial states failed "
                           f"({ev.reason}); give them a value (initial_value, "
                           "--initial-value)")
        out = np.array(w)
        for j in new:   # within the bounds: a species may simulate to -1e-12
            out[j] = np.clip(ev.simulations[self.rows[plan.mech_ids[j]]], plan.w_lower[j],
                             plan.w_upper[j])
        return out


def _write_summary(out: Path, result: StrategyResult, record: dict[str, Any]) -> None:
    """``strategy.json``: the settings and every stage done so far (written after
    each stage: what ``resume`` keeps)."""
    from petab_sciml.safe_write import write_text

    summary = {"strategy": result.strategy, "settings": record, "stages": [
        {"name": s.name, "problem": str(s.problem),
         "steps": s.result.settings["steps"],
         "original_objective": [float(v) for v in s.original_values],
         "best_start": int(np.argmin(s.original_values)),
         "stage_objective": [float(r.value) for r in sorted(s.result.starts,
                                                             key=lambda r: r.start)]}
        for s in result.stages]}
    write_text(out / "strategy.json", json.dumps(summary, indent=2) + "\n", overwrite=True)
