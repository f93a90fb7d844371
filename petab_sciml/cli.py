"""The ``petab-sciml`` command line.

Commands read like a sentence (``petab-sciml test-cases run``); every command that
prints a table also takes ``--json`` for machines.  Errors in user input end with a
one-line message and exit status 1 (2 for usage errors), never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from petab_sciml.cli_problem import limit_option
from petab_sciml.errors import MissingExtraError, PetabSciMLError


class _Group(click.Group):
    """The main group: an unexpected exception ends in one line naming it (a bug to
    report), never in a traceback; ``PETAB_SCIML_DEBUG=1`` shows the traceback."""

    def invoke(self, ctx: click.Context):
        import os

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit,
                KeyboardInterrupt):
            raise
        except Exception as exc:
            if os.environ.get("PETAB_SCIML_DEBUG"):
                raise
            text = (str(exc).splitlines() or [""])[0][:300]
            raise click.ClickException(
                f"internal error: {type(exc).__name__}: {text} (a bug in petab-sciml; "
                "please report it; PETAB_SCIML_DEBUG=1 shows the traceback)") from None


@click.group(cls=_Group)
@click.version_option(package_name="petab-sciml-toolkit")
def main() -> None:
    """PEtab SciML networks and problems in PyTorch and JAX."""


@main.group("test-cases")
def test_cases() -> None:
    """Run reference test cases (ours and the official PEtab SciML suite)."""


@test_cases.command("run")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--backend", "backend", default="torch", show_default=True,
              help="Backend to run: a name (torch, jax) or 'all' (or 'both') for every "
                   "installed one with cross-backend columns.")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32",
              show_default=True, help="Network cases' dtype (problem cases run in float64).")
@click.option("--mode", type=click.Choice(["train", "eval"]), default="train",
              show_default=True, help="Mode of network cases whose solutions.yaml names "
                   "none (a case's own mode wins): PyTorch's train() or eval().")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--suite/--no-suite", default=True, show_default=True,
              help="Without PATHS: also run the official suite's ML-import, SciML "
                   "problem-import and initialization cases.")
@limit_option
def run_cases(paths: tuple[Path, ...], backend: str, dtype: str, mode: str, as_json: bool,
              suite: bool, limits: dict[str, int]) -> None:
    """Run the cases under PATHS (default: test_cases/ and the official suite).

    PEtab test-suite cases (``_NNNN.yaml`` beside ``_NNNN_solution.yaml``, e.g.
    ../shared/petab_v2_suite) compare llh, chi2 and simulations at each case's
    tolerances.

    Network cases (ML import) compare outputs; problem cases (SciML problem import,
    initialization) compare the log-likelihood, simulations and gradients (or the
    initial network parameters) with the references at the tolerances of each
    solutions.yaml.  The official suite is found through $PETAB_SCIML_TESTSUITE or
    ../shared/petab_sciml_testsuite.  Exits 1 if any case fails.
    """
    from rich.console import Console
    from rich.progress import Progress

    from petab_sciml import petab_suite, testcases
    from petab_sciml.limits import use_limits
    from petab_sciml.plugins import backend_names

    err = Console(stderr=True)
    backend = "all" if backend == "both" else backend
    backends = backend_names() if backend == "all" else [backend]
    if backend == "all":
        backends = [b for b in backends if _available(b)] or backends
    roots = list(paths)
    if not roots:
        roots.append(testcases.bundled_cases())
        suite_dir = testcases.default_suite()
        if suite and suite_dir is not None:
            roots.append(suite_dir / "test_cases" / "ml_model_import")
            roots.extend(suite_dir / "test_cases" / c for c in testcases.PROBLEM_CATEGORIES
                         if (suite_dir / "test_cases" / c).is_dir())
        elif suite:
            err.print(f"[yellow]official suite not found (set ${testcases.SUITE_ENV}); "
                      "running test_cases/ only[/yellow]")
    try:
        cases = testcases.discover(roots)
        problems = testcases.discover_problems(roots)
        suite_cases = petab_suite.discover(roots)
    except PetabSciMLError as exc:
        raise click.ClickException(str(exc)) from None
    with Progress(console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task("cases", total=len(cases) + len(problems)
                                 + len(suite_cases))

        def advance(name: str) -> None:
            progress.update(task, advance=1, description=Path(name).name)

        with use_limits(**limits):
            results = testcases.run_all(cases, backends, dtype=dtype, progress=advance,
                                        mode=mode)
            problem_results = testcases.run_problems(problems, backends, progress=advance)
            suite_results = petab_suite.run_all(suite_cases, backends, progress=advance)
    every = [*results, *problem_results, *suite_results]
    failed = sum(not r.passed for r in every)
    passed = len(every) - failed
    if as_json:
        click.echo(json.dumps({"results": [r.to_json() for r in results],
                               "problems": [r.to_json() for r in problem_results],
                               "petab_suite": [r.to_json() for r in suite_results],
                               "passed": passed, "failed": failed}, indent=2))
    else:
        if results:
            _print_results(results, cross=len(backends) > 1)
        if problem_results:
            _print_problem_results(problem_results, cross=len(backends) > 1)
        if suite_results:
            _print_suite_results(suite_results)
        click.echo(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def _print_problem_results(results: list, *, cross: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, title="problem cases: max abs error/tolerance")
    table.add_column("case", no_wrap=True)
    for column in ("backend", "llh", "simulations", "gradient", "parameters", "seconds",
                   "verdict"):
        table.add_column(column, overflow="fold")
    if cross:
        table.add_column("llh rel diff")
        table.add_column("grad rel diff")

    def cell(r, key):
        keys = ("llh", "log_posterior") if key == "llh" else (key,)
        for k in keys:
            if k in r.errors:
                return f"{r.errors[k]:.1e}/{r.tolerances[k]:.0e}"
        return "-"

    for r in results:
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        row = [r.case, r.backend, cell(r, "llh"), cell(r, "simulations"), cell(r, "gradient"),
               cell(r, "parameters"), f"{r.seconds:.1f}", verdict]
        if cross:
            row += [f"{r.cross['llh_rel_diff']:.1e}" if r.cross else "-",
                    f"{r.cross['gradient_max_rel_diff']:.1e}" if r.cross else "-"]
        table.add_row(*row)
    console = Console(width=180)
    console.print(table)
    for r in results:
        if r.error:
            console.print(f"[red]{r.case} ({r.backend}):[/red] {r.error}", markup=True,
                          highlight=False)


def _print_suite_results(results: list) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="PEtab test-suite cases: abs error/tolerance")
    for column in ("case", "backend", "llh", "chi2", "simulations", "seconds", "verdict",
                   "reason"):
        table.add_column(column, overflow="fold")

    def cell(r, key):
        return f"{r.errors[key]:.1e}/{r.tolerances[key]:.0e}" if key in r.errors else "-"

    for r in results:
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        table.add_row(r.case, r.backend, cell(r, "llh"), cell(r, "chi2"),
                      cell(r, "simulations"), f"{r.seconds:.1f}", verdict, r.error or "")
    Console(width=200).print(table, highlight=False)


def _available(backend: str) -> bool:
    from petab_sciml.plugins import get_backend

    try:
        get_backend(backend)
        return True
    except (MissingExtraError, PetabSciMLError):
        return False


def _print_results(results: list, *, cross: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for column in ("case", "backend", "layers", "max abs error", "tolerance", "verdict"):
        table.add_column(column, overflow="fold")
    if cross:
        table.add_column("|torch-jax| out")
        table.add_column("vjp rel diff")
        table.add_column("vjp norm")
    fd = any(r.fd_rel_error is not None for r in results)
    if fd:
        table.add_column("vjp vs finite diff")
    for r in results:
        error = "-" if r.max_abs_error is None else f"{r.max_abs_error:.2e}"
        verdict = "[green]pass[/green]" if r.passed else "[red]FAIL[/red]"
        row = [r.case, r.backend, r.layers, error, f"{r.tolerance:.0e}", verdict]
        if cross:
            row += [f"{r.cross['output_max_abs_diff']:.1e}" if r.cross else "-",
                    _vjp_diff(r.cross),
                    "-" if r.gradient_norm is None else f"{r.gradient_norm:.1e}"]
        if fd:
            row.append("-" if r.fd_rel_error is None else f"{r.fd_rel_error:.1e}")
        table.add_row(*row)
    console = Console(width=160)
    console.print(table)
    for r in results:
        if r.error:
            console.print(f"[red]{r.case} ({r.backend}):[/red] {r.error}", markup=True,
                          highlight=False)


def _vjp_diff(cross: dict) -> str:
    if not cross:
        return "-"
    if not cross.get("gradient_compared", True):
        return "nothing to compare"
    return f"{cross['gradient_max_rel_diff']:.1e}"


@main.command("layers")
@click.option("--json", "as_json", is_flag=True, help="Print the catalogue as JSON.")
def layers_command(as_json: bool) -> None:
    """List the supported layers (arguments with PyTorch defaults, parameter arrays)
    and functions (with the spellings accepted for each)."""
    from petab_sciml.catalogue import FUNCTIONS, LAYERS, REQUIRED

    def default(arg):
        return "required" if arg.default is REQUIRED else repr(arg.default)

    layers = {
        name: {"args": {a.name: default(a) for a in spec.args if not a.ignored},
               "arrays": [a.name + ("" if a.trainable else " (buffer)") for a in spec.arrays]}
        for name, spec in LAYERS.items()
    }
    functions = {name: {"params": {p.name: default(p) for p in spec.params if not p.ignored},
                        "spellings": list(spec.aliases) + [f".{m}()" for m in spec.methods]}
                 for name, spec in FUNCTIONS.items()}
    if as_json:
        click.echo(json.dumps({"layers": layers, "functions": functions}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{len(layers)} layers")
    for column in ("layer", "arguments (defaults)", "parameter arrays"):
        table.add_column(column, overflow="fold")
    for name, info in layers.items():
        table.add_row(name, ", ".join(f"{k}={v}" for k, v in info["args"].items()),
                      ", ".join(info["arrays"]) or "-")
    console.print(table)
    table = Table(title=f"{len(functions)} functions")
    for column in ("function", "arguments (defaults)", "also written as"):
        table.add_column(column, overflow="fold")
    for name, info in functions.items():
        table.add_row(name, ", ".join(f"{k}={v}" for k, v in info["params"].items()),
                      ", ".join(info["spellings"]))
    console.print(table)


def _register_commands() -> None:
    """Commands defined in their own modules (kept small; imported at start-up because
    click needs their options, while their heavy imports happen inside)."""
    from petab_sciml.cli_convert import convert
    from petab_sciml.cli_fit import fit
    from petab_sciml.cli_problem import info, upgrade, validate
    from petab_sciml.cli_training import training_problems

    main.add_command(validate)
    main.add_command(info)
    main.add_command(upgrade)
    main.add_command(convert)
    main.add_command(fit)
    main.add_command(training_problems)


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
