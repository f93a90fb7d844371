"""The result of a multi-start fit, and its HDF5 file.

``results.h5``::

    attrs: problem, backend, optimizer, lr, steps, seed, starts, best, parameter_ids
    parameters/table            every start's final values: one row per element id,
                                one column per start (in start order)
    parameters attrs: names     the named values, in the order of the table's rows:
                                each estimated mechanistic parameter by its PEtab id,
                                each network array as ``net.parameters[layer].array``
                      ids       the table's rows: the mechanistic ids and every network
                                array element as ``net.parameters[layer].array[i, j]``
                                (C order), as the mapping table writes them
                      starts    the start of each column
    starts/<k>/objective        final objective (negative log-posterior, eval mode)
    starts/<k>/trace            loss before each step
    starts/<k>/w                final linear parameter vector (plan.pack layout)
    starts/<k>/mech             final mechanistic parameters on their parameterScale
    starts/<k>/parameters/<name>  the final value of each named value (mechanistic:
                                  a scalar on the linear scale; network: the array in
                                  PyTorch layout), as ``problem.save`` writes them
    starts/<k>/optimizer/<name> the optimizer state's arrays
    starts/<k> attrs: ok, steps, seconds, interrupted, stopped_at

``seconds`` is a start's wall time; starts trained together (one vmapped JAX batch)
share their batch's.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.fit.task import StartResult

Layout = tuple[tuple[str, int, tuple[int, ...]], ...]
"""``(name, offset in w, shape)`` of every named value of a plan's ``w``."""


def parameter_layout(plan: Any) -> Layout:
    """The named values of ``plan``'s ``w``: each estimated mechanistic parameter by its
    PEtab id (shape ``()``, linear scale), then each network array (parameters and
    buffers) as ``net.parameters[layer].array`` in PyTorch layout."""
    layout: list[tuple[str, int, tuple[int, ...]]] = [
        (pid, i, ()) for i, pid in enumerate(plan.mech_ids)]
    for net in plan.networks:
        layout += [(f"{net.id}.parameters[{s.layer}].{s.array}", s.offset, tuple(s.shape))
                   for s in net.arrays]
    return tuple(layout)


def element_ids(names: list[str], shapes: list[tuple[int, ...]]) -> list[str]:
    """One id per scalar of the named values: the name of a scalar, and
    ``name[i, j]`` for each element of an array, in C order."""
    ids: list[str] = []
    for name, shape in zip(names, shapes):
        if not shape:
            ids.append(name)
        else:
            ids += [f"{name}[{', '.join(map(str, index))}]" for index in np.ndindex(*shape)]
    return ids


def named_values(layout: Layout, w: np.ndarray) -> dict[str, np.ndarray]:
    """``w`` by name (:func:`parameter_layout`): float64 copies, scalars of shape ``()``."""
    w = np.asarray(w, dtype=np.float64)
    return {name: w[offset: offset + math.prod(shape)].reshape(shape).copy()
            for name, offset, shape in layout}


@dataclass
class FitResult:
    """Every start of a fit, best first in :attr:`ranked`."""

    starts: list[StartResult]
    settings: dict[str, Any]
    parameter_ids: tuple[str, ...] = ()
    out: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    """What was written (``results``, ``best``, plots by name)."""
    layout: Layout = ()
    """The named values of ``w`` (:func:`parameter_layout`); fills every start's
    :attr:`~petab_sciml.fit.task.StartResult.parameters` that is empty."""

    def __post_init__(self) -> None:
        for r in self.starts:
            if not r.parameters and self.layout:
                r.parameters = named_values(self.layout, r.w)

    def parameters(self, start: int | None = None) -> dict[str, np.ndarray]:
        """The final values of ``start`` (default: the best start) by name: PEtab ids
        (linear scale) and ``net.parameters[layer].array`` (PyTorch layout)."""
        chosen = self.best if start is None else next(
            (r for r in self.starts if r.start == start), None)
        if chosen is None:
            raise KeyError(f"no start {start}; the starts are "
                           f"{', '.join(str(r.start) for r in self.starts)}")
        return chosen.parameters

    @property
    def ranked(self) -> list[StartResult]:
        """Starts sorted by final objective (non-finite last)."""
        return sorted(self.starts, key=lambda r: (not np.isfinite(r.value), r.value))

    @property
    def best(self) -> StartResult:
        return self.ranked[0]

    @property
    def objectives(self) -> np.ndarray:
        """Final objectives in start order."""
        return np.array([r.value for r in sorted(self.starts, key=lambda r: r.start)])

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``results.h5`` atomically."""
        import h5py

        from petab_sciml.safe_write import staged_output

        path = Path(path)
        with staged_output(path, overwrite=True) as tmp, h5py.File(tmp, "w") as h5:
            for key, value in self.settings.items():
                h5.attrs[key] = value if value is not None else ""
            h5.attrs["best"] = self.best.start
            h5.attrs["parameter_ids"] = list(self.parameter_ids) or [""]
            self._save_parameter_table(h5)
            for r in self.starts:
                g = h5.create_group(f"starts/{r.start}")
                g["objective"] = r.value
                g["trace"] = r.trace
                g["w"] = r.w
                g["mech"] = r.mech
                named = g.create_group("parameters")
                for name, value in r.parameters.items():
                    named[name] = value
                opt = g.create_group("optimizer")
                for name, value in r.optimizer_state.items():
                    opt[name.replace("/", "|")] = np.asarray(value)
                g.attrs.update(ok=r.ok, steps=r.steps, seconds=r.seconds,
                               interrupted=r.interrupted, stopped_at=r.stopped_at)
        return path

    def _save_parameter_table(self, h5: Any) -> None:
        ordered = sorted(self.starts, key=lambda r: r.start)
        if not ordered or not ordered[0].parameters:
            return
        names = list(ordered[0].parameters)
        shapes = [np.shape(v) for v in ordered[0].parameters.values()]
        group = h5.create_group("parameters")
        group["table"] = np.stack(
            [np.concatenate([np.ravel(r.parameters[n]) for n in names]) for r in ordered],
            axis=1)
        group.attrs["names"] = names
        group.attrs["ids"] = element_ids(names, shapes)
        group.attrs["starts"] = [r.start for r in ordered]

    @classmethod
    def load(cls, path: str | os.PathLike) -> FitResult:
        """Read ``results.h5``, as untrusted input (:mod:`.results_file`: only this
        layout's entries, hard links of the file, numeric and within the budgets);
        raises :class:`~petab_sciml.fit.artifacts.ArtifactError` naming the entry."""
        from petab_sciml.fit.results_file import read_results

        settings, ids, starts = read_results(Path(path))
        return cls(sorted(starts, key=lambda r: r.start), settings, ids, Path(path).parent)


def summary_table(result: FitResult, plan: Any, console: Any = None) -> None:
    """The starts, best first, as a rich table on ``console``."""
    from rich.console import Console
    from rich.table import Table

    from petab_sciml.simulation.scales import from_scale

    console = console or Console()
    scales = plan.mech_scale or ("lin",) * plan.n_mech
    table = Table(title=f"fit: {len(result.starts)} start(s), best first")
    table.add_column("rank", justify="right")
    table.add_column("start", justify="right")
    table.add_column("objective", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("time", justify="right")
    for pid in plan.mech_ids:
        table.add_column(pid, justify="right")
    for rank, r in enumerate(result.ranked, 1):
        mech = from_scale(r.mech, scales)
        note = "" if r.ok else " (failed)"
        steps = f"{r.steps}" + (f" (stopped at {r.stopped_at})" if r.stopped_at else "")
        table.add_row(str(rank), str(r.start), f"{r.value:.6g}{note}", steps,
                      f"{r.seconds:.1f} s", *(f"{v:.4g}" for v in mech))
    console.print(table)
