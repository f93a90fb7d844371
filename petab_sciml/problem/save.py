"""Write a loaded problem back with new nominal values (e.g. trained ones).

:func:`save_problem` writes a complete PEtab SciML problem into a folder: every file the
problem lists, copied, except

* the parameter tables: each estimated mechanistic parameter's ``nominalValue`` is its new
  value (Python's shortest round-trip repr: reloading gives the same float64 bits), and
  every row mapped to network parameters says ``array``;
* the array files: a new file holds every array of every network (``parameters/<net>``,
  float64), and the original array files keep everything else (network inputs, ...) but
  their ``parameters/<net>`` groups; one left with nothing is dropped from the list.

The folder is written through :func:`petab_sciml.safe_write.staged_output`: built aside
and swapped in when complete, so a failure leaves nothing half-written; an existing
destination is replaced only with ``force``, and never one holding the problem's files.
``load_problem`` of the result gives back the same values, bitwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from petab_sciml.errors import PetabSciMLError

PARAMETERS_FILE = "parameters_trained.hdf5"


class SaveError(PetabSciMLError):
    """The problem cannot be written where asked."""


def values_of(problem: Any, values: Any) -> dict[str, Any]:
    """``{"mech": linear values, "nets": {...}}`` from a native model (anything with a
    ``values()`` method, as both backends' problem models have) or such a mapping."""
    if isinstance(values, Mapping):
        return {"mech": values.get("mech"), "nets": values.get("nets") or {}}
    getter = getattr(values, "values", None)
    if callable(getter):
        return getter()
    raise SaveError(f"cannot take parameter values from {type(values).__name__}: pass a "
                    "native problem model (problem.model()) or {'mech': ..., 'nets': ...}")


def save_problem(problem: Any, values: Any, out_dir: str | os.PathLike, *,
                 force: bool = False) -> Path:
    """Write ``problem`` with ``values`` as nominal values into ``out_dir``; returns the
    new ``problem.yaml``.  Raises :class:`SaveError` if ``out_dir`` exists and is not
    empty (unless ``force``) or is the problem's own folder."""
    plan = problem.plan
    if plan is None:
        raise SaveError("the problem was loaded with simulation=False: no parameter plan")
    w = plan.pack(values_of(problem, values))
    from petab_sciml.errors import OutputError
    from petab_sciml.safe_write import staged_output

    out_dir = Path(out_dir)
    cfg = problem.config
    inputs = [cfg.path, *(cfg.resolve(n) for n in _listed(cfg))]
    if out_dir.resolve() == cfg.base.resolve():
        raise SaveError(f"{out_dir} is the problem's own folder: choose another folder",
                        file=out_dir)
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        force = True   # an empty folder is not data to protect
    try:
        with staged_output(out_dir, overwrite=force, inputs=inputs, folder=True) as tmp:
            tmp.mkdir()
            _write(problem, plan, w, tmp)
    except OutputError as exc:
        raise SaveError(str(exc), file=out_dir) from None
    return out_dir / cfg.path.name


def _listed(cfg: Any) -> list[str]:
    """Every file name the problem lists."""
    names = [e["location"] for e in cfg.model_files.values()]
    names += [n for files in cfg.files.values() for n in files]
    names += [*cfg.hybridization_files, *cfg.array_files]
    names += [e.location for e in cfg.networks.values() if e.location]
    return names


# --------------------------------------------------------------------------- writing
def _write(problem: Any, plan: Any, w: np.ndarray, folder: Path) -> None:
    from petab_sciml.problem.folder import FilePlacer

    cfg = problem.config
    raw = yaml.safe_load(cfg.path.read_text(encoding="utf-8"))
    placer = FilePlacer(cfg.resolve, folder)
    place, placed = placer.place, placer.placed

    network_rows = {r.id for net in problem.parameters.values() for r in net.rows}
    mech = dict(zip(plan.mech_ids, w[: plan.n_mech].tolist()))

    def parameter_table(source: Path, dest: Path) -> None:
        dest.write_text(_rewrite_parameters(source, mech, network_rows), encoding="utf-8")

    for key in ("model_files",):
        for entry in (raw.get(key) or {}).values():
            entry["location"] = place(entry["location"])
    for key in ("measurement_files", "observable_files", "experiment_files",
                "condition_files", "mapping_files"):
        if raw.get(key):
            raw[key] = [place(n) for n in raw[key]]
    raw["parameter_files"] = [place(n, parameter_table) for n in raw.get("parameter_files")
                              or []]
    if cfg.extension_key is not None:
        _write_extension(raw["extensions"][cfg.extension_key], plan, w, folder, place,
                         placed)
    (folder / cfg.path.name).write_text(yaml.safe_dump(raw, sort_keys=False),
                                        encoding="utf-8")


def _write_extension(ext: dict, plan: Any, w: Any, folder: Path, place: Any,
                     placed: dict[str, str]) -> None:
    """The SciML extension's files placed in ``folder`` and the network parameter
    values ``w`` written to a new array file listed in ``ext`` (a problem without the
    extension has no network values to write)."""
    ext["hybridization_files"] = [place(n) for n in ext.get("hybridization_files") or []]
    nets_key = "neural_networks" if "neural_networks" in ext else "neural_nets"
    for entry in (ext.get(nets_key) or {}).values():
        entry["location"] = place(entry["location"])
    net_ids = [n.id for n in plan.networks]
    kept = []
    for name in ext.get("array_files") or []:
        new = place(name, lambda s, d: _copy_without_parameters(s, d, net_ids))
        if _has_data(folder / new):
            kept.append(new)
        else:
            (folder / new).unlink()
    from petab_sciml.arrays import write_array_file
    from petab_sciml.problem.folder import unique_name

    name = unique_name(PARAMETERS_FILE, [*placed.values()])
    write_array_file(folder / name, parameters={
        net_id: layers for net_id, layers in plan.unpack(w)["nets"].items() if layers})
    ext["array_files"] = [*kept, name]


def _rewrite_parameters(source: Path, mech: Mapping[str, float],
                        network_rows: set[str]) -> str:
    lines = source.read_text(encoding="utf-8").splitlines()
    if not lines:
        return ""
    header = lines[0].split("\t")
    try:
        pid_col, nominal_col = header.index("parameterId"), header.index("nominalValue")
    except ValueError as exc:
        raise SaveError(f"parameter table without {exc.args[0].split()[0]} column",
                        file=source) from None
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split("\t")
        if len(cells) > max(pid_col, nominal_col):
            pid = cells[pid_col].strip()
            if pid in mech:
                cells[nominal_col] = repr(float(mech[pid]))
            elif pid in network_rows:
                cells[nominal_col] = "array"
        out.append("\t".join(cells))
    return "\n".join(out) + "\n"


def _copy_without_parameters(source: Path, dest: Path, net_ids: list[str]) -> None:
    """Copy array file ``source`` without its ``parameters/<net>`` groups."""
    import h5py

    with h5py.File(source, "r") as src, h5py.File(dest, "w", libver=("v110", "latest")) as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        for name in src:
            if name == "parameters":
                group = src[name]
                rest = [n for n in group if n not in net_ids]
                if rest:
                    out = dst.create_group(name)
                    for n in rest:
                        src.copy(group[n], out, name=n)
                continue
            src.copy(src[name], dst, name=name)


def _has_data(path: Path) -> bool:
    import h5py

    with h5py.File(path, "r") as h5:
        return any(name != "metadata" for name in h5)
