"""Training strategies as PEtab problems: curriculum learning, multiple shooting and
curriculum multiple shooting (the draft PEtab SciML training-strategies text), each
written as complete, valid problems that train like any other (docs/training_strategies.md).

Framework-free: the transformations read and write tables; no backend is needed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .curriculum import curriculum_stages, curriculum_tables
from .partition import PartitionError, merged_windows, shooting_windows, stage_ends
from .shooting import PENALTY_PARAMETER, shooting_tables, window_experiment, window_parameter
from .source import Rows, SourceProblem, StrategyError, read_source, write_stage

STRATEGIES = ("curriculum", "multiple-shooting", "curriculum-multiple-shooting")

__all__ = [
    "PENALTY_PARAMETER", "STRATEGIES", "PartitionError", "Rows", "SourceProblem",
    "StrategyError", "curriculum_stages", "curriculum_tables", "merged_windows",
    "shooting_tables", "shooting_windows", "stage_ends", "training_problems",
    "window_experiment", "window_parameter",
]


def training_problems(problem: str | os.PathLike, strategy: str, out_dir: str | os.PathLike,
                      *, stages: int | None = None, split: Sequence[float] | None = None,
                      penalty: float = 1.0, log_penalty: bool = False,
                      initial_value: float = 1.0, state_bound: float = 1e8,
                      force: bool = False) -> list[Path]:
    """Write the stage problems of ``strategy`` (:data:`STRATEGIES`) for the problem at
    ``problem`` (its YAML) into ``out_dir``; returns their YAML files in stage order.

    Layout: curriculum and curriculum multiple shooting ``out_dir/stage{i}/``, multiple
    shooting one problem in ``out_dir``.  ``stages`` (the number of stages, or of windows
    for multiple shooting) or ``split`` (interior time points) fixes the partition
    (:mod:`.partition`); ``penalty``, ``log_penalty``, ``initial_value`` and
    ``state_bound`` shape the multiple-shooting problems (:func:`.shooting_tables`).
    Every problem written is validated; ``out_dir`` must be empty or absent unless
    ``force``.  Raises :class:`StrategyError` / :class:`PartitionError`."""
    from petab_sciml.errors import OutputError
    from petab_sciml.safe_write import staged_output

    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    source = read_source(problem)
    times = source.measurement_times
    shooting = {"penalty": penalty, "log_penalty": log_penalty,
                "initial_value": initial_value, "state_bound": state_bound}
    if strategy == "curriculum":
        ends = stage_ends(times, stages=stages, split=split)
        stage_tables = curriculum_stages(source, ends)
    elif strategy == "multiple-shooting":
        windows = shooting_windows(times, windows=stages, split=split)
        stage_tables = [shooting_tables(source, windows, **shooting)]
    else:
        windows = shooting_windows(times, windows=stages, split=split)
        stage_tables = [shooting_tables(source, merged_windows(windows, k), **shooting)
                        for k in range(1, len(windows))]
        stage_tables.append(curriculum_tables(source, None))
    out_dir = Path(out_dir)
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        force = True
    names = [Path(f"stage{i}") for i in range(1, len(stage_tables) + 1)] \
        if strategy != "multiple-shooting" else [Path()]
    try:
        with staged_output(out_dir, overwrite=force, inputs=[source.path], folder=True
                           ) as tmp:
            tmp.mkdir()
            for name, tables in zip(names, stage_tables, strict=True):
                _check_valid(write_stage(source, tables, tmp / name), name)
    except OutputError as exc:
        raise StrategyError(exc.message, file=out_dir) from None
    return [out_dir / name / source.path.name for name in names]


def _check_valid(path: Path, name: Path) -> None:
    from petab_sciml.problem.validate import validate_problem

    report = validate_problem(path)
    if not report.ok:
        first = "; ".join(str(i) for i in report.issues.errors[:3])
        raise StrategyError(f"the written problem {name.as_posix() or '.'} is not valid "
                            f"(please report this): {first}")
