"""``petab-sciml validate``, ``info`` and ``upgrade`` (registered in :mod:`petab_sciml.cli`).

Exit status of ``validate`` and ``info``: 0 valid (warnings allowed), 1 invalid, 2 usage
error.  None of these commands needs torch or jax, and none runs code from the problem
unless ``--trust-code`` is given.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

_PROBLEM = click.Path(exists=True, dir_okay=False, path_type=Path)
_STYLE = {"error": "red", "warning": "yellow", "info": "cyan"}


def _parse_limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                  ) -> dict[str, int]:
    from petab_sciml.limits import parse_limit

    out = {}
    for text in values:
        try:
            name, value = parse_limit(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        out[name] = value
    return out


confine_option = click.option(
    "--confine", is_flag=True,
    help="Open no file outside the problem's folder (symlinks resolved): each is an error "
         "instead (for services and CI jobs that check uploaded problems; see "
         "docs/security.md).")
"""The ``--confine`` flag of ``validate`` and ``info``."""

limit_option = click.option(
    "--limit", "limits", multiple=True, metavar="NAME=VALUE", callback=_parse_limits,
    help="Raise (or lower) a budget on what input files may cost, e.g. max_elements=1e9 "
         "for a trusted huge network (repeatable; see docs/validation.md).")
"""The ``--limit NAME=VALUE`` option: a dict of budgets for
:func:`petab_sciml.limits.use_limits`."""


@click.command("validate")
@click.argument("problem", type=_PROBLEM)
@click.option("--json", "as_json", is_flag=True, help="Print the issues as JSON.")
@click.option("--trust-code", "--trust", "trust_code", is_flag=True,
              help="Load networks whose format runs code (torchscript, pytorch).")
@click.option("--libpetab/--no-libpetab", default=False,
              help="Also run libpetab-python's PEtab v2 + SciML linter (libpetab >= 0.10, "
                   "Python >= 3.12) and show its findings beside ours, tagged LIBPETAB; "
                   "they never decide validity, and it runs only on problems without other "
                   "errors. Off by default: it can be much slower.")
@confine_option
@limit_option
def validate(problem: Path, as_json: bool, trust_code: bool, libpetab: bool, confine: bool,
             limits: dict[str, int]) -> None:
    """Validate a PEtab SciML problem (its YAML file).

    Runs the PEtab v2 checks and every rule of the SciML specification (see
    docs/validation.md), checks network files through their format plugins and array
    files against the networks.  Exits 0 if valid, 1 if not.
    """
    from petab_sciml.limits import use_limits
    from petab_sciml.problem.validate import validate_problem

    with use_limits(**limits):
        report = validate_problem(problem, trust_code=trust_code, libpetab=libpetab,
                                  confine=confine)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_issues(report)
    sys.exit(0 if report.ok else 1)


def _print_issues(report) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    for issue in report.issues:
        sev = str(issue.severity)
        where = issue.location() or "-"
        console.print(f"[{_STYLE[sev]}]{sev:<7}[/] [bold]{issue.code}[/] "
                      f"{escape(where)}: {escape(issue.message)}")
    errors, warnings = len(report.issues.errors), len(report.issues.warnings)
    verdict = "[green]valid[/]" if report.ok else "[red]invalid[/]"
    console.print(f"{escape(str(report.path))}: {verdict} ({errors} error(s), "
                  f"{warnings} warning(s))")


@click.command("info")
@click.argument("problem", type=_PROBLEM, required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--trust-code", "--trust", "trust_code", is_flag=True,
              help="Load networks whose format runs code (torchscript, pytorch).")
@click.option("--versions", is_flag=True,
              help="Print the versions of Python, JAX, diffrax, PyTorch, ... in use.")
@confine_option
@limit_option
def info(problem: Path | None, as_json: bool, trust_code: bool, versions: bool,
         confine: bool,
         limits: dict[str, int]) -> None:
    """Show a problem's networks and every parameter-table row, resolved.

    Exits 1 if the problem is invalid (run validate for the issues).  With
    ``--versions`` (PROBLEM optional) it prints the library versions in use first.
    """
    from petab_sciml.limits import use_limits
    from petab_sciml.problem.info import problem_info

    if versions:
        _print_versions(as_json and problem is None)
    if problem is None:
        if not versions:
            raise click.UsageError("give a PROBLEM (or --versions)")
        return
    with use_limits(**limits):
        data = problem_info(problem, trust_code=trust_code, confine=confine)
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        _print_info(data)
    sys.exit(0 if data["valid"] else 1)


def _print_versions(as_json: bool) -> None:
    from petab_sciml.versions import installed_versions

    found = installed_versions()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for name, version in found.items():
        click.echo(f"{name:20} {version or '(not installed)'}")


def _fmt(value) -> str:
    return "" if value is None else str(value)


def _print_info(data: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(120, Console().width))
    nets = Table(title="Networks")
    for column in ("id", "format", "hybridization", "layers", "parameters", "estimated",
                   "inputs", "outputs", "dropout"):
        nets.add_column(column, overflow="fold")
    for n in data["networks"]:
        layers = ", ".join(f"{lay['id']}:{lay['type']}" for lay in n.get("layers", [])) \
            if n["loaded"] else "(not loaded)"
        dropout = ", ".join(f"{k}={v:g}" for k, v in n.get("dropout", {}).items())
        nets.add_row(n["id"], _fmt(n["format"]), n["hybridization"], layers,
                     _fmt(n.get("parameter_count")), _fmt(n.get("estimated")),
                     _fmt(n.get("inputs")), _fmt(n.get("outputs")), dropout)
    console.print(nets)
    rows = Table(title="Parameter table (resolved)")
    for column in ("id", "entity", "targets", "elements", "wins", "nominal", "estimate",
                   "bounds", "prior", "dropout"):
        rows.add_column(column, overflow="fold")
    for p in data["parameters"]:
        bounds = "" if p["lower"] is None and p["upper"] is None else \
            f"[{_fmt(p['lower'])}, {_fmt(p['upper'])}]"
        rows.add_row(p["id"], _fmt(p["entity"]), ", ".join(p["targets"]), str(p["elements"]),
                     str(p["effective_elements"]), _fmt(p["nominal"]), _fmt(p["estimate"]),
                     bounds, _fmt(p["prior"]), _fmt(p["dropout"]))
    console.print(rows)
    verdict = "valid" if data["valid"] else "invalid"
    console.print(f"{data['problem']}: {verdict} ({data['errors']} error(s), "
                  f"{data['warnings']} warning(s); run validate for details)")


@click.command("upgrade")
@click.argument("problem", type=_PROBLEM)
@click.argument("destination", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files of the same names in "
              "DESTINATION.")
@limit_option
def upgrade(problem: Path, destination: Path, force: bool, limits: dict[str, int]) -> None:
    """Rewrite a problem of an older PEtab SciML draft in the current format.

    Reads PROBLEM (its YAML file) and writes the problem into the folder DESTINATION:
    `problems:` and `parameter_file` become top-level file lists, measurements'
    simulationConditionId an experiment table, per-target condition columns condition
    rows, simulation-network assignments a hybridization table (docs/problems.md).  Prints
    each change, then validates the result.  Exits 0 if the result is valid (or nothing
    needed upgrading), 1 otherwise.
    """
    from petab_sciml.limits import use_limits
    from petab_sciml.problem.upgrade import UpgradeError, upgrade_problem
    from petab_sciml.problem.validate import validate_problem

    try:
        with use_limits(**limits):
            result = upgrade_problem(problem, destination, force=force)
    except UpgradeError as exc:
        raise click.ClickException(f"cannot upgrade: {exc}") from None
    if result.problem is None:
        click.echo(f"{problem}: already in the current format; nothing written")
        return
    click.echo(f"{problem} -> {result.problem}:")
    for change in result.changes:
        click.echo(f"  - {change}")
    with use_limits(**limits):
        report = validate_problem(result.problem)
    if report.ok:
        warnings = len(report.issues.warnings)
        click.echo(f"{result.problem}: valid ({warnings} warning(s))")
        return
    _print_issues(report)
    sys.exit(1)
