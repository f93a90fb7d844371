"""Checks of noise values and measurements known before any simulation (PEtab: the noise
standard deviation or scale is positive; a measurement of a log- or log10-scale
observable is positive).

* ``noiseFormula`` that is a number: it must be > 0 (``NOISE_VALUE_INVALID``, located at
  the observable table's row).
* ``noiseFormula`` that is one noise placeholder (``noiseParameter1_obs``, or a name of
  the row's ``noisePlaceholders``): a number in the measurement table's
  ``noiseParameters`` at its position must be > 0 (``NOISE_VALUE_INVALID``, located at
  the measurement's row).
* A measurement of an observable with a log scale (``observableTransformation`` ``log``
  / ``log10``, or ``noiseDistribution`` ``log-normal`` / ``log-laplace`` and the like)
  must be > 0 (``MEASUREMENT_VALUE_INVALID``).

Noise values that depend on parameters are only known at run time: the evaluation then
reports ``ok = False`` (``petab_sciml.simulation.objective``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from petab_sciml.problem.context import ProblemContext
from petab_sciml.problem.tables import parse_float

LOG_TRANSFORMS = ("log", "log10")


@dataclass
class _NoiseModel:
    log_scale: bool
    placeholder: int | None
    """Position in ``noiseParameters`` of the value the noise formula is, or None."""


def check_noise_values(ctx: ProblemContext) -> None:
    """Add the issues of the module docstring to ``ctx.issues``."""
    models = _observable_noise(ctx)
    for table, row in ctx.rows("measurement"):
        model = models.get(row["observableId"])
        if model is None:
            continue
        value = parse_float(row["measurement"])
        if model.log_scale and value is not None and math.isfinite(value) and value <= 0:
            ctx.issues.add("MEASUREMENT_VALUE_INVALID", f"measurement must be > 0 for the "
                           f"log-scale observable {row['observableId']!r}, got "
                           f"{row['measurement']!r}", file=table.file, row=row.line,
                           column="measurement")
        if model.placeholder is None:
            continue
        cells = [c.strip() for c in row["noiseParameters"].split(";")]
        if model.placeholder < len(cells):
            sigma = parse_float(cells[model.placeholder])
            if sigma is not None and not sigma > 0:
                ctx.issues.add("NOISE_VALUE_INVALID", f"noise parameter "
                               f"{model.placeholder + 1} is the noise of observable "
                               f"{row['observableId']!r} and must be > 0, got "
                               f"{cells[model.placeholder]!r}", file=table.file,
                               row=row.line, column="noiseParameters")


def _observable_noise(ctx: ProblemContext) -> dict[str, _NoiseModel]:
    """Per observable id: its noise model; numeric noise formulas <= 0 are reported."""
    out: dict[str, _NoiseModel] = {}
    for table, row in ctx.rows("observable"):
        oid = row["observableId"]
        transform = (row["observableTransformation"] or "lin").strip().lower()
        dist = (row["noiseDistribution"] or "normal").strip().lower()
        log_scale = transform in LOG_TRANSFORMS or dist.startswith("log")
        text = row["noiseFormula"].strip()
        sigma = parse_float(text) if text else None
        if sigma is not None and not sigma > 0:
            ctx.issues.add("NOISE_VALUE_INVALID", f"the noise of observable {oid!r} must be "
                           f"> 0, got noiseFormula {text!r}", file=table.file, row=row.line,
                           column="noiseFormula")
        out[oid] = _NoiseModel(log_scale, _placeholder_position(text, oid,
                                                                row["noisePlaceholders"]))
    return out


def _placeholder_position(formula: str, oid: str, placeholders: str) -> int | None:
    """Position of ``formula`` among the row's noise placeholders (the
    ``noisePlaceholders`` column, else PEtab v1's ``noiseParameter<n>_<observableId>``)."""
    names = [p.strip() for p in placeholders.split(";") if p.strip()]
    if names:
        return names.index(formula) if formula in names else None
    match = re.fullmatch(rf"noiseParameter(\d+)_{re.escape(oid)}", formula)
    return int(match.group(1)) - 1 if match and int(match.group(1)) >= 1 else None
