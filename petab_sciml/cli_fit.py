"""``petab-sciml fit`` (registered in :mod:`petab_sciml.cli`): multi-start training."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from petab_sciml.cli_problem import limit_option
from petab_sciml.cli_training import split_times
from petab_sciml.fit.task import OPTIMIZERS, SCHEDULES


@click.command("fit")
@click.argument("problem", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(["jax", "torch"]), default="jax",
              show_default=True, help="Framework that trains: optax (jax) or torch.optim.")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adam", show_default=True)
@click.option("--lr", type=float, default=1e-2, show_default=True, help="Learning rate.")
@click.option("--schedule", type=click.Choice(SCHEDULES), default="constant",
              show_default=True, help="Learning-rate schedule over the steps: cosine decays "
              "towards 0 at --steps, exponential multiplies by --lr-decay each step.")
@click.option("--lr-decay", type=float, help="Factor per step of --schedule exponential.")
@click.option("--patience", type=int, default=0, show_default=True,
              help="Stop a start after this many steps without improvement (0: never).")
@click.option("--min-delta", type=float, default=0.0, show_default=True,
              help="How far below its best the loss must fall to count as an improvement.")
@click.option("--steps", type=int, default=1000, show_default=True,
              help="Optimizer steps per start.")
@click.option("--starts", type=int, default=4, show_default=True,
              help="Number of starts (K > 1 runs on Dask: --scheduler, else a LocalCluster).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the start points (start k draws from seed and k only).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output folder: results.h5, best/ (a PEtab problem), plots/, checkpoints.")
@click.option("--scheduler", metavar="ADDRESS",
              help="A running Dask scheduler, e.g. tcp://host:8786.")
@click.option("--in-process", is_flag=True, help="Run every start in this process (no Dask).")
@click.option("--workers", type=int, help="Workers of the embedded LocalCluster.")
@click.option("--batch", type=int, help="Starts per task (JAX: per vmapped computation; "
              "default all of them in JAX, one in PyTorch).")
@click.option("--resume", is_flag=True, help="Continue the fit in --out from its checkpoints.")
@click.option("--force", is_flag=True, help="Replace a previous fit in --out.")
@click.option("--checkpoint-every", type=int, default=50, show_default=True)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--trust-code", is_flag=True, help="Load networks whose format runs code.")
@click.option("--json", "as_json", is_flag=True, help="Print the result summary as JSON.")
@click.option("--solver", help="ODE solver (JAX: solver, PyTorch: method; e.g. dopri8, "
              "tsit5, kvaerno5); default the backend's.")
@click.option("--rtol", type=float, help="Relative tolerance of the ODE solver.")
@click.option("--atol", type=float, help="Absolute tolerance of the ODE solver.")
@click.option("--start-from-nominal", is_flag=True,
              help="Start 0 begins at the problem's nominal values instead of a draw.")
@click.option("--progress-every", type=float, default=10.0, show_default=True,
              metavar="SECONDS", help="Without a terminal: a progress line per start at "
              "least this often (and at every tenth of the steps).")
@click.option("--strategy", type=click.Choice(["curriculum", "multiple-shooting",
                                               "curriculum-multiple-shooting"]),
              help="Train the stage problems of a training strategy one after another "
                   "(docs/training_strategies.md).")
@click.option("--stages", type=click.IntRange(min=1),
              help="--strategy: number of stages (windows for multiple-shooting).")
@click.option("--split", callback=split_times, metavar="T1,T2,...",
              help="--strategy: interior stage ends / window bounds instead of --stages.")
@click.option("--penalty", type=float, default=1.0, show_default=True,
              help="--strategy: continuity penalty weight of multiple shooting.")
@click.option("--log-penalty", is_flag=True, help="--strategy: penalize log(abs(state)).")
@click.option("--initial-value", type=float,
              help="--strategy: start new window states at this value instead of their "
                   "simulated values.")
@click.option("--stage-steps", type=int,
              help="--strategy: optimizer steps of each stage before the last (default "
                   "--steps).")
@limit_option
def fit(problem: Path, backend: str, optimizer: str, lr: float, schedule: str,
        lr_decay: float | None, patience: int, min_delta: float, steps: int, starts: int,
        seed: int, out: Path, scheduler: str | None, in_process: bool, workers: int | None,
        batch: int | None, resume: bool, force: bool, checkpoint_every: int, no_plots: bool,
        trust_code: bool, as_json: bool, solver: str | None, rtol: float | None,
        atol: float | None, start_from_nominal: bool, progress_every: float,
        strategy: str | None, stages: int | None, split: list[float] | None,
        penalty: float, log_penalty: bool, initial_value: float | None,
        stage_steps: int | None, limits: dict[str, int]) -> None:
    """Train PROBLEM from several starts and write the best one as a PEtab problem.

    Ctrl-C, SIGTERM and SIGHUP stop every start at its next step, write checkpoints and
    exit (130, 143, 129); rerun with --resume to continue (the result equals an
    uninterrupted run with the same seed).
    """
    from rich.console import Console

    from petab_sciml.errors import PetabSciMLError
    from petab_sciml.fit import fit as run_fit
    from petab_sciml.fit import print_summary
    from petab_sciml.fit.signals import FitSignalled

    err = Console(stderr=True)
    strategy_options = {"stages": stages, "split": split, "stage_steps": stage_steps,
                        "initial_value": initial_value}
    if strategy is None and any(v is not None for v in strategy_options.values()):
        raise click.UsageError("--stages, --split, --initial-value and --stage-steps go "
                               "with --strategy")
    # the settings of a plain fit, and of every stage of a strategy
    settings = dict(backend=backend, optimizer=optimizer, lr=lr, steps=steps, starts=starts,
                    seed=seed, out=out, scheduler=scheduler, in_process=in_process,
                    n_workers=workers, batch=batch, resume=resume, force=force,
                    checkpoint_every=checkpoint_every, plots=not no_plots,
                    trust_code=trust_code, progress=not as_json, console=err,
                    progress_every_s=progress_every, start_from_nominal=start_from_nominal,
                    schedule=schedule, lr_decay=lr_decay, patience=patience,
                    min_delta=min_delta, limits=limits,
                    **_simulation_options(backend, solver, rtol, atol))
    if strategy is not None:
        if (stages is None) == (split is None):
            raise click.UsageError("--strategy needs either --stages or --split")
        _fit_strategy(problem, strategy, penalty=penalty, log_penalty=log_penalty,
                      as_json=as_json, **strategy_options, **settings)
        return
    try:
        result = run_fit(problem, **settings)
    except FitSignalled as exc:
        err.print(f"[yellow]stopped by {exc.name}: checkpoints are in {out / 'checkpoints'}; "
                  f"continue with the same command and --resume[/yellow]")
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted: checkpoints are in {out / 'checkpoints'}; continue "
                  f"with the same command and --resume[/yellow]")
        sys.exit(130)
    except PetabSciMLError as exc:
        err.print(f"[red]error:[/red] {exc}")
        sys.exit(1)
    from petab_sciml.problem import load_problem

    if as_json:
        click.echo(json.dumps({
            "best": result.best.start,
            "objectives": [_number(v) for v in result.objectives.tolist()],
            "parameters": {k: v.tolist() for k, v in result.parameters().items()},
            "starts": [{"start": r.start, "objective": _number(r.value), "steps": r.steps,
                        "seconds": r.seconds, "ok": r.ok}
                       for r in sorted(result.starts, key=lambda r: r.start)],
            "files": {k: str(v) for k, v in result.files.items()},
            "seconds": result.settings.get("seconds")}, indent=2, allow_nan=False))
        return
    from petab_sciml.limits import use_limits

    with use_limits(**limits):
        problem_obj = load_problem(problem, backend=backend, trust_code=trust_code)
    print_summary(result, problem_obj, Console())
    click.echo(f"best start {result.best.start}: objective {result.best.value:.6g}")
    click.echo(f"results:  {result.files['results']}")
    click.echo(f"best:     {result.files['best']}")
    for name, path in result.files.items():
        if name not in ("results", "best"):
            click.echo(f"plot:     {path}")


def _fit_strategy(problem: Path, strategy: str, *, as_json: bool, console: object,
                  **options: object) -> None:
    from petab_sciml.errors import PetabSciMLError
    from petab_sciml.fit.signals import FitSignalled
    from petab_sciml.fit.strategy import fit_strategy

    try:
        result = fit_strategy(problem, strategy, console=console, **options)
    except FitSignalled as exc:
        console.print(f"[yellow]stopped by {exc.name}: continue with the same command "
                      "and --resume[/yellow]")
        sys.exit(exc.exit_status)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: continue with the same command and "
                      "--resume[/yellow]")
        sys.exit(130)
    except PetabSciMLError as exc:
        console.print(f"[red]error:[/red] {exc}")
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({
            "strategy": strategy, "best": result.best_start,
            "stages": [{"name": s.name, "problem": str(s.problem),
                        "original_objectives": [_number(v) for v in s.original_values]}
                       for s in result.stages]}, indent=2, allow_nan=False))
        return
    for s in result.stages:
        click.echo(f"{s.name}: objective of the original problem "
                   f"{float(min(s.original_values)):.6g} (best start)  [{s.problem}]")
    click.echo(f"best start {result.best_start}: objective {result.best_value:.6g}")
    click.echo(f"summary:  {result.out / 'strategy.json'}")


def _number(value: float) -> float | None:
    """A JSON number; None (null) for a start whose objective is not finite."""
    return value if math.isfinite(value) else None


def _simulation_options(backend: str, solver: str | None, rtol: float | None,
                        atol: float | None) -> dict:
    """The backend's simulation options for the command's solver settings (the solver
    is ``solver`` in JAX and ``method`` in PyTorch)."""
    options: dict = {}
    if solver is not None:
        options["solver" if backend == "jax" else "method"] = solver
    if rtol is not None:
        options["rtol"] = rtol
    if atol is not None:
        options["atol"] = atol
    return options
