"""``petab-sciml training-problems``: a problem rewritten as the stage problems of a
training strategy (registered in :mod:`petab_sciml.cli`; needs neither torch nor jax)."""

from __future__ import annotations

import json
from pathlib import Path

import click


def split_times(ctx: click.Context, param: click.Parameter, value: str | None
                ) -> list[float] | None:
    """The ``--split T1,T2,...`` option's times (also ``fit --split``)."""
    if value is None:
        return None
    try:
        return [float(t) for t in value.split(",") if t.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated times, got {value!r}") from None


@click.command("training-problems")
@click.argument("strategy", type=click.Choice(["curriculum", "multiple-shooting",
                                               "curriculum-multiple-shooting"]))
@click.argument("problem", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write into (stage{i}/ for the curricula); must be empty or "
                   "absent unless --force.")
@click.option("--stages", type=click.IntRange(min=1),
              help="Number of stages (of windows for multiple-shooting): an even split of "
                   "the distinct measurement times.")
@click.option("--split", callback=split_times, metavar="T1,T2,...",
              help="Explicit interior stage ends / window bounds instead of --stages.")
@click.option("--penalty", type=float, default=1.0, show_default=True,
              help="Continuity penalty weight lambda of multiple shooting.")
@click.option("--log-penalty", is_flag=True,
              help="Compare log(abs(state)) across windows instead of the state.")
@click.option("--initial-value", type=float, default=1.0, show_default=True,
              help="Nominal value of every estimated window initial state.")
@click.option("--state-bound", type=float, default=1e8, show_default=True,
              help="Bound of window initial states: [0, B] for species and compartments, "
                   "[-B, B] for other states.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the written problems as JSON.")
def training_problems(strategy: str, problem: Path, out_dir: Path, stages: int | None,
                      split: list[float] | None, penalty: float, log_penalty: bool,
                      initial_value: float, state_bound: float, force: bool,
                      as_json: bool) -> None:
    """Write PROBLEM as the stage problems of STRATEGY: curriculum learning (the
    measurement horizon grows stage by stage), multiple shooting (windows with estimated
    initial states tied by a continuity penalty) or curriculum multiple shooting (windows
    merged stage by stage until the original problem). Each problem written is complete
    and validated (docs/training_strategies.md)."""
    from petab_sciml.training import PartitionError, StrategyError
    from petab_sciml.training import training_problems as write

    if (stages is None) == (split is None):
        raise click.UsageError("give either --stages or --split")
    try:
        paths = write(problem, strategy, out_dir, stages=stages, split=split,
                      penalty=penalty, log_penalty=log_penalty,
                      initial_value=initial_value, state_bound=state_bound, force=force)
    except (StrategyError, PartitionError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"strategy": strategy, "problems": [str(p) for p in paths]}))
        return
    for i, path in enumerate(paths, start=1):
        label = f"stage {i}" if len(paths) > 1 or strategy != "multiple-shooting" else "problem"
        click.echo(f"{label}: {path} (valid)")
