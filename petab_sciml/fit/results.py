"""The result of a multi-start fit, and its HDF5 file.

``results.h5``::

    attrs: problem, backend, optimizer, lr, steps, seed, starts, best, parameter_ids
    starts/<k>/objective        final objective (negative log-posterior, eval mode)
    starts/<k>/trace            loss before each step
    starts/<k>/w                final linear parameter vector (plan.pack layout)
    starts/<k>/mech             final mechanistic parameters on their parameterScale
    starts/<k>/optimizer/<name> the optimizer state's arrays
    starts/<k> attrs: ok, steps, seconds, interrupted, stopped_at
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from petab_sciml.fit.task import StartResult


@dataclass
class FitResult:
    """Every start of a fit, best first in :attr:`ranked`."""

    starts: list[StartResult]
    settings: dict[str, Any]
    parameter_ids: tuple[str, ...] = ()
    out: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    """What was written (``results``, ``best``, plots by name)."""

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
            for r in self.starts:
                g = h5.create_group(f"starts/{r.start}")
                g["objective"] = r.value
                g["trace"] = r.trace
                g["w"] = r.w
                g["mech"] = r.mech
                opt = g.create_group("optimizer")
                for name, value in r.optimizer_state.items():
                    opt[name.replace("/", "|")] = np.asarray(value)
                g.attrs.update(ok=r.ok, steps=r.steps, seconds=r.seconds,
                               interrupted=r.interrupted, stopped_at=r.stopped_at)
        return path

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
