"""``petab-sciml convert IN OUT [--params PARAMS.hdf5]``: network files between formats.

The lead registers :data:`convert` on the main group (``main.add_command(convert)``).
"""

from __future__ import annotations

from pathlib import Path

import click

from petab_sciml.cli_problem import limit_option
from petab_sciml.errors import MissingExtraError, OutputError, PetabSciMLError


class RefusedOutput(click.ClickException):
    """A refused output (see :mod:`petab_sciml.safe_write`): a usage error, exit 2."""

    exit_code = 2


def _parse_shape(text: str) -> tuple[str, list[int | str | None]]:
    name, eq, dims = text.partition("=")
    if not eq or not name:
        raise click.BadParameter(f"expected NAME=D0,D1,... got {text!r}")
    out: list[int | str | None] = []
    for d in dims.split(","):
        d = d.strip()
        if not d:
            continue
        out.append(int(d) if d.lstrip("-").isdigit() else (None if d == "?" else d))
    return name.strip(), out


@click.command("convert")
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option("--params-in", type=click.Path(path_type=Path), default=None,
              help="PEtab SciML array file to read the parameters from (replacing any "
                   "that IN carries).")
@click.option("--params-out", type=click.Path(path_type=Path), default=None,
              help="PEtab SciML array file to write the parameters to.")
@click.option("--params", "params", type=click.Path(path_type=Path), default=None,
              help="Shortcut: --params-out when IN carries weights (ONNX -> YAML), "
                   "--params-in when only OUT does (YAML -> ONNX).")
@click.option("--from", "src_format", default=None,
              help="Format of IN (default: from its extension).")
@click.option("--to", "dst_format", default=None,
              help="Format of OUT (default: from its extension).")
@click.option("--net-id", default=None, help="Network id (default: from the source).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D0,D1,...",
              help="Shape of a network input for writers that record it (ONNX); a dim "
                   "may be a name or ? for a dynamic size. Repeatable.")
@click.option("--trust-code", is_flag=True,
              help="Allow reading formats whose loading runs code from the file.")
@click.option("--portable", is_flag=True,
              help="YAML output: write only what the official petab_sciml reader and "
                   "libpetab know (the specification's layers and functions), or write "
                   "nothing and name each node that has no portable form.")
@click.option("--show-names", is_flag=True,
              help="Print where each ONNX initializer went (ONNX sources).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None,
              help="Float type of the output, for formats that store one (ONNX; default "
                   "float32, with a warning when float64 parameters change).")
@click.option("--force", is_flag=True,
              help="Replace an existing OUT (and update an existing --params array file: "
                   "only parameters/<net> is replaced, its other groups are kept).")
@click.option("--confine", is_flag=True,
              help="Read nothing outside IN's folder (symlinks resolved): IN, the files it "
                   "names and the parameters read must lie there (see docs/security.md).")
@limit_option
def convert(src: Path, dst: Path, params_in: Path | None, params_out: Path | None,
            params: Path | None,
            src_format: str | None, dst_format: str | None, net_id: str | None,
            input_shapes: tuple[str, ...], trust_code: bool, show_names: bool,
            portable: bool, dtype: str | None, force: bool, confine: bool,
            limits: dict[str, int]) -> None:
    """Convert the network file IN to OUT (YAML, ONNX, ...; formats by extension).

    OUT must not be IN, nor exist unless --force; it is written to a temporary path
    next to it and moved in place when complete.  Exit status: 0 done, 1 bad input,
    2 usage error or refused output.
    """
    from petab_sciml.limits import use_limits

    with use_limits(**limits):
        _convert(src, dst, params, params_in, src_format, dst_format, net_id, input_shapes,
                 trust_code, show_names, portable, force, confine, dtype, params_out)


def _convert(src: Path, dst: Path, params: Path | None, params_in: Path | None,
             src_format: str | None, dst_format: str | None, net_id: str | None,
             input_shapes: tuple[str, ...], trust_code: bool, show_names: bool,
             portable: bool, force: bool, confine: bool = False,
             dtype: str | None = None, params_out: Path | None = None) -> None:
    from petab_sciml.convert import carries_parameters
    from petab_sciml.convert import convert as run_convert
    from petab_sciml.plugins import format_for_path

    try:
        shapes = dict(_parse_shape(s) for s in input_shapes) if input_shapes else None
        if params is not None and (params_in is not None or params_out is not None):
            raise click.UsageError("--params is the shortcut for --params-in or "
                                   "--params-out; give those two instead")
        if params is not None:
            reads, _ = carries_parameters(format_for_path(src, src_format))
            _, writes = carries_parameters(format_for_path(dst, dst_format))
            if reads:
                params_out = params
            elif writes:
                params_in = params
            else:
                raise click.UsageError("neither format carries weights: --params has "
                                       "nothing to read or write")
        result = run_convert(src, dst, src_format=src_format, dst_format=dst_format,
                             params_out=params_out, params_in=params_in,
                             trust_code=trust_code, net_id=net_id, input_shapes=shapes,
                             portable=portable, force=force, confine=confine,
                             dtype=dtype)
        if show_names and result.src_format == "onnx":
            from petab_sciml.formats.onnx import import_onnx

            click.echo(import_onnx(src, net_id=net_id).format_names())
    except OutputError as exc:
        raise RefusedOutput(str(exc)) from None
    except (PetabSciMLError, MissingExtraError) as exc:
        raise click.ClickException(str(exc)) from None
    for message in result.warnings:
        click.echo(f"warning: {message}", err=True)
    net = result.network
    click.echo(f"wrote {dst} ({result.dst_format}): network {net.id!r}, "
               f"{len(net.layers)} layers, {len(net.nodes)} nodes, "
               f"{net.parameter_count()} trainable parameters")
    if result.params_written is not None:
        click.echo(f"wrote {result.params_written} (parameters/{net.id})")
